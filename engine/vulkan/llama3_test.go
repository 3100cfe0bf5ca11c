package vulkan

import (
	"testing"

	"github.com/modrun/modrun/gguf"
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
			checkAgainstCPUWith(t, dev, m, mod.RoutingRouter, tokens, Options{DeviceProfile: prof, KVType: "f32"}, tolF32, tolF32)
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
	assert.Same(t, e.w.w.tokenEmbd.buf, e.w.w.output.buf, "one upload")
	all, err := e.Eval(tokens)
	require.NoError(t, err)
	wantAll, _ := cpuEval(t, m, tokens)
	assert.Empty(t, closeErr(wantAll, all, tolLogits), "eval")
}
