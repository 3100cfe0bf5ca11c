package vktest

import (
	"testing"

	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Restriction only ever takes away: features off, limits down, alignment up;
// a claimed subgroup size without a range also drops size control.
func TestRestrictionApply(t *testing.T) {
	full := vk.DeviceInfo{
		Features: vk.Features{ShaderFloat16: true, ShaderInt8: true, StorageBuffer16BitAccess: true, StorageBuffer8BitAccess: true,
			SubgroupArithmetic: true, ConditionalRendering: true, SubgroupSizeControl: true, ComputeFullSubgroups: true},
		Limits: vk.Limits{MaxComputeSharedMemorySize: 32768, MaxComputeWorkGroupInvocations: 1024,
			MaxComputeWorkGroupSize: [3]uint32{1024, 1024, 64}, MaxStorageBufferRange: 1 << 30,
			MinStorageBufferOffsetAlignment: 16, TimestampValidBits: 64, SubgroupSize: 8, MinSubgroupSize: 8,
			MaxSubgroupSize: 8, RequiredSubgroupSizeCompute: true, MaxComputeWorkgroupSubgroups: 32},
	}
	d, err := Restriction{Off: []string{"shader_float16", "conditional_rendering", "timestamps"},
		MaxComputeSharedMemorySize: 16384, MaxComputeWorkGroupInvocations: 256, MaxStorageBufferRange: 128 << 20,
		MinStorageBufferOffsetAlignment: 256}.Apply(full)
	require.NoError(t, err)
	assert.False(t, d.Features.ShaderFloat16)
	assert.False(t, d.Features.ConditionalRendering)
	assert.False(t, d.Timestamps())
	assert.True(t, d.Features.ShaderInt8, "untouched")
	assert.Equal(t, uint32(16384), d.Limits.MaxComputeSharedMemorySize)
	assert.Equal(t, uint32(256), d.Limits.MaxComputeWorkGroupInvocations)
	assert.Equal(t, [3]uint32{256, 256, 64}, d.Limits.MaxComputeWorkGroupSize)
	assert.Equal(t, uint64(128<<20), d.Limits.MaxStorageBufferRange)
	assert.Equal(t, uint64(256), d.Limits.MinStorageBufferOffsetAlignment)

	up, err := Restriction{MaxComputeSharedMemorySize: 65536, MinStorageBufferOffsetAlignment: 4}.Apply(full)
	require.NoError(t, err)
	assert.Equal(t, full.Limits, up.Limits, "a restriction never raises a limit or lowers the alignment")

	claim, err := Restriction{SubgroupSize: 16}.Apply(full)
	require.NoError(t, err)
	assert.Equal(t, uint32(16), claim.Limits.SubgroupSize)
	assert.Zero(t, claim.Limits.MinSubgroupSize)
	assert.False(t, claim.Features.SubgroupSizeControl)
	assert.Error(t, claim.CanRequireSubgroupSize(16))

	_, err = Restriction{Off: []string{"warp_drive"}}.Apply(full)
	assert.ErrorContains(t, err, `no feature "warp_drive"`)
	_, err = Restriction{MinStorageBufferOffsetAlignment: 48}.Apply(full)
	assert.ErrorContains(t, err, "not a power of two")
}
