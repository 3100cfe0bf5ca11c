package vk

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// DeviceType is what kind of device Vulkan reports.
type DeviceType string

const (
	Discrete   DeviceType = "discrete"   // a GPU with its own memory
	Integrated DeviceType = "integrated" // a GPU sharing the CPU's memory
	Virtual    DeviceType = "virtual"    // a GPU of a virtual machine
	CPU        DeviceType = "cpu"        // a software rasterizer: lavapipe, SwiftShader
	Other      DeviceType = "other"
)

// deviceTypes is indexed by VkPhysicalDeviceType.
var deviceTypes = [...]DeviceType{Other, Integrated, Discrete, Virtual, CPU}

// preference orders the types ChooseDevice picks from, best first.
var preference = []DeviceType{Discrete, Integrated, Virtual, CPU, Other}

// Version is a Vulkan API version as VK_MAKE_API_VERSION packs it.
type Version uint32

// MakeVersion packs major.minor.patch.
func MakeVersion(major, minor, patch uint32) Version {
	return Version(major<<22 | minor<<12 | patch)
}

func (v Version) String() string {
	return fmt.Sprintf("%d.%d.%d", uint32(v)>>22&0x7f, uint32(v)>>12&0x3ff, uint32(v)&0xfff)
}

// MarshalText writes the version as "1.3.230" (in JSON too).
func (v Version) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// MinAPI is the Vulkan version modrun needs: 1.2 core, nothing optional.
var MinAPI = MakeVersion(1, 2, 0)

// DeviceInfo describes one physical device: what `modrun devices` prints
// and what kernels consult before picking a variant.
type DeviceInfo struct {
	Index            int        `json:"index"` // for --device and MODRUN_DEVICE
	Name             string     `json:"name"`
	Type             DeviceType `json:"type"`
	DriverName       string     `json:"driver_name"`
	DriverInfo       string     `json:"driver_info"`
	APIVersion       Version    `json:"api_version"`
	VendorID         uint32     `json:"vendor_id"`
	DeviceID         uint32     `json:"device_id"`
	DeviceLocalBytes uint64     `json:"device_local_bytes"` // the largest device-local heap
	Limits           Limits     `json:"limits"`
	Features         Features   `json:"features"`
	// Problem says why modrun cannot use the device (API older than 1.2, no
	// compute queue); empty when it can.
	Problem string `json:"problem,omitempty"`

	phys          uint64 // VkPhysicalDevice
	computeFamily int    // queue family index, -1 when none
}

// Limits are the VkPhysicalDeviceLimits (and subgroup properties) that
// kernels and the engine must respect.
type Limits struct {
	MaxComputeSharedMemorySize      uint32    `json:"max_compute_shared_memory_size"`
	MaxComputeWorkGroupInvocations  uint32    `json:"max_compute_work_group_invocations"`
	MaxComputeWorkGroupSize         [3]uint32 `json:"max_compute_work_group_size"`
	MaxComputeWorkGroupCount        [3]uint32 `json:"max_compute_work_group_count"`
	MaxStorageBufferRange           uint64    `json:"max_storage_buffer_range"` // bytes one binding may span: bind bigger tensors in pieces
	MaxPushConstantsSize            uint32    `json:"max_push_constants_size"`
	MinStorageBufferOffsetAlignment uint64    `json:"min_storage_buffer_offset_alignment"` // Bind.Offset must be a multiple
	TimestampPeriod                 float32   `json:"timestamp_period"`                    // ns per timestamp tick
	TimestampValidBits              uint32    `json:"timestamp_valid_bits"`                // of the compute queue; 0: no timestamps
	SubgroupSize                    uint32    `json:"subgroup_size"`
	// MinSubgroupSize and MaxSubgroupSize are the sizes a compute
	// dispatch's subgroups may have (VK_EXT_subgroup_size_control), 0 when
	// the device does not say. Where they differ (Intel: 8 to 32; AMD RDNA:
	// 32 or 64) SubgroupSize is only the size the driver reports, not the
	// one a kernel gets.
	MinSubgroupSize uint32 `json:"min_subgroup_size,omitempty"`
	MaxSubgroupSize uint32 `json:"max_subgroup_size,omitempty"`
	// MaxComputeWorkgroupSubgroups bounds a workgroup that requires a
	// subgroup size: at most this many subgroups of it (0: not declared).
	MaxComputeWorkgroupSubgroups uint32 `json:"max_compute_workgroup_subgroups,omitempty"`
	// RequiredSubgroupSizeCompute: the compute stage is among
	// requiredSubgroupSizeStages, so a compute pipeline may require a size.
	RequiredSubgroupSizeCompute bool `json:"required_subgroup_size_compute,omitempty"`
	// ComputeUnits is the device's SMs (NVIDIA: VK_NV_shader_sm_builtins)
	// or CUs (AMD: VK_AMD_shader_core_properties), what a grid must fill;
	// 0 when the device does not say (lavapipe, Intel).
	ComputeUnits uint32 `json:"compute_units,omitempty"`
}

// Features are the optional capabilities modrun may use. Each is enabled on
// the Device exactly when present; a kernel variant that needs one must only
// be chosen when it is true.
type Features struct {
	ShaderFloat16            bool `json:"shader_float16"`
	ShaderInt8               bool `json:"shader_int8"`
	StorageBuffer16BitAccess bool `json:"storage_buffer_16bit_access"`
	StorageBuffer8BitAccess  bool `json:"storage_buffer_8bit_access"`
	SubgroupArithmetic       bool `json:"subgroup_arithmetic"` // in compute shaders
	SubgroupShuffle          bool `json:"subgroup_shuffle"`    // in compute shaders
	SubgroupBallot           bool `json:"subgroup_ballot"`     // subgroupBroadcast and the ballots, in compute shaders
	CooperativeMatrix        bool `json:"cooperative_matrix"`  // VK_KHR_cooperative_matrix is offered (CooperativeMatrixKHR: usable and enabled)
	// CooperativeMatrixNV: VK_NV_cooperative_matrix with its
	// cooperativeMatrix feature, the 16x16x16 f16 x f16 -> f32 shape at
	// subgroup scope, shaderFloat16 and vulkanMemoryModel (its shaders
	// declare the Vulkan memory model): what shaders' matmul_coop needs.
	// Enabled, with the extension, when true.
	CooperativeMatrixNV bool `json:"cooperative_matrix_nv"`
	// CooperativeMatrixKHR: VK_KHR_cooperative_matrix with its
	// cooperativeMatrix feature, the same shape (16x16x16 f16 x f16 -> f32
	// at subgroup scope), shaderFloat16 and vulkanMemoryModel: what
	// shaders' COOPMAT_KHR variants need. Enabled, with the extension,
	// when true (beside CooperativeMatrixNV where a device has both).
	CooperativeMatrixKHR bool `json:"cooperative_matrix_khr"`
	// VulkanMemoryModel: the Vulkan 1.2 features vulkanMemoryModel and
	// vulkanMemoryModelDeviceScope (the other kernels' atomics and
	// barriers use the device scope, which the memory model without it
	// forbids). Enabled only with CooperativeMatrixNV or
	// CooperativeMatrixKHR, whose shaders declare the model: no other
	// kernel needs it.
	VulkanMemoryModel bool `json:"vulkan_memory_model"`
	// ConditionalRendering: VK_EXT_conditional_rendering (enabled when
	// present): Recorder.BeginConditional discards dispatches on a GPU-written
	// predicate, so a skipped routed block costs no dispatch at all.
	ConditionalRendering bool `json:"conditional_rendering"`
	// SubgroupSizeControl and ComputeFullSubgroups are
	// VK_EXT_subgroup_size_control's features (core in Vulkan 1.3), enabled
	// when present: a pipeline may require a subgroup size, with every
	// subgroup full (KernelSpec.RequiredSubgroupSize; see
	// DeviceInfo.CanRequireSubgroupSize).
	SubgroupSizeControl  bool `json:"subgroup_size_control"`
	ComputeFullSubgroups bool `json:"compute_full_subgroups"`
	// PipelineExecutableInfo: VK_KHR_pipeline_executable_properties with
	// its pipelineExecutableInfo feature: the driver reports each
	// pipeline's compiler statistics. Enabled only on a device opened from
	// an instance with InstanceOptions.KernelStatistics.
	PipelineExecutableInfo bool `json:"pipeline_executable_info"`
	// IntegerDotProduct: VK_KHR_shader_integer_dot_product with its
	// shaderIntegerDotProduct feature (core in Vulkan 1.3, which every 1.3
	// device has; lavapipe's runs it in software), enabled when present:
	// SPIR-V's OpSDot on 4 packed int8 (shaders' matvec_dot).
	// IntegerDotProductAccelerated: its property
	// integerDotProduct4x8BitPackedSignedAccelerated, the packed signed dot
	// a hardware instruction (NVIDIA's DP4A, AMD's v_dot4_i32_i8), not
	// emulated.
	IntegerDotProduct            bool `json:"integer_dot_product"`
	IntegerDotProductAccelerated bool `json:"integer_dot_product_accelerated"`
}

// Timestamps says whether the compute queue can write timestamps.
func (d DeviceInfo) Timestamps() bool { return d.Limits.TimestampValidBits > 0 }

// EnvDevice is the environment variable that picks a device when no
// --device flag does.
const EnvDevice = "MODRUN_DEVICE"

// ChooseDevice picks the device to run on. requested is a --device index, or
// -1 for the default: $MODRUN_DEVICE when set, else the first usable device of
// the best type (discrete, integrated, virtual, cpu).
func ChooseDevice(devs []DeviceInfo, requested int) (DeviceInfo, error) {
	source := "--device"
	if requested < 0 {
		if env, ok := os.LookupEnv(EnvDevice); ok && strings.TrimSpace(env) != "" {
			n, err := strconv.Atoi(strings.TrimSpace(env))
			if err != nil || n < 0 {
				return DeviceInfo{}, fmt.Errorf("vk: %s=%q is not a device index (see modrun devices)", EnvDevice, env)
			}
			requested, source = n, EnvDevice
		}
	}
	if requested >= 0 {
		if requested >= len(devs) {
			return DeviceInfo{}, fmt.Errorf("vk: %s %d: no such device (%d found; see modrun devices)", source, requested, len(devs))
		}
		d := devs[requested]
		if d.Problem != "" {
			return DeviceInfo{}, fmt.Errorf("vk: %s %d (%s): %s", source, requested, d.Name, d.Problem)
		}
		return d, nil
	}
	for _, t := range preference {
		for _, d := range devs {
			if d.Type == t && d.Problem == "" {
				return d, nil
			}
		}
	}
	if len(devs) == 0 {
		return DeviceInfo{}, fmt.Errorf("vk: no Vulkan device found: %w", ErrNoVulkan)
	}
	return DeviceInfo{}, fmt.Errorf("vk: none of the %d Vulkan devices is usable (%s): %w", len(devs), devs[0].Problem, ErrNoVulkan)
}

// ChoiceReason says why ChooseDevice(devs, -1) picked d: $MODRUN_DEVICE, or
// d's type's place in the order of preference among the usable devices.
func ChoiceReason(devs []DeviceInfo, d DeviceInfo) string {
	if env, ok := os.LookupEnv(EnvDevice); ok && strings.TrimSpace(env) != "" {
		return EnvDevice + "=" + strings.TrimSpace(env)
	}
	usable := 0
	for _, o := range devs {
		if o.Problem == "" {
			usable++
		}
	}
	if usable == 1 {
		return fmt.Sprintf("the only usable device (%s)", d.Type)
	}
	order := make([]string, len(preference))
	for i, t := range preference {
		order[i] = string(t)
	}
	return fmt.Sprintf("the first usable %s device, in the order %s", d.Type, strings.Join(order, ", "))
}

// problem says why a device cannot be used, or "".
func problem(api Version, computeFamily int) string {
	switch {
	case api < MinAPI:
		return fmt.Sprintf("Vulkan %s is older than the %s that modrun needs", api, MinAPI)
	case computeFamily < 0:
		return "no compute queue"
	}
	return ""
}
