package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/shared"
	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/synth"
)

// kernelPaths runs f once on each kernel path this CPU has: the AVX-512
// VNNI Q8_0 products (with the AVX2 kernels for the rest), the AVX2
// kernels alone, and the portable Go ones, so that CI covers each.
func kernelPaths(t *testing.T, f func(t *testing.T)) {
	savedSIMD, savedVNNI := useSIMD, useVNNI
	t.Cleanup(func() { useSIMD, useVNNI = savedSIMD, savedVNNI })
	paths := []struct {
		name       string
		simd, vnni bool
		have       bool
	}{
		{simdName + "+avx512-vnni", true, true, simdName != "" && hasVNNI},
		{simdName, true, false, simdName != ""},
		{"go", false, false, true},
	}
	for _, p := range paths {
		if !p.have {
			t.Logf("no %q kernels on this CPU (%s): not run", p.name, runtime.GOARCH)
			continue
		}
		useSIMD, useVNNI = p.simd, p.vnni
		t.Run(p.name, f)
	}
	useSIMD, useVNNI = savedSIMD, savedVNNI
}

// Tolerances of the runner's logits against mod's, relative to the step's
// largest |logit|: QuantizedRelTol (whose comment gives the reason and the
// measurement) where activations are quantized; F32 and F16 weights dot
// float activations as mod does, in another summation order: float32
// rounding only (measured ~5e-7).
var relTol = map[gguf.TensorType]float64{
	gguf.TypeF32:  1e-4,
	gguf.TypeF16:  1e-4,
	gguf.TypeQ8_0: QuantizedRelTol,
	gguf.TypeQ4_0: QuantizedRelTol,
	// Q4_1 dots in its own blocks (legacy.go; TestLegacyMatrix runs Q5_0
	// and Q5_1 too). tiny's widths are not whole K-quant blocks, so its
	// Q4_K is requantized to Q8_0 at load (matrix.requantize) and stands
	// for the types that are; TestKMatrix runs the native K-quants.
	gguf.TypeQ4_1: QuantizedRelTol,
	gguf.TypeQ4_K: QuantizedRelTol,
}

// testTypes are the weight types the runner is checked in: each kernel
// family's (relTol's keys, in a fixed order).
var testTypes = []gguf.TensorType{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ4_1, gguf.TypeQ4_K}

// tiny is a synthetic shape with GQA, several routed layers and ragged
// widths (nFF 224, nVocab 600) that the quantized types still take.
var tiny = synth.Shape{Name: "tiny", NEmbd: 128, NLayer: 4, NHead: 4, NKVHead: 2, NFF: 224, NVocab: 600, ContextLen: 128}

func buildSynth(t *testing.T, s synth.Shape, typ gguf.TensorType, capacity float32) *synth.Model {
	t.Helper()
	m, err := synth.Build(s, synth.Options{Type: typ, Seed: 7, Capacity: capacity})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// lockstep feeds prompt to both, then decodes steps greedy tokens, each
// the reference's argmax fed to both; it checks that the runner's argmax
// agrees at every step and returns the largest |Δlogit| relative to the
// step's largest |logit|.
func lockstep(t *testing.T, run *Runner, ref *mod.State, prompt []int32, steps int) float64 {
	t.Helper()
	got, err := run.Feed(prompt)
	require.NoError(t, err)
	want, err := ref.Forward(prompt, false)
	require.NoError(t, err)
	var worst float64
	for step := 0; ; step++ {
		worst = math.Max(worst, relDiff(got, want))
		next := stats.Argmax(want)
		require.Equal(t, next, stats.Argmax(got), "greedy token at step %d", step)
		if step == steps {
			return worst
		}
		got, err = run.Feed([]int32{next})
		require.NoError(t, err)
		want, err = ref.Forward([]int32{next}, false)
		require.NoError(t, err)
	}
}

func relDiff(got, want []float32) float64 {
	var diff, scale float64
	for i := range want {
		diff = math.Max(diff, math.Abs(float64(got[i])-float64(want[i])))
		scale = math.Max(scale, math.Abs(float64(want[i])))
	}
	return diff / scale
}

var prompt = []int32{1, 80, 111, 122, 259, 101, 120, 259, 40, 99, 300, 17, 45, 260, 500, 3}

// Dense and MoD synthetic models of every weight type, with router and
// predictor routing, give mod's greedy tokens and its logits within
// relTol, on both kernel paths; the prompt runs batched (and in chunks of
// 5 where UBatch says so), the rest one token at a time.
func TestRunnerMatchesReference(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		for _, typ := range testTypes {
			for _, capacity := range []float32{0, 0.25} {
				m := buildSynth(t, tiny, typ, capacity)
				routings := []mod.Routing{mod.RoutingRouter}
				if capacity > 0 {
					routings = append(routings, mod.RoutingPredictor)
				}
				for _, r := range routings {
					for _, ub := range []int{0, 5} {
						name := fmt.Sprintf("%s capacity %g %s ubatch %d", typ, capacity, r, ub)
						run, err := New(m.Model, r, Options{UBatch: ub})
						require.NoError(t, err)
						ref, err := m.NewState(r)
						require.NoError(t, err)
						worst := lockstep(t, run, ref, prompt, 12)
						t.Logf("%s: max |Δlogit| / max |logit| = %.2g", name, worst)
						assert.LessOrEqual(t, worst, relTol[typ], name)
						assert.Equal(t, typ != gguf.TypeF32 && typ != gguf.TypeF16, run.QuantizedActivations(), name)
					}
				}
			}
		}
	})
}

// Routing counts, the trace and the compact caches are mod's, on a model
// with F32 weights (where no decision sits close enough to 0 to flip).
func TestRoutingMatchesReference(t *testing.T) {
	m := buildSynth(t, tiny, gguf.TypeF32, 0.25)
	for _, r := range []mod.Routing{mod.RoutingRouter, mod.RoutingPredictor} {
		run, err := New(m.Model, r, Options{UBatch: 4})
		require.NoError(t, err)
		ref, err := m.NewState(r)
		require.NoError(t, err)
		var trace mod.Trace
		ref.Trace = &trace
		_, err = run.Feed(prompt)
		require.NoError(t, err)
		_, err = ref.Forward(prompt, false)
		require.NoError(t, err)

		selected, seen := run.Counts()
		assert.Equal(t, ref.Selected, selected, "%s: selected", r)
		assert.Equal(t, ref.Seen, seen, "%s: seen", r)
		routes := run.Routes()
		require.Len(t, routes, len(prompt))
		for j, lt := range trace.Layers {
			want := lt.RouterLogits
			if r == mod.RoutingPredictor {
				want = lt.PredictorLogits
			}
			var sel []int
			for i, rt := range routes {
				assert.Equal(t, lt.Layer, rt[j].Layer)
				assert.InDelta(t, want[i], rt[j].Score, 1e-4, "%s layer %d token %d", r, lt.Layer, i)
				if rt[j].Selected {
					sel = append(sel, i)
				}
			}
			assert.Equal(t, lt.Selected, sel, "%s layer %d", r, lt.Layer)
			_, _, pos := run.KV(lt.Layer)
			_, _, refPos := ref.KV(lt.Layer)
			assert.Equal(t, refPos, pos, "%s layer %d cache", r, lt.Layer)
		}
	}
}

// Score in eval mode (top-k per sequence) and with causal routing gives
// mod's logits for every token.
func TestScoreMatchesReference(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		for _, typ := range []gguf.TensorType{gguf.TypeF32, gguf.TypeQ8_0} {
			for _, r := range []mod.Routing{mod.RoutingTopK, mod.RoutingRouter} {
				m := buildSynth(t, tiny, typ, 0.25)
				run, err := New(m.Model, r, Options{UBatch: 6})
				require.NoError(t, err)
				ref, err := m.NewState(r)
				require.NoError(t, err)
				for range 2 { // Score resets: the second is the first again
					got, err := run.Score(prompt)
					require.NoError(t, err)
					ref.Reset()
					want, err := ref.Forward(prompt, true)
					require.NoError(t, err)
					require.Len(t, got, len(want))
					v := tiny.NVocab
					for i := range prompt {
						assert.LessOrEqual(t, relDiff(got[i*v:(i+1)*v], want[i*v:(i+1)*v]), relTol[typ], "%s %s token %d", typ, r, i)
					}
				}
			}
		}
	})
}

// The greedy text of the shipped models, and of the shared stories260K,
// is the reference's.
func TestShippedModelsGreedy(t *testing.T) {
	paths := []string{filepath.Join("..", "..", "models", "tinystories-mod.gguf"), filepath.Join("..", "..", "models", "tinystories-dense.gguf")}
	paths = append(paths, shared.Path(t, "models/stories260K.gguf"))
	for _, path := range paths {
		m, err := mod.Open(path)
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		for _, r := range []mod.Routing{mod.RoutingRouter, mod.RoutingPredictor} {
			if r == mod.RoutingPredictor && m.Config.PredictorHidden == 0 {
				continue
			}
			run, err := New(m, r, Options{})
			require.NoError(t, err)
			ref, err := m.NewState(r)
			require.NoError(t, err)
			worst := lockstep(t, run, ref, []int32{1, 403, 251, 263}, 48)
			t.Logf("%s %s: max |Δlogit| / max |logit| = %.2g", filepath.Base(path), r, worst)
			assert.LessOrEqual(t, worst, relTol[m.Weights.Blocks[0].Q.Type], path)
		}
	}
}

// Bad input is an error that says what is wrong.
func TestRunnerRefusesBadInput(t *testing.T) {
	m := buildSynth(t, tiny, gguf.TypeQ8_0, 0)
	run, err := New(m.Model, mod.RoutingRouter, Options{ContextLen: 8})
	require.NoError(t, err)
	_, err = run.Feed(nil)
	assert.ErrorContains(t, err, "no tokens")
	_, err = run.Feed([]int32{1, 600})
	assert.ErrorContains(t, err, "outside the vocabulary")
	_, err = run.Feed(make([]int32, 9))
	assert.ErrorContains(t, err, "context length 8")
	_, err = New(m.Model, mod.RoutingPredictor, Options{})
	assert.NoError(t, err, "a dense model ignores the routing")
	twin := buildSynth(t, tiny, gguf.TypeQ8_0, 0.25)
	top, err := New(twin.Model, mod.RoutingTopK, Options{})
	require.NoError(t, err)
	_, err = top.Feed(prompt[:3])
	require.NoError(t, err)
	_, err = top.Feed(prompt[:3])
	assert.ErrorContains(t, err, "one call per sequence")
}

// The fallback for types without a kernel (mod.Mat.Row, then a float dot:
// BF16) gives mod's logits to float32 rounding: run here by sending a Q8_0
// and a Q4_0 model's every matrix through it.
func TestRowFallback(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		for _, typ := range []gguf.TensorType{gguf.TypeQ8_0, gguf.TypeQ4_0} {
			m := buildSynth(t, tiny, typ, 0.25)
			run, err := New(m.Model, mod.RoutingRouter, Options{})
			require.NoError(t, err)
			run.w.output.kind = kindRows
			for _, b := range run.w.blocks {
				for _, w := range []*matrix{b.q, b.k, b.v, b.o, b.gate, b.up, b.down} {
					w.kind = kindRows
				}
			}
			require.False(t, run.QuantizedActivations())
			ref, err := m.NewState(mod.RoutingRouter)
			require.NoError(t, err)
			worst := lockstep(t, run, ref, prompt, 6)
			assert.LessOrEqual(t, worst, 1e-5, typ.String())
		}
	})
}

// FeedArgmax (whose logits live in reused memory) picks Feed's argmax, step
// after step, and leaves earlier Feed results alone.
func TestFeedArgmax(t *testing.T) {
	m := buildSynth(t, tiny, gguf.TypeQ8_0, 0.25)
	a, err := New(m.Model, mod.RoutingRouter, Options{})
	require.NoError(t, err)
	b, err := New(m.Model, mod.RoutingRouter, Options{})
	require.NoError(t, err)
	logits, err := a.Feed(prompt)
	require.NoError(t, err)
	next, err := b.FeedArgmax(prompt)
	require.NoError(t, err)
	for step := range 8 {
		require.Equal(t, stats.Argmax(logits), next, "step %d", step)
		logits, err = a.Feed([]int32{next})
		require.NoError(t, err)
		next, err = b.FeedArgmax([]int32{next})
		require.NoError(t, err)
	}
	// A Feed result is the caller's: a later FeedArgmax does not overwrite it.
	kept := append([]float32(nil), logits...)
	_, err = a.FeedArgmax([]int32{next})
	require.NoError(t, err)
	assert.Equal(t, kept, logits)
	_, err = b.FeedArgmax([]int32{-1})
	assert.ErrorContains(t, err, "outside the vocabulary")
}

// Every quantized type the files hold dots in its own kernels, none
// requantized at load: Q8_0 and Q4_0 repacked (float32 scales: 36/34 and
// 20/18 of the file's bytes), the K-quants, Q4_1, Q5_0 and Q5_1 as the
// file's own bytes. A K-quant block with a NaN scale makes its rows' dots
// NaN on every path (a poisoned weight still shows).
func TestNativeTypes(t *testing.T) {
	g := rand.New(rand.NewPCG(9, 10))
	const rows, cols = 16, 512 // VNNI CPUs interleave Q8_0 by 16 rows
	src := randF32(g, rows*cols)
	for _, typ := range gguf.SupportedTypes {
		if typ.BlockSize() == 1 {
			continue
		}
		data, err := gguf.Quantize(typ, src)
		require.NoError(t, err)
		m, err := mod.NewMat("w", typ, []uint64{cols, rows}, data)
		require.NoError(t, err)
		w, err := newMatrix(&m)
		require.NoError(t, err)
		want := map[gguf.TensorType]float64{gguf.TypeQ8_0: 36.0 / 34, gguf.TypeQ4_0: 20.0 / 18}[typ]
		if want == 0 {
			want = 1
			assert.Contains(t, []kind{kindK, kindL}, w.kind, typ.String())
		}
		assert.InDelta(t, want, float64(w.bytes())/float64(len(data)), 1e-9, typ.String())
	}
	data, err := gguf.Quantize(gguf.TypeQ2_K, src[:2*cols])
	require.NoError(t, err)
	data[80], data[81] = 0x00, 0x7e // row 0's first block's d: an f16 NaN
	x := randF32(g, cols)
	q, d, bs := make([]int8, cols), make([]float32, cols/kLen), make([]int16, cols/16)
	quantizeK(q, d, bs, x)
	kernelPaths(t, func(t *testing.T) {
		assert.True(t, math.IsNaN(float64(dotK(gguf.TypeQ2_K, data[:2*84], q, d, bs))), "row 0 holds the NaN")
		assert.False(t, math.IsNaN(float64(dotK(gguf.TypeQ2_K, data[2*84:], q, d, bs))), "row 1 is finite")
	})
}
