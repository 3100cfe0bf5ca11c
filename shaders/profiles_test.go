package shaders

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Profiles the tests build through NewProfile.

// lavapipeProfile is lavapipe's profile as NewProfile makes it (lavapipe
// 22-23 on a 256-bit SIMD CPU), for tests that run without asking the device.
var lavapipeProfile = NewProfile(Device{CPU: true, SubgroupSize: 8, SubgroupArithmetic: true,
	SharedMemory: 32768, MaxWorkGroupInvocations: 1024, MaxStorageBufferRange: 128 << 20})

// gpuProfileOn is the profile a GPU of d's subgroup size would get, with
// subgroup arithmetic or without it (the shared-memory reduction, many
// invocations per row), for d (GPUProfile): what tests use to run the GPU
// variants on lavapipe (subgroup size 8).
func gpuProfileOn(d Device, subgroupArithmetic bool) Profile {
	d.SubgroupArithmetic = subgroupArithmetic
	return GPUProfile(d)
}

// TestGPUProfile: the GPU profile of lavapipe's facts is a GPU's choices
// (issue 46's list: F16 KV, fused norm and attention, attention chunks,
// the subgroup matvec at lavapipe's size 8, no matvec_lanes) with
// lavapipe's loop cap kept; of a GPU's facts it is the GPU's own profile.
func TestGPUProfile(t *testing.T) {
	g := GPUProfile(lavapipeProfile.Device)
	assert.False(t, g.CPU)
	assert.Equal(t, KVF16, g.KV)
	assert.Equal(t, uint32(attentionChunk), g.AttentionChunk)
	assert.True(t, g.FuseNorm)
	assert.True(t, g.FuseAttention)
	assert.Equal(t, ReduceSubgroup, g.MatvecReduce)
	assert.Equal(t, []uint32{matvecRowsPerGroup * 8, 8, 1}, g.MatvecSpec)
	assert.False(t, g.MatvecLanes)
	assert.Equal(t, uint32(LavapipeLoopIterations), g.LoopCap, "lavapipe still stops loops at its cap")
	nvidia := Device{Vendor: VendorNVIDIA, SubgroupSize: 32, SubgroupArithmetic: true, MaxWorkGroupInvocations: 1024}
	assert.Equal(t, NewProfile(nvidia), GPUProfile(nvidia))
}
