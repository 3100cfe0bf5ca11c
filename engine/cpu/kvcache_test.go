package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/engine/sched/schedtest"
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
)

// kvF16RelTol bounds how far an F16 cache moves the logits from an F32
// cache's, relative to the largest |logit|, where the products dot float
// activations (F32 and F16 weights). A half keeps 11 significant bits, so
// each key and value element moves by up to 2^-12 of itself (half its unit
// roundoff 2^-11, 4.9e-4). A score moves by up to that share of |q|·|k|,
// not of itself, and a trained model's attention is peaked (scores of
// tens), so the softmax weights, and through 9 layers the logits, move by
// more than the elements: measured (TestKVF16 logs it) 2.2e-5 on the
// synthetic F32 models, 1.2e-3 to 2.4e-3 on the shipped trained ones
// (F32, over 96 positions). The bound leaves 2x room over the worst;
// bench's validation allows 2e-3 + 1e-3 absolute (bench/validate.go
// tolF16KV), Vulkan's test of its F16 cache 2e-3 + 1e-4.
const kvF16RelTol = 5e-3

// kvTol is the bound on the logits' move by an F16 cache for run's model:
// kvF16RelTol, or with quantized activations QuantizedRelTol (the larger). There a
// cache's rounding that moves an activation across a rounding edge of its
// 8-bit block moves it by a whole step (up to max|x|/127), so the two
// caches differ by the size of the 8-bit path's own error, which each lies
// within of the reference. Measured: 2.9e-3 on the synthetic Q8_0 models
// (4.5e-3 on its dense twin), 3.4x under it.
func kvTol(run *Runner) float64 {
	if run.QuantizedActivations() {
		return QuantizedRelTol
	}
	return kvF16RelTol
}

// An F16 cache gives an F32 cache's greedy tokens over a prompt and 80
// decoded tokens (so attention reads several widened blocks of kvBlock),
// with the logits within kvTol, on every kernel path; its first
// layer's keys and values are the F32 cache's rounded to halves (that
// layer's input does not depend on the cache), and it says it is f16.
func TestKVF16(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		for _, km := range stepModels(t) {
			f32, err := New(km.m, km.routing, Options{ContextLen: 128, UBatch: 7})
			require.NoError(t, err)
			f16, err := New(km.m, km.routing, Options{ContextLen: 128, UBatch: 7, KVType: KVF16})
			require.NoError(t, err)
			assert.Equal(t, KVF32, f32.KVType(), km.name)
			assert.Equal(t, KVF16, f16.KVType(), km.name)
			worst := kvLockstep(t, f16, f32, prompt, 80)
			t.Logf("%s: max |Δlogit| / max |logit| against an F32 cache = %.2g", km.name, worst)
			assert.LessOrEqual(t, worst, kvTol(f32), km.name)

			k32, v32, pos32 := f32.KV(0)
			k16, v16, pos16 := f16.KV(0)
			assert.Equal(t, pos32, pos16, km.name)
			require.Len(t, k16, len(k32), km.name)
			for i := range k32 {
				require.Equal(t, gguf.F16ToF32(gguf.F32ToF16(k32[i])), k16[i], "%s: key element %d", km.name, i)
				require.Equal(t, gguf.F16ToF32(gguf.F32ToF16(v32[i])), v16[i], "%s: value element %d", km.name, i)
			}
		}
	})
}

// kvLockstep feeds prompt to both runners, then the F32 one's greedy token
// to both, steps times; the greedy tokens and every routing decision must
// agree, and it returns the worst relDiff of the logits.
func kvLockstep(t *testing.T, run, ref *Runner, prompt []int32, steps int) float64 {
	t.Helper()
	feed := prompt
	var worst float64
	for step := 0; step <= steps; step++ {
		got, err := run.Feed(feed)
		require.NoError(t, err)
		got = append([]float32(nil), got...)
		want, err := ref.Feed(feed)
		require.NoError(t, err)
		worst = math.Max(worst, relDiff(got, want))
		next := stats.Argmax(want)
		require.Equal(t, next, stats.Argmax(got), "greedy token at step %d", step)
		for i, rt := range ref.Routes() {
			for j := range rt {
				require.Equal(t, rt[j].Selected, run.Routes()[i][j].Selected, "step %d token %d layer %d", step, i, rt[j].Layer)
			}
		}
		feed = []int32{next}
	}
	return worst
}

// The cache of halves' scores and mix are the float kernels' over the
// halves widened, on ragged lengths across kvBlock's edges and head
// dimensions with and without the fused F16C kernels (hd%8), with a
// stride: the same sums where a kernel reads the halves itself.
func TestKVRowsHalf(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		for _, fuse := range []bool{true, false} {
			fuseF16 = fuse
			t.Run(fmt.Sprintf("fuse %v", fuse), kvRowsHalf)
		}
		fuseF16 = true
	})
}

func kvRowsHalf(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, hd := range []int{8, 12, 48, 56, 64, 128} { // the pieces of 1, 2 and 4 vectors
		for _, m := range []int{1, 5, kvBlock - 1, kvBlock, kvBlock + 1, 3*kvBlock + 7} {
			const heads = 2
			stride, off := heads*hd, hd // the second of two heads
			x := make([]float32, m*stride)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			half := kvRows{half: true}
			half.append(x)
			wide := half.floats()
			q, p := make([]float32, hd), make([]float32, m)
			for i := range q {
				q[i] = float32(rng.NormFloat64())
			}
			for i := range p {
				p[i] = rng.Float32()
			}
			name := fmt.Sprintf("hd %d, %d rows", hd, m)
			got, want := make([]float32, m), make([]float32, m)
			buf, part := make([]float32, kvBlock*hd), make([]float32, hd)
			half.scores(got, q, off, stride, 0.125, buf)
			scores(want, q, wide[off:], stride, hd, 0.125)
			assert.Equal(t, want, got, "%s: scores", name)

			gotMix, wantMix := make([]float32, hd), make([]float32, hd)
			half.mix(gotMix, off, stride, p, buf, part)
			mix(wantMix, wide[off:], stride, p)
			if f16Fused(hd) { // the float kernel's FMAs on the widened loads
				assert.Equal(t, wantMix, gotMix, "%s: mix", name)
				continue
			}
			// Widened a block at a time, the blocks' sums added: the
			// same products in another order.
			assert.InDeltaSlice(t, wantMix, gotMix, 1e-5*float64(m), "%s: mix", name)
		}
	}
}

// Sixteen sequences join and leave the step runner with an F16 cache
// (TestStepMatchesSolo's schedule): each one's tokens and routing are its
// solo run's with an F16 cache, its logits within kvTol: the two paths
// round the same keys and values to halves, but those differ by float32
// ulps between the paths (stepTol's reasons), and one at a half's rounding
// edge lands a whole half step apart, so the difference grows to an F16
// cache's own move (measured 1.2e-3 on tinystories-mod, 2.4e-3 with Q8_0).
// The pages hold halves, so a page takes half an F32 page's bytes.
func TestStepKVF16MatchesSolo(t *testing.T) {
	for _, sm := range stepModels(t) {
		t.Run(sm.name, func(t *testing.T) {
			st, err := NewStepper(sm.m, sm.routing, Options{ContextLen: 128, KVType: KVF16})
			require.NoError(t, err)
			f32, err := NewStepper(sm.m, sm.routing, Options{ContextLen: 128})
			require.NoError(t, err)
			assert.Equal(t, f32.PageBytes(16)/2, st.PageBytes(16))
			assert.Equal(t, KVF16, st.KVType())
			s, err := sched.New(st, sched.Options{BlockTokens: 16, Pages: sched.PagesFor(st.Layout(), 16, 128, 16), BatchTokens: 48})
			require.NoError(t, err)
			reqs, seqs := schedtest.JoinAndLeave(t, s, sm.m.Config.NVocab, 16)
			worst := schedtest.Check(t, reqs, seqs, func(req sched.Request) schedtest.Solo {
				run, err := New(sm.m, sm.routing, Options{KVType: KVF16})
				require.NoError(t, err)
				return schedtest.RunSolo(t, run, req)
			}, relDiff)
			t.Logf("max |Δlogit| / max |logit| against solo = %.2g", worst)
			assert.LessOrEqual(t, worst, kvTol(st.r))
			assert.Equal(t, s.Pool().Pages(), s.Pool().Free(), "every page back")
		})
	}
}

// A KV type other than f16 or f32 is refused, naming it.
func TestKVTypeRefused(t *testing.T) {
	m := buildSynth(t, tiny, gguf.TypeF32, 0)
	for _, bad := range []string{"q8", "F16", "bf16", " f16"} {
		_, err := New(m.Model, mod.RoutingRouter, Options{KVType: bad})
		require.Error(t, err, bad)
		assert.Equal(t, fmt.Sprintf("cpu: KV type %q is not f16 or f32", bad), err.Error())
	}
	for _, good := range []string{"", KVF32, KVF16} {
		_, err := New(m.Model, mod.RoutingRouter, Options{KVType: good})
		assert.NoError(t, err, good)
	}
}

// Rows are rounded to halves as gguf.F32ToF16 does (nearest, ties to
// even; subnormal halves, overflow to infinity), on every kernel path,
// lengths with and without a tail of the 8-lane kernel.
func TestToHalves(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		edges := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65519.996, 65520, -70000, 1e-5, -3e-7, 6e-8, 2.9e-8, 1e-40,
			1 + 1.0/2048, 1 + 3.0/2048, 1 + 1.0/4096, float32(math.Inf(1)), float32(math.Inf(-1)), 0.1, 3.14159, -2.71828}
		for _, n := range []int{1, 7, 8, 21, 64, 1000} {
			x := make([]float32, n)
			for i := range x {
				if i < len(edges) && n >= len(edges) {
					x[i] = edges[i]
					continue
				}
				x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(12)-6)))
			}
			got := make([]uint16, n)
			toHalves(got, x)
			for i, v := range x {
				require.Equal(t, gguf.F32ToF16(v), got[i], "element %d of %d: %g", i, n, v)
			}
		}
		nan := []float32{float32(math.NaN()), 1, 2, 3, 4, 5, 6, 7}
		got := make([]uint16, len(nan))
		toHalves(got, nan)
		assert.True(t, math.IsNaN(float64(gguf.F16ToF32(got[0]))), "a NaN stays a NaN")
	})
}
