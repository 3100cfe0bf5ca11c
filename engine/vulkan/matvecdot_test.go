package vulkan

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/cpu"
	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/synth"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// TestMatvecDotAgainstCPU: a GPU profile with matvec_dot
// (MODRUN_MATVEC_DOT=1: the decode's quantized matvecs as integer dot
// products against x quantized to 8 bits) decodes as the CPU backend
// does, which quantizes its activations the same way (blocks of 32; of
// 256 for the K-quants), and not as the CPU reference (f32 activations):
// greedy runs of 8 one-token prompts, 10 draws each, the CPU backend and
// the reference fed the GPU's tokens (dotDraws). Most draws' logits are
// the CPU backend's to float rounding: the median draw within 1e-5 of the
// largest logit (on lavapipe 1e-7), where the reference's median draw is
// 100x or more further (8e-4 to 1.6e-2). Not every draw: the kernels
// quantize x times the norm's weight and apply the norm's 1/rms to the
// sums, the CPU backend quantizes the normed x, so an element within a
// few ulps of a rounding tie can round the other way (one element of an
// embedding row: 1.2e-3 of the largest logit at the K-quant model, and
// every later draw of that sequence through its keys and values), as
// often as one draw in ten; every draw stays within 2x the reference's
// worst draw. The models: the trained MoD model with its matrices (but
// the down projection's, 172 columns: not whole blocks) and embedding
// Q8_0; a synthetic MoD model of widths the K-quants take (256 and 512)
// with every K-quant among its matrices; and the same in Q4_0 and the
// other 32-wide types. Integer dot products run on lavapipe in software.
// (Until session 30 the first model's matrices went back to F32 after
// their Q8_0 requantization, so only its output took matvec_dot.)
func TestMatvecDotAgainstCPU(t *testing.T) {
	dev := openDevice(t, true)
	if !dev.Info().Features.IntegerDotProduct {
		t.Skip("the device has no integer dot products")
	}
	gpu, err := ProfileWith(dev.Info(), Knobs{"MODRUN_MATVEC_DOT": "1"})
	require.NoError(t, err)
	gpu = gpuProfileOn(gpu.Device, true)
	require.True(t, gpu.MatvecDot, "MODRUN_MATVEC_DOT=1 on a GPU profile of a device with integer dot products")
	for _, c := range []struct {
		name  string
		model func(t *testing.T) *mod.Model
	}{
		{"mod-trained-q8_0", func(t *testing.T) *mod.Model {
			m := openModel(t, "../../testdata/mod/mod-trained.gguf")
			q8 := gguf.TypeQ8_0 // down's rows are 172 long: not whole blocks
			weightMix{q: q8, k: q8, v: q8, o: q8, gate: q8, up: q8, down: gguf.TypeF32, embd: q8}.requantize(t, m.Weights)
			return m
		}},
		{"wide-k-quants", func(t *testing.T) *mod.Model { return dotModel(t, kQuantMix) }},
		{"wide-32", func(t *testing.T) *mod.Model { return dotModel(t, mix32) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := c.model(t)
			b := m.Weights.Blocks[0]
			for _, mt := range []*mod.Mat{&b.Q, &b.O, &b.Gate} {
				wt, ok := shaders.WeightForGGML(mt.Type.String())
				require.True(t, ok, mt.Type.String())
				name, _ := gpu.Matvec(wt.Name, shaders.FuseNone, 1, uint32(mt.Cols))
				require.True(t, strings.Contains(name, shaders.ReduceSubgroupDot), "the profile takes matvec_dot for %s: %s", mt.Name, name)
			}
			run, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: &gpu, KVType: "f32"})
			require.NoError(t, err)
			defer run.Close()
			toCPU, toRef := dotDraws(t, m, run, 8, 10)
			worstRef := slices.Max(toRef)
			for i, d := range toCPU {
				require.LessOrEqual(t, d, 2*worstRef, "draw %d: within 2x the reference's worst draw of the CPU backend's logits", i)
			}
			mc, mr := median(toCPU), median(toRef)
			t.Logf("%d draws: |logit diff| to the CPU backend median %.2g max %.2g; to the reference median %.2g max %.2g (of the largest logit)",
				len(toCPU), mc, slices.Max(toCPU), mr, worstRef)
			assert.LessOrEqual(t, mc, 1e-5, "the median draw: the CPU backend's arithmetic")
			assert.Less(t, 100*mc, mr, "nearer the CPU backend's 8-bit activations than the reference's f32 ones")
		})
	}
}

// dotDraws runs prompts one-token prompts (ids spread over the
// vocabulary) greedily on run for draws draws each, feeds the tokens it
// drew to the CPU backend and to the CPU reference, and returns each
// draw's max |logit diff| to each, of the largest logit.
func dotDraws(t *testing.T, m *mod.Model, run *Runner, prompts, draws int) (toCPU, toRef []float64) {
	t.Helper()
	back, err := cpu.New(m, mod.RoutingRouter, cpu.Options{})
	require.NoError(t, err)
	ref, err := m.NewState(mod.RoutingRouter)
	require.NoError(t, err)
	for p := range prompts {
		run.Reset()
		back.Reset()
		ref.Reset()
		feed := []int32{int32(3 + p*(m.Config.NVocab-3)/prompts)}
		for range draws {
			got, err := run.Feed(feed)
			require.NoError(t, err)
			want, err := back.Feed(feed)
			require.NoError(t, err)
			exact, err := ref.Forward(feed, false)
			require.NoError(t, err)
			big := 0.0
			for _, v := range want {
				big = max(big, math.Abs(float64(v)))
			}
			toCPU, toRef = append(toCPU, maxAbsDiff(want, got)/big), append(toRef, maxAbsDiff(exact, got)/big)
			feed = []int32{stats.Argmax(got)}
		}
	}
	return toCPU, toRef
}

// median is the median of v (the upper one of an even count).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// kQuantMix and mix32 put every K-quant, and every 32-wide type, among a
// model's matrices.
var (
	kQuantMix = weightMix{q: gguf.TypeQ4_K, k: gguf.TypeQ5_K, v: gguf.TypeQ6_K, o: gguf.TypeQ3_K,
		gate: gguf.TypeQ4_K, up: gguf.TypeQ4_K, down: gguf.TypeQ2_K, embd: gguf.TypeQ8_0}
	mix32 = weightMix{q: gguf.TypeQ4_0, k: gguf.TypeQ4_1, v: gguf.TypeQ5_0, o: gguf.TypeQ5_1,
		gate: gguf.TypeQ4_0, up: gguf.TypeQ4_0, down: gguf.TypeQ5_1, embd: gguf.TypeQ8_0}
)

// dotMixes are the synthetic models' weight mixes of the step tests: every
// K-quant, the 32-wide types, and gate and up of two types (Q4_K and Q6_K,
// two matrices, as a llama.cpp Q4_K_M file's v and down).
var dotMixes = []struct {
	name string
	mix  weightMix
}{{"wide-k-quants", kQuantMix}, {"wide-32", mix32}, {"gate-up-apart", gateUpApartMix}}

var gateUpApartMix = weightMix{q: gguf.TypeQ4_K, k: gguf.TypeQ4_K, v: gguf.TypeQ6_K, o: gguf.TypeQ4_K,
	gate: gguf.TypeQ4_K, up: gguf.TypeQ6_K, down: gguf.TypeQ6_K, embd: gguf.TypeQ8_0}

// dotDevice is the test device and a GPU profile on it with
// MODRUN_MATVEC_DOT=1; the test is skipped where the device has no integer
// dot products or no subgroup arithmetic.
func dotDevice(t *testing.T) (*vk.Device, shaders.Profile) {
	dev := openDevice(t, true)
	if !dev.Info().Features.IntegerDotProduct || !dev.Info().Features.SubgroupArithmetic {
		t.Skip("the device has no integer dot products or no subgroup arithmetic")
	}
	gpu, err := ProfileWith(dev.Info(), Knobs{"MODRUN_MATVEC_DOT": "1"})
	require.NoError(t, err)
	return dev, gpuProfileOn(gpu.Device, true)
}

// dotModel is a synthetic MoD model (every other block routed, capacity
// 0.5) of widths the K-quants take (256 and 512), its matrices of mix.
func dotModel(t *testing.T, mix weightMix) *mod.Model {
	wide := synth.Shape{Name: "wide", NEmbd: 256, NLayer: 2, NHead: 4, NKVHead: 2, NFF: 512, NVocab: 600, ContextLen: 64}
	sm, err := synth.Build(wide, synth.Options{Type: gguf.TypeF32, Seed: 9, Capacity: 0.5})
	require.NoError(t, err)
	t.Cleanup(func() { sm.Close() })
	mix.requantize(t, sm.Weights)
	return sm.Model
}

// TestMatvecDotStepMatchesSolo: a batched step's matvecs under
// MODRUN_MATVEC_DOT=1 (matvec_dot, several vectors a pass: each decoded
// group of weights dotted with every row's x in 8 bits) give each row
// what the decode step's one-vector matvec_dot gives it, which
// TestMatvecDotAgainstCPU holds to the CPU backend. Five sequences of
// one-token prompts step together, so that every step's rows are
// decoding rows of a few vectors (the batched matvecs, never the
// prefill's matmul); each sequence's greedy tokens are its solo run's on
// the same profile, and the median draw's logits within stepTolVK of the
// solo run's, every draw's within 5e-3 (the two paths' 8-bit x can round
// an element the other way where it is within a few ulps of a tie: the
// attention's output, by paged_attend in a step and decode_attend alone,
// differs in the last bits; q, k and v's x and gate and up's no longer
// do, since dot_x quantizes x times the norm's weight as the decode's
// matvecs do, the 1/rms after: lavapipe, every draw within 1.5e-7 of the
// largest logit, where one sequence of five was 1.6e-3 off when the step
// normed x first), for the K-quant and the 32-wide models of
// TestMatvecDotAgainstCPU and gate and up of two types.
func TestMatvecDotStepMatchesSolo(t *testing.T) {
	dev, gpu := dotDevice(t)
	for _, c := range dotMixes {
		t.Run(c.name, func(t *testing.T) {
			m := dotModel(t, c.mix)
			b := m.Weights.Blocks[0]
			for _, mt := range []*mod.Mat{&b.Q, &b.Gate, &b.Down} {
				wt, ok := shaders.WeightForGGML(mt.Type.String())
				require.True(t, ok, mt.Type.String())
				name, _ := gpu.MatvecBatch(wt.Name, shaders.FuseNone, 5, uint32(gpu.VecRows()), uint32(mt.Cols))
				require.Contains(t, name, shaders.ReduceSubgroupDot, "a step of 5 rows of %s", mt.Name)
			}
			const ctx = 64
			run, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: &gpu, KVType: "f32", ContextLen: ctx})
			require.NoError(t, err)
			defer run.Close()
			_, s := stepScheduler(t, run, 5, 5, ctx)
			var reqs []sched.Request
			var seqs []*sched.Seq
			for i := range 5 {
				req := sched.Request{Prompt: []int32{int32(10 + 97*i)}, MaxTokens: 6 + i, KeepLogits: true}
				q, err := s.Add(req)
				require.NoError(t, err)
				reqs, seqs = append(reqs, req), append(seqs, q)
			}
			for more := true; more; {
				more, err = s.Step()
				require.NoError(t, err)
			}
			solo, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: &gpu, KVType: "f32", ContextLen: ctx})
			require.NoError(t, err)
			defer solo.Close()
			var diffs []float64
			for i, q := range seqs {
				require.NoError(t, q.Err, "seq %d", i)
				want := runStepSolo(t, solo, reqs[i])
				require.Equal(t, want.Tokens, q.Tokens(), "seq %d: the solo run's greedy tokens", i)
				require.Len(t, q.Logits, len(want.Logits), "seq %d", i)
				for j, got := range q.Logits {
					d := relDiffVK(got, want.Logits[j])
					assert.LessOrEqual(t, d, 5e-3, "seq %d draw %d: the solo run's logits", i, j)
					diffs = append(diffs, d)
				}
			}
			t.Logf("%d steps (%d shared), %d draws: |logit diff| to the solo run median %.2g max %.2g of the largest logit",
				s.Stats().Steps, s.Stats().SharedSteps, len(diffs), median(diffs), slices.Max(diffs))
			assert.LessOrEqual(t, median(diffs), stepTolVK, "the median draw: the same arithmetic")
			assert.Greater(t, s.Stats().SharedSteps, 3, "steps of several sequences")
		})
	}
}

// TestMatvecDotQuantizesOnce: under MODRUN_MATVEC_DOT=1 a batched step's
// block quantizes x once a product (dot_x before matvec_dot's PREQ
// variants), and once for q, k and v where they are three matrices of
// types that quantize x alike (quantizedOnce): the K-quant model's Q4_K,
// Q5_K and Q6_K (blocks of 256), the 32-wide one's Q4_0, Q4_1 and Q5_0,
// but not q in blocks of 32, k of 256 and v of 32 (three dot_x: k's
// overwrote q's). Where they quantize alike the one dot_x takes the norm's
// weight and the matvecs the 1/rms (normedOnce: no norm dispatch), as do
// gate and up of two types (Q4_K and Q6_K). A dense block of a few rows:
// q|k|v, o, gate|up (one matrix: the norm and SwiGLU in it) and down, 4
// dot_x; every PREQ matvec reads the frame's vxq, and the dispatch before
// each is the dot_x it reads.
func TestMatvecDotQuantizesOnce(t *testing.T) {
	dev, gpu := dotDevice(t)
	mixes := []struct {
		name        string
		mix         weightMix
		dotx, norms int
		gateUpApart bool
	}{{dotMixes[0].name, dotMixes[0].mix, 4, 0, false}, {dotMixes[1].name, dotMixes[1].mix, 4, 0, false},
		// q in blocks of 32, k of 256, v of 32 again: the norm's own
		// dispatch, and k's dot_x overwrote q's, so v quantizes anew.
		{"q-k-v-other-blocks", weightMix{q: gguf.TypeQ8_0, k: gguf.TypeQ4_K, v: gguf.TypeQ4_0, o: gguf.TypeQ8_0,
			gate: gguf.TypeQ4_0, up: gguf.TypeQ4_0, down: gguf.TypeQ8_0, embd: gguf.TypeQ8_0}, 6, 1, false},
		// gate and up two matrices (Q4_K, Q6_K): one dot_x with the norm's
		// weight for both, no norm dispatch.
		{dotMixes[2].name, dotMixes[2].mix, 4, 0, true}}
	for _, c := range mixes {
		t.Run(c.name, func(t *testing.T) {
			run, err := New(dev, dotModel(t, c.mix), mod.RoutingRouter, Options{DeviceProfile: &gpu, KVType: "f32", ContextLen: 64})
			require.NoError(t, err)
			defer run.Close()
			require.Len(t, run.w.blocks[0].qkv.mvs, 3, "q, k and v of three types: three matrices")
			st, err := run.Stepper(4)
			require.NoError(t, err)
			require.NoError(t, st.Reserve(32, 16))
			require.NoError(t, st.growTables(64))
			f, err := st.frame(3, 3, 3, false)
			require.NoError(t, err)
			require.True(t, f.vec, "3 rows: the matvec path")
			require.NotNil(t, f.vxq)
			require.Nil(t, run.w.blocks[0].router, "block 0 is dense")
			ops, err := run.blockOps(f, 0, f.rows, routedBlock{})
			require.NoError(t, err)
			require.Equal(t, c.gateUpApart, len(run.w.blocks[0].gateUp.mvs) == 2, "gate and up apart")
			dotx, pre, norms := 0, 0, 0
			for i, o := range ops {
				if strings.HasPrefix(o.k.v.Name, "rmsnorm") {
					norms++
				}
				if o.k.v.Op == shaders.OpDotX {
					dotx++
					continue
				}
				if _, ok := shaders.MatvecDotPreX(o.k.v.Name); ok {
					pre++
					assert.Same(t, f.vxq, o.binds[1].Buf, "%s reads the frame's x quantized", o.k.v.Name)
					j := i - 1
					for j >= 0 && ops[j].k.v.Op == shaders.OpMatvec { // q, k, v: after the one dot_x
						j--
					}
					require.GreaterOrEqual(t, j, 0, "%s: no dot_x before it", o.k.v.Name)
					assert.Equal(t, shaders.OpDotX, ops[j].k.v.Op, "%s: the dispatch before its group is dot_x", o.k.v.Name)
				}
			}
			wantPre := 6
			if c.gateUpApart {
				wantPre = 7
			}
			assert.Equal(t, wantPre, pre, "q, k, v, o, gate|up (or gate and up) and down on matvec_dot's PREQ variants")
			assert.Equal(t, c.dotx, dotx, "x quantized once for q, k and v where they quantize alike, once each for o, gate|up and down")
			assert.Equal(t, c.norms, norms, "the norm in dot_x and the matvecs where q, k and v (gate and up) quantize alike, else a dispatch of its own")
		})
	}
}
