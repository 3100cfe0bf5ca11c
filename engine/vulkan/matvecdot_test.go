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
	"github.com/modrun/modrun/shaders"
)

// TestMatvecDotAgainstCPU: a GPU profile with matvec_dot
// (MODRUN_MATVEC_DOT=1: the decode's Q8_0 matvecs as integer dot products
// against x quantized to 8 bits) decodes a model whose matrices (but
// the down projection's, 172 columns: not whole blocks) and embedding
// are Q8_0 as the CPU backend does, which quantizes its
// activations the same way: each step's logits within 2e-4 of the
// largest logit of the CPU backend's, and nearer to them than to the CPU
// reference's (f32 activations) by 10x or more (on lavapipe: 6e-7 and
// 1.1e-2), so that the kernels' 8-bit
// x is what makes them differ from the reference. Integer dot products
// run on lavapipe in software.
func TestMatvecDotAgainstCPU(t *testing.T) {
	dev := openDevice(t, true)
	if !dev.Info().Features.IntegerDotProduct {
		t.Skip("the device has no integer dot products")
	}
	gpu, err := ProfileWith(dev.Info(), Knobs{"MODRUN_MATVEC_DOT": "1"})
	require.NoError(t, err)
	gpu = gpuProfileOn(gpu.Device, true)
	require.True(t, gpu.MatvecDot, "MODRUN_MATVEC_DOT=1 on a GPU profile of a device with integer dot products")
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	for l := range m.Weights.Blocks {
		b := &m.Weights.Blocks[l]
		for _, mt := range []*mod.Mat{&b.Q, &b.K, &b.V, &b.O, &b.Gate, &b.Up} { // down's rows are 172 long: not whole blocks
			requantize(t, mt, gguf.TypeQ8_0)
		}
	}
	weightMix{embd: gguf.TypeQ8_0}.requantize(t, m.Weights)
	name, _ := gpu.Matvec(shaders.MatvecQ8_0, shaders.FuseNorm, 1, uint32(m.Config.NEmbd))
	require.True(t, strings.Contains(name, shaders.ReduceSubgroupDot), "the profile takes matvec_dot: %s", name)
	tokens := fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-router"]
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
}
