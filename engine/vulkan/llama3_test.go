package vulkan

import (
	"math"
	"math/rand"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// llama3Rope gives m Llama 3's RoPE: base 500000, Llama 3.2's frequency
// factors (rope_freqs.weight: factor 32, low and high frequency factors 1
// and 4, original context 8192) and linear scaling by 4 on top
// (rope.scaling.factor), as if the file had them.
func llama3Rope(t *testing.T, m *mod.Model) {
	t.Helper()
	c := &m.Config
	factors, err := mod.Llama3RopeFactors(c.HeadDim, 500000, 32, 1, 4, 8192)
	require.NoError(t, err)
	c.RopeBase, c.RopeScale = 500000, 4
	raw := f32Bytes(factors)
	m.Weights.RopeFreqs, err = mod.NewMat(mod.TensorRopeFreqs, gguf.TypeF32, []uint64{uint64(len(factors))}, raw)
	require.NoError(t, err)
}

// TestLlama3RoPE: a MoD model given Llama 3's RoPE runs on the GPU as on
// the CPU at every rope site, all reading the model's one table: token by
// token under every test profile (the fused decode attention, or decode_kv
// apart), as one batched prompt (prefill's rope kernel) and as an eval
// window; the compact caches hold the CPU's rotated keys. The table
// changes the logits (checked), so a site that ignored it would fail.
// Tolerances as TestPrefillSplits: only summation orders differ.
func TestLlama3RoPE(t *testing.T) {
	dev := openDevice(t, true)
	path := "../../testdata/mod/mod-trained.gguf"
	tokens := fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-router"]
	require.Greater(t, len(tokens), 8)

	plain := openModel(t, path)
	m := openModel(t, path)
	llama3Rope(t, m)
	require.NotEqual(t, plain.RopeFreqs(), m.RopeFreqs())
	want, _ := cpuEval(t, m, tokens)
	other, _ := cpuEval(t, plain, tokens)
	assert.Greater(t, maxAbsDiff(want, other), 100*tolLogits, "the RoPE table changes the logits")

	for name, prof := range testProfiles(t, dev) {
		t.Run("decode/"+name, func(t *testing.T) {
			checkAgainstCPUWith(t, dev, m, mod.RoutingRouter, tokens, Options{DeviceProfile: prof, KVType: "f32"})
		})
	}
	t.Run("prefill", func(t *testing.T) {
		run := newRunner(t, dev, m, mod.RoutingRouter)
		got, err := run.Feed(tokens)
		require.NoError(t, err)
		cpu, err := m.NewState(mod.RoutingRouter)
		require.NoError(t, err)
		last, err := cpu.Forward(tokens, false)
		require.NoError(t, err)
		assert.Empty(t, closeErr(last, got, tolLogits))
		assertCaches(t, cpu, run, tolF32)
	})
	t.Run("eval", func(t *testing.T) {
		e := newEvaluator(t, dev, m)
		got, err := e.Eval(tokens)
		require.NoError(t, err)
		assert.Empty(t, closeErr(want, got, tolLogits))
		t.Logf("max |logit diff| vs CPU %.2g; vs base 10000 %.2g", maxAbsDiff(want, got), maxAbsDiff(want, other))
	})
}

// TestTiedOutput: mod-trained has no output.weight, as Llama 3.2: the
// decode step, the batched prompt and eval classify with the token
// embedding's one upload (no second copy of the largest matrix), and their
// logits are the CPU's (TestEvalFixtures checks them against PyTorch too).
func TestTiedOutput(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	require.Equal(t, mod.TensorTokenEmbd, m.Weights.Output.Name, "the fixture is tied")
	tokens := fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-router"]
	run := newRunner(t, dev, m, mod.RoutingRouter)
	assert.Same(t, run.w.tokenEmbd.buf, run.w.output.buf, "one upload")
	got, err := run.Feed(tokens)
	require.NoError(t, err)
	cpu, err := m.NewState(mod.RoutingRouter)
	require.NoError(t, err)
	want, err := cpu.Forward(tokens, false)
	require.NoError(t, err)
	assert.Empty(t, closeErr(want, got, tolLogits), "batched prompt")
	e := newEvaluator(t, dev, m)
	assert.Same(t, e.r.w.tokenEmbd.buf, e.r.w.output.buf, "one upload")
	all, err := e.Eval(tokens)
	require.NoError(t, err)
	wantAll, _ := cpuEval(t, m, tokens)
	assert.Empty(t, closeErr(wantAll, all, tolLogits), "eval")
}

// randomMat is rows x cols of normal values times std, stored as typ.
func randomMat(t *testing.T, rng *rand.Rand, name string, typ gguf.TensorType, rows, cols int, std float64) mod.Mat {
	t.Helper()
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * std)
	}
	data, err := gguf.Quantize(typ, v)
	require.NoError(t, err)
	dims := []uint64{uint64(cols), uint64(rows)}
	if rows == 1 {
		dims = dims[:1]
	}
	m, err := mod.NewMat(name, typ, dims, data)
	require.NoError(t, err)
	return m
}

// TestLargeVocabulary: Llama 3's vocabulary of 128,256 tokens, its output
// tied to an F16 token embedding, with a device profile whose binding range
// is cut to 4 MiB, so that what a 1B model's 525 MB F16 head does under
// lavapipe's 128 MiB happens here at a cheap width (d 64, one block): the
// head is uploaded in pieces (each a matvec in decode, a matmul in the
// batched graph), and 20 rows of logits (10 MB) are computed in pieces of
// rows (opsInPieces) by Score (whose buffer is sized for the whole ubatch)
// and by eval. UBatch is 300, so Score's logits buffer (154 MB) is over
// the device's own range too: each piece binds its rows, never the whole
// buffer. Decode's logits and GPU argmax, the batched prompt's, the scored
// rows' and eval's agree with the CPU's.
func TestLargeVocabulary(t *testing.T) {
	dev := openDevice(t, true)
	c := mod.Config{Arch: "llama", NVocab: 128256, NEmbd: 64, NLayer: 1, NHead: 4, NKVHead: 2, HeadDim: 16, NFF: 96,
		ContextLen: 64, RMSEps: 1e-5, RopeBase: 500000, Routed: []bool{false}}
	rng := rand.New(rand.NewSource(11))
	f16 := gguf.TypeF16
	embd := randomMat(t, rng, mod.TensorTokenEmbd, f16, c.NVocab, c.NEmbd, 1)
	m := oneBlockModel(t, "Llama 3 vocabulary", c, embd, func(name string, rows, cols int) mod.Mat {
		return randomMat(t, rng, name, f16, rows, cols, 1/math.Sqrt(float64(cols)))
	})
	tokens := make([]int32, 20)
	for i := range tokens {
		tokens[i] = int32(rng.Intn(c.NVocab))
	}
	tokens[3], tokens[7] = 128255, 128000 // the last rows of the head

	prof := DeviceProfile(dev.Info())
	prof.MaxStorageBufferRange = 4 << 20
	opts := Options{DeviceProfile: &prof, KVType: "f32", UBatch: 300}
	run, err := New(dev, m, mod.RoutingRouter, opts)
	require.NoError(t, err)
	defer run.Close()
	require.Greater(t, len(run.w.output.pieces), 1, "the head is in pieces")
	tol := tolerance{abs: tolLogits, rel: 1e-5}

	cpu, err := m.NewState(mod.RoutingRouter)
	require.NoError(t, err)
	var want []float32
	for step, tok := range tokens {
		want, err = cpu.Forward([]int32{tok}, false)
		require.NoError(t, err)
		best, err := run.FeedArgmax([]int32{tok})
		require.NoError(t, err)
		require.Equal(t, stats.Argmax(want), best, "step %d: the GPU's argmax", step)
	}
	run.Reset()
	got, err := run.Feed(tokens)
	require.NoError(t, err)
	require.Empty(t, closeErr(want, got, tol.of(want)), "batched prompt")

	all, err := m.NewState(mod.RoutingRouter)
	require.NoError(t, err)
	wantAll, err := all.Forward(tokens, true)
	require.NoError(t, err)
	scored, err := run.Score(tokens)
	require.NoError(t, err)
	require.Empty(t, closeErr(wantAll, scored, tol.of(wantAll)), "scored rows")

	e, err := NewEvaluator(dev, m, opts)
	require.NoError(t, err)
	defer e.Close()
	evals, err := e.Eval(tokens)
	require.NoError(t, err)
	require.Empty(t, closeErr(wantAll, evals, tol.of(wantAll)), "eval window")
	t.Logf("head in %d pieces; max |logit diff|: prompt %.2g, scored %.2g, eval %.2g (max |logit| %.3g)", len(run.w.output.pieces),
		maxAbsDiff(want, got), maxAbsDiff(wantAll, scored), maxAbsDiff(wantAll, evals), maxAbsDiff(wantAll, make([]float32, len(wantAll))))
}
