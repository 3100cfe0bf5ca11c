package synth

import (
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/quant"
	"github.com/modrun/modrun/tokenizer"
)

func TestParseShape(t *testing.T) {
	s, err := ParseShape("TinyLlama-1.1B")
	require.NoError(t, err)
	assert.Equal(t, Shapes[2], s)
	s, err = ParseShape("d=2048,L=4,h=32,kv=4,ff=5632,vocab=32000")
	require.NoError(t, err)
	assert.Equal(t, Shape{Name: "d2048-L4-h32-kv4-ff5632-v32000", NEmbd: 2048, NLayer: 4, NHead: 32, NKVHead: 4, NFF: 5632, NVocab: 32000, ContextLen: 2048}, s)
	s, err = ParseShape("d=256,L=2,ctx=4096")
	require.NoError(t, err)
	assert.Equal(t, Shape{Name: "d256-L2-h4-kv4-ff704-v32000", NEmbd: 256, NLayer: 2, NHead: 4, NKVHead: 4, NFF: 704, NVocab: 32000, ContextLen: 4096}, s)
	for in, want := range map[string]string{
		"gpt5":                   "not one of stories260k",
		"d=256":                  "d and L are required",
		"d=256,L=2,x=3":          `unknown key "x"`,
		"d=256,L=2,h=0":          "not KEY=POSITIVE-INTEGER",
		"d=256,L=2,L=3":          "L given twice",
		"d=250,L=2,h=4":          "not a multiple of h=4",
		"d=256,L=2,h=8,kv=3":     "not a multiple of kv=3",
		"d=96,L=2,h=32":          "head width d/h=3 is odd",
		"d=256,L=2,vocab=100":    "vocab=100 is below",
		"d=131072,L=2,h=1024":    "larger than modrun takes",
		"d=256,L=2,ff=twelve":    "not KEY=POSITIVE-INTEGER",
		"d=256,L=2,ctx=-5":       "not KEY=POSITIVE-INTEGER",
		"d=256,L=2,vocab=32000,": "not KEY=POSITIVE-INTEGER",
	} {
		_, err := ParseShape(in)
		assert.ErrorContains(t, err, want, in)
	}
}

// small is a shape that builds in milliseconds: every code path of the
// big ones (GQA, a quantizable width, a byte vocabulary plus pieces).
var small = Shape{Name: "small", NEmbd: 128, NLayer: 4, NHead: 4, NKVHead: 2, NFF: 352, NVocab: 1000, ContextLen: 256}

func build(t *testing.T, s Shape, o Options) *Model {
	t.Helper()
	m, err := Build(s, o)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

func TestBuildIsDeterministic(t *testing.T) {
	a := build(t, small, Options{Type: gguf.TypeQ8_0, Seed: 7})
	b := build(t, small, Options{Type: gguf.TypeQ8_0, Seed: 7})
	c := build(t, small, Options{Type: gguf.TypeQ8_0, Seed: 8})
	assert.Equal(t, a.Data, b.Data)
	assert.NotEqual(t, a.Data, c.Data)
	assert.Equal(t, "small-q8_0", a.Name)
	assert.Equal(t, "synthetic:small-q8_0", a.Path)
}

// The twin is the dense model plus routers: every tensor they share holds
// the same bytes, so MoD against dense compares like with like.
func TestTwinSharesTheDenseWeights(t *testing.T) {
	dense := build(t, small, Options{Type: gguf.TypeF16, Seed: 3})
	twin := build(t, small, Options{Type: gguf.TypeF16, Seed: 3, Capacity: 0.125})
	assert.Equal(t, mod.ArchLlama, dense.Config.Arch)
	assert.Equal(t, mod.ArchMoD, twin.Config.Arch)
	assert.Equal(t, []int{1, 3}, twin.Config.RoutedLayers())
	assert.Equal(t, small.NEmbd/2, twin.Config.PredictorHidden)
	for _, ti := range dense.File.Tensors {
		a, err := dense.File.TensorData(ti.Name)
		require.NoError(t, err)
		b, err := twin.File.TensorData(ti.Name)
		require.NoError(t, err, ti.Name)
		assert.Equal(t, a, b, ti.Name)
	}
	assert.Len(t, twin.File.Tensors, len(dense.File.Tensors)+4*2)
}

// Every weight type loads, and greedy decoding follows the successor cycle
// by a wide margin: the property that lets GPU and CPU agree on tokens.
func TestGreedyWalksTheCycleByAWideMargin(t *testing.T) {
	for _, typ := range []gguf.TensorType{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_1} {
		for _, capacity := range []float32{0, 0.125} {
			m := build(t, small, Options{Type: typ, Seed: 1, Capacity: capacity})
			checkGreedyCycle(t, m, 1, fmt.Sprintf("%s capacity %g", typ, capacity))
		}
	}
}

// checkGreedyCycle decodes 24 greedy tokens of m (built with seed) after a
// prompt and checks each is the successor the builder chose, by a margin.
func checkGreedyCycle(t *testing.T, m *Model, seed uint64, what string) {
	b := &builder{s: m.Shape, o: Options{Seed: seed}}
	next := cycle(m.Shape.NVocab, b.rng("permutation", 0))
	tok, err := tokenizer.FromGGUF(m.File)
	require.NoError(t, err)
	ids, err := tok.Encode("Once upon a time", true)
	require.NoError(t, err)
	st, err := m.NewState(mod.RoutingRouter)
	require.NoError(t, err)
	last := ids
	minMargin := math.Inf(1)
	for step := 0; step < 24; step++ {
		logits, err := st.Forward(last, false)
		require.NoError(t, err)
		top, second := top2(logits)
		minMargin = math.Min(minMargin, float64(logits[top]-logits[second]))
		require.Equal(t, next[last[len(last)-1]], int32(top), "%s step %d", what, step)
		last = []int32{int32(top)}
	}
	assert.Greater(t, minMargin, 3.0, "%s: smallest top-1 - top-2 logit gap", what)
	t.Logf("%s: smallest greedy margin %.2f", what, minMargin)
}

// A model built as llama.cpp's Q4_K_M mix has the types llama-quantize
// would give it, written out here from llama_tensor_get_type's rules for 8
// blocks, and runs: attn_v and ffn_down get more bits in blocks 0, 3, 6 and
// 7; ffn_down's rows of 288 are no whole number of 256, so its Q4_K falls
// back to Q5_0 and its Q6_K to Q8_0; the output matrix is Q6_K.
func TestQ4KMMix(t *testing.T) {
	shape := Shape{Name: "k", NEmbd: 256, NLayer: 8, NHead: 8, NKVHead: 2, NFF: 288, NVocab: 512, ContextLen: 128}
	scheme, err := quant.Parse("q4_k_m")
	require.NoError(t, err)
	m := build(t, shape, Options{Scheme: scheme, Seed: 2})
	assert.Equal(t, "k-q4_k_m", m.Name)
	want := map[string]gguf.TensorType{mod.TensorTokenEmbd: gguf.TypeQ4_K, mod.TensorOutput: gguf.TypeQ6_K, mod.TensorOutputNorm: gguf.TypeF32}
	for l := 0; l < 8; l++ {
		v, down := gguf.TypeQ4_K, gguf.TypeQ5_0
		if l == 0 || l == 3 || l == 6 || l == 7 {
			v, down = gguf.TypeQ6_K, gguf.TypeQ8_0
		}
		for role, typ := range map[string]gguf.TensorType{
			mod.TensorAttnQ: gguf.TypeQ4_K, mod.TensorAttnK: gguf.TypeQ4_K, mod.TensorAttnV: v, mod.TensorAttnOutput: gguf.TypeQ4_K,
			mod.TensorFFNGate: gguf.TypeQ4_K, mod.TensorFFNUp: gguf.TypeQ4_K, mod.TensorFFNDown: down,
			mod.TensorAttnNorm: gguf.TypeF32, mod.TensorFFNNorm: gguf.TypeF32,
		} {
			want[mod.BlockTensor(l, role)] = typ
		}
	}
	require.Len(t, m.File.Tensors, len(want))
	for _, ti := range m.File.Tensors {
		assert.Equal(t, want[ti.Name], ti.Type, ti.Name)
	}
	ft, err := m.File.Uint(mod.KeyFileType)
	require.NoError(t, err)
	assert.Equal(t, uint64(15), ft, "llama_ftype MOSTLY_Q4_K_M")
	checkGreedyCycle(t, m, 2, "q4_k_m")
}

func top2(v []float32) (int, int) {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return v[idx[a]] > v[idx[b]] })
	return idx[0], idx[1]
}

// Calibration sets each routed layer so that causal routing, router or
// predictor, sends about the capacity through it on text it never saw: a
// different story, then the greedy cycle, as a benchmark runs.
func TestCalibratedTwinRoutesAboutTheCapacity(t *testing.T) {
	s, err := ParseShape("stories15m")
	require.NoError(t, err)
	m := build(t, s, Options{Type: gguf.TypeQ8_0, Seed: 1, Capacity: 0.125})
	require.Len(t, m.Calibration, 3)
	for _, c := range m.Calibration {
		assert.Equal(t, CalibrationTokens(s), c.Tokens)
		assert.Equal(t, c.RouterBias, m.Weights.Blocks[c.Layer].Router.Bias.Vec()[0])
		stored, err := m.File.TensorFloat32(mod.BlockTensor(c.Layer, mod.TensorRouterBias))
		require.NoError(t, err)
		assert.Equal(t, c.RouterBias, stored[0], "the bias is in the GGUF data too")
	}
	tok, err := tokenizer.FromGGUF(m.File)
	require.NoError(t, err)
	ids, err := tok.Encode("Lily and her dog Max played in the garden all afternoon. They found a shiny red ball under a bush and laughed.", true)
	require.NoError(t, err)
	for _, routing := range []mod.Routing{mod.RoutingRouter, mod.RoutingPredictor} {
		st, err := m.NewState(routing)
		require.NoError(t, err)
		logits, err := st.Forward(ids, false)
		require.NoError(t, err)
		for i := 0; i < 64; i++ {
			next, _ := top2(logits)
			logits, err = st.Forward([]int32{int32(next)}, false)
			require.NoError(t, err)
		}
		for _, l := range m.Config.RoutedLayers() {
			pct := 100 * float64(st.Selected[l]) / float64(st.Seen[l])
			t.Logf("%s layer %d: %.1f%% routed", routing, l, pct)
			assert.True(t, pct >= 6 && pct <= 20, "%s layer %d routes %.1f%%, want 6-20%%", routing, l, pct)
		}
	}
}

// The threshold leaves exactly k values above it.
func TestThreshold(t *testing.T) {
	v := []float64{3, -1, 7, 0.5, math.Inf(-1), 2}
	for k := 1; k <= len(v); k++ {
		thr := threshold(v, k)
		above := 0
		for _, x := range v {
			if x > thr {
				above++
			}
		}
		want := k
		if k == len(v) {
			want = len(v) - 1 // -Inf is never above
		}
		assert.Equal(t, want, above, "k=%d", k)
	}
}

// ParseShape takes a user's --synthetic string: whatever it is, it gives a
// shape that passes check, or an error; never a panic.
func FuzzParseShape(f *testing.F) {
	for _, s := range []string{"stories15m", "d=2048,L=4,h=32,kv=4,ff=5632,vocab=32000", "d=64,L=1,ctx=1", "d=,L=2", "d=8,L=1,h=4,kv=2,vocab=261"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sh, err := ParseShape(s)
		if err != nil {
			return
		}
		require.NoError(t, sh.check())
		assert.Positive(t, sh.Params())
		assert.NotEmpty(t, sh.Name)
	})
}

// A model larger than the free memory is a clear error, not the runtime's
// fatal out-of-memory.
func TestBuildRefusesWhatDoesNotFit(t *testing.T) {
	saved := availableMemory
	t.Cleanup(func() { availableMemory = saved })
	availableMemory = func() uint64 { return 1 << 19 }
	_, err := Build(small, Options{Type: gguf.TypeQ8_0})
	assert.ErrorContains(t, err, "synth: small-q8_0 needs 1.0 MiB in memory, more than the 0.5 MiB this machine has available")
	availableMemory = func() uint64 { return 0 } // unknown: no check
	m, err := Build(small, Options{Type: gguf.TypeQ8_0})
	require.NoError(t, err)
	m.Close()
}

// BenchmarkBuildTinyLlama times the making of a 1.1B Q8_0 model (1.1 GiB).
func BenchmarkBuildTinyLlama(b *testing.B) {
	s, err := ParseShape("tinyllama-1.1b")
	require.NoError(b, err)
	for i := 0; i < b.N; i++ {
		m, err := Build(s, Options{Type: gguf.TypeQ8_0, Seed: 1})
		require.NoError(b, err)
		m.Close()
	}
}
