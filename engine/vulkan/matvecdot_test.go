package vulkan

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/cpu"
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/synth"
	"github.com/modrun/modrun/shaders"
)

// TestMatvecDotAgainstCPU: a GPU profile with matvec_dot
// (MODRUN_MATVEC_DOT=1: the decode's quantized matvecs as integer dot
// products against x quantized to 8 bits) decodes as the CPU backend
// does, which quantizes its activations the same way (blocks of 32; of
// 256 for the K-quants): each step's logits within 2e-4 of the largest
// logit of the CPU backend's, and nearer to them than to the CPU
// reference's (f32 activations) by 10x or more, so that the kernels' 8-bit
// x is what makes them differ from the reference. The models: the trained
// MoD model with its matrices (but the down projection's, 172 columns: not
// whole blocks) and embedding Q8_0 (on lavapipe: 4.8e-7 and 1.6e-2); a
// synthetic MoD model of widths the K-quants take (256 and 512) with
// every K-quant among its matrices; and the same in Q4_0 and the other
// 32-wide types (3.2e-7 and 1.9e-3; 1.4e-7 and 1.3e-3). Integer dot products
// run on lavapipe in software. (Until session 30 the first model's
// matrices went back to F32 after their Q8_0 requantization, so only its
// output took matvec_dot.)
func TestMatvecDotAgainstCPU(t *testing.T) {
	dev := openDevice(t, true)
	if !dev.Info().Features.IntegerDotProduct {
		t.Skip("the device has no integer dot products")
	}
	gpu, err := ProfileWith(dev.Info(), Knobs{"MODRUN_MATVEC_DOT": "1"})
	require.NoError(t, err)
	gpu = gpuProfileOn(gpu.Device, true)
	require.True(t, gpu.MatvecDot, "MODRUN_MATVEC_DOT=1 on a GPU profile of a device with integer dot products")
	wide := synth.Shape{Name: "wide", NEmbd: 256, NLayer: 2, NHead: 4, NKVHead: 2, NFF: 512, NVocab: 600, ContextLen: 64}
	synthetic := func(mix weightMix) func(t *testing.T) (*mod.Model, []int32) {
		return func(t *testing.T) (*mod.Model, []int32) {
			sm, err := synth.Build(wide, synth.Options{Type: gguf.TypeF32, Seed: 9, Capacity: 0.5})
			require.NoError(t, err)
			t.Cleanup(func() { sm.Close() })
			mix.requantize(t, sm.Weights)
			return sm.Model, []int32{1, 17, 230, 5, 99, 412, 3, 77, 501, 8, 64, 300}
		}
	}
	for _, c := range []struct {
		name  string
		model func(t *testing.T) (*mod.Model, []int32)
	}{
		{"mod-trained-q8_0", func(t *testing.T) (*mod.Model, []int32) {
			m := openModel(t, "../../testdata/mod/mod-trained.gguf")
			q8 := gguf.TypeQ8_0 // down's rows are 172 long: not whole blocks
			weightMix{q: q8, k: q8, v: q8, o: q8, gate: q8, up: q8, down: gguf.TypeF32, embd: q8}.requantize(t, m.Weights)
			return m, fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-router"]
		}},
		{"wide-k-quants", synthetic(weightMix{q: gguf.TypeQ4_K, k: gguf.TypeQ5_K, v: gguf.TypeQ6_K, o: gguf.TypeQ3_K,
			gate: gguf.TypeQ4_K, up: gguf.TypeQ4_K, down: gguf.TypeQ2_K, embd: gguf.TypeQ8_0})},
		{"wide-32", synthetic(weightMix{q: gguf.TypeQ4_0, k: gguf.TypeQ4_1, v: gguf.TypeQ5_0, o: gguf.TypeQ5_1,
			gate: gguf.TypeQ4_0, up: gguf.TypeQ4_0, down: gguf.TypeQ5_1, embd: gguf.TypeQ8_0})},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, tokens := c.model(t)
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
			back, err := cpu.New(m, mod.RoutingRouter, cpu.Options{})
			require.NoError(t, err)
			ref, err := m.NewState(mod.RoutingRouter)
			require.NoError(t, err)
			var toCPU, toRef float64
			for step, tok := range tokens {
				got, err := run.Feed([]int32{tok})
				require.NoError(t, err)
				want, err := back.Feed([]int32{tok})
				require.NoError(t, err)
				exact, err := ref.Forward([]int32{tok}, false)
				require.NoError(t, err)
				big := 0.0
				for _, v := range want {
					big = max(big, math.Abs(float64(v)))
				}
				dc, dr := maxAbsDiff(want, got)/big, maxAbsDiff(exact, got)/big
				require.LessOrEqual(t, dc, 2e-4, "step %d: the CPU backend's logits", step)
				toCPU, toRef = max(toCPU, dc), max(toRef, dr)
			}
			t.Logf("%d steps: max |logit diff| to the CPU backend %.2g, to the reference %.2g (of the largest logit)", len(tokens), toCPU, toRef)
			assert.Less(t, 10*toCPU, toRef, "nearer the CPU backend's 8-bit activations than the reference's f32 ones")
		})
	}
}
