package vulkan

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/shaders"
)

// The compute probe measures a rate on any device (its output checked
// against the count its FLOP formula assumes, inside ProbeCompute), and
// says why the tensor path has none where the device lacks it. Only what
// cannot be noise is asserted: a positive, finite rate.
func TestProbeCompute(t *testing.T) {
	dev := openDevice(t, true)
	pk, err := ProbeCompute(dev)
	require.NoError(t, err)
	assert.Positive(t, pk.FP32TFLOPs)
	assert.False(t, math.IsInf(pk.FP32TFLOPs, 0) || math.IsNaN(pk.FP32TFLOPs), "%v", pk.FP32TFLOPs)
	assert.Equal(t, pk.FP32TFLOPs, pk.Of(shaders.PathShader))
	p := DeviceProfile(dev.Info())
	if name, _ := p.CoopProbe(); name == "" {
		assert.Zero(t, pk.TensorTFLOPs)
		assert.NotEmpty(t, pk.NoTensor)
	} else {
		assert.Positive(t, pk.TensorTFLOPs)
		assert.Empty(t, pk.NoTensor)
	}
	assert.Equal(t, pk.TensorTFLOPs, pk.Of(shaders.PathTensor))
	t.Logf("%s: FP32 %.4g TFLOP/s, tensor %.4g TFLOP/s (%s), %s", dev.Info().Name, pk.FP32TFLOPs, pk.TensorTFLOPs, pk.NoTensor, pk.Timer)
}
