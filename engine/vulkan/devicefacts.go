package vulkan

import (
	"fmt"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// tensorCoresEnv is MODRUN_TENSOR_CORES: unset or 1, the tensor-core
// matmul where the device has it (its f32-precision kernel); 0, never;
// f16, the tensor-core matmul with its operands rounded to halves.
func tensorCoresEnv(k Knobs) (on, half bool, err error) {
	return parseTensorCores(k.get("MODRUN_TENSOR_CORES"))
}

func parseTensorCores(v string) (on, half bool, err error) {
	switch v {
	case "", "1":
		return true, false, nil
	case "0":
		return false, false, nil
	case "f16":
		return true, true, nil
	default:
		return true, false, fmt.Errorf("vulkan: MODRUN_TENSOR_CORES=%q: want 1 (the default: tensor cores at f32 precision), 0 (off) or f16 (operands rounded to halves)", v)
	}
}

// matmulPipeEnv is MODRUN_MATMUL_PIPE: unset or 1, the pipelined matmul
// tile where a GPU profile allows it (shaders.MatmulSpecPipe); 0, the
// tiles before it (MatmulSpecGPU), for comparing the two on a device.
func matmulPipeEnv(k Knobs) (on bool, err error) { return parseMatmulPipe(k.get("MODRUN_MATMUL_PIPE")) }

func parseMatmulPipe(v string) (on bool, err error) {
	switch v {
	case "", "1":
		return true, nil
	case "0":
		return false, nil
	default:
		return true, fmt.Errorf("vulkan: MODRUN_MATMUL_PIPE=%q: want 1 (the default: the pipelined matmul tile on GPUs) or 0 (the tiles before it)", v)
	}
}

// matmulDirectEnv is MODRUN_MATMUL_DIRECT: unset or 0, the tensor-core
// matmul stages its tiles in shared memory (matmul_coop); 1, a prefill's
// matmuls of shaders.MatmulDirectMinRows rows or more make planes of halves
// and load their tiles straight from them (matmul_direct), where the
// device runs the tensor-core matmul; resident, the same with the weights'
// planes made once at load and kept. A measuring knob until a GPU has
// timed it.
func matmulDirectEnv(k Knobs) (on, resident bool, err error) {
	return parseMatmulDirect(k.get("MODRUN_MATMUL_DIRECT"))
}

func parseMatmulDirect(v string) (on, resident bool, err error) {
	switch v {
	case "", "0":
		return false, false, nil
	case "1":
		return true, false, nil
	case "resident":
		return true, true, nil
	default:
		return false, false, fmt.Errorf("vulkan: MODRUN_MATMUL_DIRECT=%q: want 1 (the tensor-core matmul's tiles loaded straight from planes of halves), resident (the same, the weights' planes kept from load: 4 bytes a weight more) or 0 (staged in shared memory: the default)", v)
	}
}

// attentionCoopEnv is MODRUN_ATTENTION_COOP: unset or 0, the prefill's
// attention on the shader cores (attention_split); 1, its products on
// tensor cores (attention_coop) where the device runs the tensor-core
// matmul, for an F16 cache at a head of whole 16-wide tiles up to 128. A
// measuring knob until a GPU has timed it.
func attentionCoopEnv(k Knobs) (on bool, err error) {
	return parseAttentionCoop(k.get("MODRUN_ATTENTION_COOP"))
}

func parseAttentionCoop(v string) (on bool, err error) {
	switch v {
	case "", "0":
		return false, nil
	case "1":
		return true, nil
	default:
		return false, fmt.Errorf("vulkan: MODRUN_ATTENTION_COOP=%q: want 1 (the prefill's attention on tensor cores) or 0 (on the shader cores: the default)", v)
	}
}

// deviceFacts is what shaders.NewProfile needs of a device: the subgroup
// size its subgroup kernels may count on (shaders.SubgroupSizeFor: one the
// pipelines require where VK_EXT_subgroup_size_control allows, one the
// device always has, else 0 and no subgroup kernels), its optional
// features and its limits. A vktest.Restriction shows here as a smaller device.
func deviceFacts(info vk.DeviceInfo, k Knobs) shaders.Device {
	l, f := info.Limits, info.Features
	// openRunner refuses a value either does not know.
	tc, tcHalf, _ := tensorCoresEnv(k)
	pipe, _ := matmulPipeEnv(k)
	direct, resident, _ := matmulDirectEnv(k)
	attnCoop, _ := attentionCoopEnv(k)
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
		ComputeUnits:            l.ComputeUnits,
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
		TensorCores:             tc,
		TensorCoresHalf:         tcHalf,
		NoMatmulPipe:            !pipe,
		MatmulDirect:            direct,
		MatmulDirectResident:    resident,
		AttentionCoop:           attnCoop,
	}
}
