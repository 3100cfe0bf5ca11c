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

// coopMatEnv is MODRUN_COOPMAT: which Vulkan extension the tensor-core
// kernels take where a device has both (NVIDIA's drivers offer both): unset
// or nv, VK_NV_cooperative_matrix's (the kernels measured on an H200); khr,
// VK_KHR_cooperative_matrix's, the ones AMD and Intel GPUs take, so that
// an NVIDIA GPU measures them too. A device with one of the two takes it
// whatever the knob says.
func coopMatEnv(k Knobs) (khr bool, err error) { return parseCoopMat(k.get("MODRUN_COOPMAT")) }

func parseCoopMat(v string) (khr bool, err error) {
	switch v {
	case "", "nv":
		return false, nil
	case "khr":
		return true, nil
	}
	return false, fmt.Errorf("vulkan: MODRUN_COOPMAT=%q: want nv (VK_NV_cooperative_matrix's kernels where the device has them: the default) or khr (VK_KHR_cooperative_matrix's)", v)
}

// matmulPipeEnv is MODRUN_MATMUL_PIPE: unset or 1, the pipelined matmul
// tile where a GPU profile allows it (shaders.MatmulSpecPipe); 0, the
// tiles before it (MatmulSpecGPU), for comparing the two on a device.
func matmulPipeEnv(k Knobs) (on bool, err error) { return parseMatmulPipe(k.get("MODRUN_MATMUL_PIPE")) }

func parseMatmulPipe(v string) (on bool, err error) {
	return parseOnOff("MODRUN_MATMUL_PIPE", v, true, "the pipelined matmul tile on GPUs", "the tiles before it")
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
	return parseOnOff("MODRUN_ATTENTION_COOP", v, false, "the prefill's attention on tensor cores", "on the shader cores")
}

// matvecRowsEnv is MODRUN_MATVEC_ROWS: unset or 1, a GPU profile's
// quantized matvecs as matvec_rows (the default, chosen on the H200);
// 0, as matvec.comp's subgroup kernel (and batched steps of at most 8
// rows as matvecs), for a GPU that has not timed the two. A measuring knob.
func matvecRowsEnv(k Knobs) (on bool, err error) { return parseMatvecRows(k.get("MODRUN_MATVEC_ROWS")) }

func parseMatvecRows(v string) (on bool, err error) {
	return parseOnOff("MODRUN_MATVEC_ROWS", v, true, "the quantized matvecs as matvec_rows on GPUs", "as matvec.comp's subgroup kernel")
}

// attendKeysEnv is MODRUN_ATTEND_KEYS: unset or 1, a GPU profile's fused
// decode attention as decode_attend_keys (the keys across invocations:
// the default); 0, as decode_attend (each invocation walks keys). A
// measuring knob until a GPU has timed the two (issue 42 item 5).
func attendKeysEnv(k Knobs) (on bool, err error) { return parseAttendKeys(k.get("MODRUN_ATTEND_KEYS")) }

func parseAttendKeys(v string) (on bool, err error) {
	return parseOnOff("MODRUN_ATTEND_KEYS", v, true, "decode attention as decode_attend_keys on GPUs", "as decode_attend")
}

// attendOwnEnv is MODRUN_ATTEND_OWN: unset or 1, a GPU profile's batched
// steps whose rows are each their sequence's only one run paged_qkv and
// paged_attend as one dispatch (paged_attend_own: the default); 0, apart.
// A measuring knob until a GPU has timed the two (issue 42 item 6).
func attendOwnEnv(k Knobs) (on bool, err error) { return parseAttendOwn(k.get("MODRUN_ATTEND_OWN")) }

func parseAttendOwn(v string) (on bool, err error) {
	return parseOnOff("MODRUN_ATTEND_OWN", v, true, "a batched step of decoding rows with paged_attend_own on GPUs", "with paged_qkv and paged_attend apart")
}

// matvecDotEnv is MODRUN_MATVEC_DOT: unset or 0, a GPU profile's decode
// matvecs of quantized weights (Q8_0, Q4_0 and the sub-block types)
// convert each weight to a float (matvec_rows); 1, they take integer dot
// products against x quantized to 8 bits in each workgroup (matvec_dot),
// where the device has them. A measuring knob until a GPU has timed the
// two (issue 42 item 2).
func matvecDotEnv(k Knobs) (on bool, err error) { return parseMatvecDot(k.get("MODRUN_MATVEC_DOT")) }

func parseMatvecDot(v string) (on bool, err error) {
	return parseOnOff("MODRUN_MATVEC_DOT", v, false, "the quantized decode matvecs as integer dot products against x in 8 bits", "as matvec_rows's float products")
}

// parseOnOff is a knob of two values, name's value v: "1" (on) or "0",
// "" its default; anything else is refused by name, saying what each
// value does.
func parseOnOff(name, v string, def bool, on, off string) (bool, error) {
	switch v {
	case "":
		return def, nil
	case "1":
		return true, nil
	case "0":
		return false, nil
	}
	d1, d0 := "", ""
	if def {
		d1 = "the default: "
	} else {
		d0 = ": the default"
	}
	return def, fmt.Errorf("vulkan: %s=%q: want 1 (%s%s) or 0 (%s%s)", name, v, d1, on, off, d0)
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
	rows, _ := matvecRowsEnv(k)
	keys, _ := attendKeysEnv(k)
	own, _ := attendOwnEnv(k)
	dot, _ := matvecDotEnv(k)
	coopKHR, _ := coopMatEnv(k)
	// Whether a pipeline may require subgroups of 32 (the KHR tensor-core kernels').
	sg32 := f.SubgroupSizeControl && f.ComputeFullSubgroups && l.RequiredSubgroupSizeCompute &&
		l.MinSubgroupSize <= shaders.MatmulCoopSubgroup && shaders.MatmulCoopSubgroup <= l.MaxSubgroupSize
	sg, require := shaders.SubgroupSizeFor(shaders.SubgroupFacts{Vendor: info.VendorID, Reported: l.SubgroupSize,
		Min: l.MinSubgroupSize, Max: l.MaxSubgroupSize,
		Control: f.SubgroupSizeControl && f.ComputeFullSubgroups && l.RequiredSubgroupSizeCompute})
	return shaders.Device{
		CPU:                          info.Type == vk.CPU,
		SubgroupSize:                 sg,
		SubgroupArithmetic:           f.SubgroupArithmetic,
		SharedMemory:                 l.MaxComputeSharedMemorySize,
		MaxWorkGroupInvocations:      l.MaxComputeWorkGroupInvocations,
		MaxStorageBufferRange:        l.MaxStorageBufferRange,
		ComputeUnits:                 l.ComputeUnits,
		Vendor:                       info.VendorID,
		RequireSubgroupSize:          require,
		MaxWorkgroupSubgroups:        l.MaxComputeWorkgroupSubgroups,
		Float16:                      f.ShaderFloat16,
		Int8:                         f.ShaderInt8,
		Storage16Bit:                 f.StorageBuffer16BitAccess,
		Storage8Bit:                  f.StorageBuffer8BitAccess,
		SubgroupShuffle:              f.SubgroupShuffle,
		SubgroupBallot:               f.SubgroupBallot,
		CooperativeMatrixNV:          f.CooperativeMatrixNV,
		CooperativeMatrixKHR:         f.CooperativeMatrixKHR,
		Subgroup32:                   sg32,
		CoopMatKHR:                   coopKHR,
		TensorCores:                  tc,
		TensorCoresHalf:              tcHalf,
		NoMatmulPipe:                 !pipe,
		MatmulDirect:                 direct,
		MatmulDirectResident:         resident,
		AttentionCoop:                attnCoop,
		NoMatvecRows:                 !rows,
		NoAttendKeys:                 !keys,
		NoAttendOwn:                  !own,
		IntegerDotProduct:            f.IntegerDotProduct,
		IntegerDotProductAccelerated: f.IntegerDotProductAccelerated,
		MatvecDot:                    dot,
	}
}
