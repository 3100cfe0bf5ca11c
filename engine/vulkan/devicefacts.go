package vulkan

import (
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
	"os"
)

// deviceFacts is what shaders.NewProfile needs of a device: the subgroup
// size its subgroup kernels may count on (shaders.SubgroupSizeFor: one the
// pipelines require where VK_EXT_subgroup_size_control allows, one the
// device always has, else 0 and no subgroup kernels), its optional
// features and its limits. A vktest.Restriction shows here as a smaller device.
func deviceFacts(info vk.DeviceInfo) shaders.Device {
	l, f := info.Limits, info.Features
	sg, require := shaders.SubgroupSizeFor(shaders.SubgroupFacts{Vendor: info.VendorID, Reported: l.SubgroupSize,
		Min: l.MinSubgroupSize, Max: l.MaxSubgroupSize,
		Control: f.SubgroupSizeControl && f.ComputeFullSubgroups && l.RequiredSubgroupSizeCompute})
	return shaders.Device{
		CPU:                     info.Type == vk.CPU,
		SubgroupSize:            sg,
		SubgroupArithmetic:      f.SubgroupArithmetic,
		SharedMemory:            l.MaxComputeSharedMemorySize,
		MaxWorkGroupInvocations: l.MaxComputeWorkGroupInvocations,
		MaxStorageBufferRange:   l.MaxStorageBufferRange,
		Vendor:                  info.VendorID,
		RequireSubgroupSize:     require,
		MaxWorkgroupSubgroups:   l.MaxComputeWorkgroupSubgroups,
		Float16:                 f.ShaderFloat16,
		Int8:                    f.ShaderInt8,
		Storage16Bit:            f.StorageBuffer16BitAccess,
		Storage8Bit:             f.StorageBuffer8BitAccess,
		SubgroupShuffle:         f.SubgroupShuffle,
		SubgroupBallot:          f.SubgroupBallot,
		CooperativeMatrixNV:     f.CooperativeMatrixNV,
		TensorCores:             os.Getenv("MODRUN_TENSOR_CORES") == "1",
	}
}
