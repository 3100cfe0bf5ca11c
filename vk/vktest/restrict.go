package vktest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/modrun/modrun/vk"
)

// Restriction makes a device look smaller than it is: features it then
// lacks, and lower limits. Tests use it to run what the engine picks for a
// device without float16, subgroup arithmetic, conditional rendering, or
// with 16 KiB of shared memory, on lavapipe. A zero field changes nothing.
type Restriction struct {
	// Off names features to take away: the json names of Features fields
	// ("shader_float16", "subgroup_arithmetic", "conditional_rendering",
	// ...), or "timestamps" (the compute queue's timestamps).
	Off []string
	// Limits no higher than these (0: unchanged).
	MaxComputeSharedMemorySize     uint32
	MaxComputeWorkGroupInvocations uint32
	MaxStorageBufferRange          uint64
	// MinStorageBufferOffsetAlignment no lower than this (a power of two;
	// 0: unchanged).
	MinStorageBufferOffsetAlignment uint64
	// SubgroupSize, when not 0, is the size the device is said to report
	// (with no declared range and no size control unless the range is
	// also given): a device whose report is not what its dispatches get.
	SubgroupSize                     uint32
	MinSubgroupSize, MaxSubgroupSize uint32
}

// restrictable are the features Restriction.Off may name.
var restrictable = map[string]func(*vk.DeviceInfo){
	"shader_float16":              func(d *vk.DeviceInfo) { d.Features.ShaderFloat16 = false },
	"shader_int8":                 func(d *vk.DeviceInfo) { d.Features.ShaderInt8 = false },
	"storage_buffer_16bit_access": func(d *vk.DeviceInfo) { d.Features.StorageBuffer16BitAccess = false },
	"storage_buffer_8bit_access":  func(d *vk.DeviceInfo) { d.Features.StorageBuffer8BitAccess = false },
	"subgroup_arithmetic":         func(d *vk.DeviceInfo) { d.Features.SubgroupArithmetic = false },
	"subgroup_shuffle":            func(d *vk.DeviceInfo) { d.Features.SubgroupShuffle = false },
	"subgroup_ballot":             func(d *vk.DeviceInfo) { d.Features.SubgroupBallot = false },
	"cooperative_matrix": func(d *vk.DeviceInfo) {
		d.Features.CooperativeMatrix, d.Features.CooperativeMatrixKHR = false, false
	},
	"cooperative_matrix_nv":  func(d *vk.DeviceInfo) { d.Features.CooperativeMatrixNV = false },
	"cooperative_matrix_khr": func(d *vk.DeviceInfo) { d.Features.CooperativeMatrixKHR = false },
	"vulkan_memory_model": func(d *vk.DeviceInfo) {
		d.Features.VulkanMemoryModel, d.Features.CooperativeMatrixNV, d.Features.CooperativeMatrixKHR = false, false, false
	},
	"conditional_rendering": func(d *vk.DeviceInfo) { d.Features.ConditionalRendering = false },
	"subgroup_size_control": func(d *vk.DeviceInfo) {
		d.Features.SubgroupSizeControl, d.Features.ComputeFullSubgroups = false, false
		d.Limits.RequiredSubgroupSizeCompute = false
	},
	"compute_full_subgroups": func(d *vk.DeviceInfo) { d.Features.ComputeFullSubgroups = false },
	"timestamps":             func(d *vk.DeviceInfo) { d.Limits.TimestampValidBits = 0 },
}

// RestrictableFeatures are the names Restriction.Off takes, sorted.
func RestrictableFeatures() []string {
	names := make([]string, 0, len(restrictable))
	for n := range restrictable {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Apply is d as r makes it: never more capable than d. vk's NewDevice then
// enables only the features left, and Dispatch checks binds against the
// lowered limits, so what runs is what would run on the smaller device.
// A subgroup size that is not d's is only a claim (the dispatches still
// get d's): that is for tests of what happens when a report is wrong.
func (r Restriction) Apply(d vk.DeviceInfo) (vk.DeviceInfo, error) {
	for _, name := range r.Off {
		off, ok := restrictable[name]
		if !ok {
			return d, fmt.Errorf("vktest: no feature %q to restrict (have %s)", name, strings.Join(RestrictableFeatures(), ", "))
		}
		off(&d)
	}
	l := &d.Limits
	lower32 := func(have *uint32, to uint32) {
		if to != 0 && to < *have {
			*have = to
		}
	}
	lower32(&l.MaxComputeSharedMemorySize, r.MaxComputeSharedMemorySize)
	lower32(&l.MaxComputeWorkGroupInvocations, r.MaxComputeWorkGroupInvocations)
	for i := range l.MaxComputeWorkGroupSize {
		lower32(&l.MaxComputeWorkGroupSize[i], l.MaxComputeWorkGroupInvocations)
	}
	if r.MaxStorageBufferRange != 0 && r.MaxStorageBufferRange < l.MaxStorageBufferRange {
		l.MaxStorageBufferRange = r.MaxStorageBufferRange
	}
	if a := r.MinStorageBufferOffsetAlignment; a != 0 {
		if a&(a-1) != 0 {
			return d, fmt.Errorf("vktest: storage buffer offset alignment %d is not a power of two", a)
		}
		l.MinStorageBufferOffsetAlignment = max(l.MinStorageBufferOffsetAlignment, a)
	}
	if r.SubgroupSize != 0 {
		l.SubgroupSize, l.MinSubgroupSize, l.MaxSubgroupSize = r.SubgroupSize, r.MinSubgroupSize, r.MaxSubgroupSize
		if r.MinSubgroupSize == 0 && r.MaxSubgroupSize == 0 {
			restrictable["subgroup_size_control"](&d)
			l.MaxComputeWorkgroupSubgroups = 0
		}
	}
	return d, nil
}
