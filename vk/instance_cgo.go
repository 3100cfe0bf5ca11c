//go:build cgo

package vk

/*
#cgo CFLAGS: -DVK_NO_PROTOTYPES -O2
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "vk_c.h"
*/
import "C"

import (
	"fmt"
	"math"
	"sync"
	"unsafe"
)

var (
	loadOnce sync.Once
	loadErr  error
)

// Load opens the Vulkan loader (libvulkan.so.1) once. It is called by
// NewInstance; call it directly to ask whether Vulkan is there at all. The
// error wraps ErrNoVulkan.
func Load() error {
	loadOnce.Do(func() {
		if msg := C.mr_load(); msg != nil {
			loadErr = fmt.Errorf("vk: %s: %w", C.GoString(msg), ErrNoVulkan)
		}
	})
	return loadErr
}

// LoaderVersion is the Vulkan version the loader reports (1.0 for a loader
// without vkEnumerateInstanceVersion), or Load's error.
func LoaderVersion() (Version, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	return Version(C.mr_instance_version()), nil
}

// HasValidationLayer says whether the validation layer is installed
// (Debian: vulkan-validationlayers).
func HasValidationLayer() bool {
	if Load() != nil {
		return false
	}
	name := C.CString(ValidationLayer)
	defer C.free(unsafe.Pointer(name))
	ext := C.CString("VK_EXT_debug_utils")
	defer C.free(unsafe.Pointer(ext))
	return C.mr_has_layer(name) != 0 && C.mr_has_instance_extension(nil, ext) != 0
}

// hasSyncValidation says whether the validation layer offers
// VK_EXT_validation_features, through which synchronization validation
// (hazards between commands: missing barriers) is turned on.
func hasSyncValidation() bool {
	layer := C.CString(ValidationLayer)
	defer C.free(unsafe.Pointer(layer))
	ext := C.CString("VK_EXT_validation_features")
	defer C.free(unsafe.Pointer(ext))
	return C.mr_has_instance_extension(layer, ext) != 0
}

// shared holds the process's Vulkan instances, one per InstanceOptions,
// made at the first NewInstance that asks for them and never destroyed:
// NVIDIA's driver (580.159.04) refuses vkCreateInstance with
// VK_ERROR_INCOMPATIBLE_DRIVER after about 30 create/destroy cycles in one
// process, so a process that opens and closes models must not cycle them.
// The validation layer and the instance extensions are chosen when an
// instance is made; a process asking both with and without validation (a
// test binary's tests and benchmarks) holds two.
var shared struct {
	sync.Mutex
	insts map[InstanceOptions]*sharedInstance
}

// NewInstance returns a handle on the process's Vulkan 1.2 instance for
// opts, creating it at the first call (InstancesCreated counts those). With
// opts.Validation, the validation layer is enabled when installed (see
// Instance.Validating). A failed creation is not remembered: the next call
// tries again.
func NewInstance(opts InstanceOptions) (*Instance, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if v := Version(C.mr_instance_version()); v < MinAPI {
		return nil, fmt.Errorf("vk: the Vulkan loader is version %s, modrun needs %s: %w", v, MinAPI, ErrNoVulkan)
	}
	validation := opts.Validation && HasValidationLayer()
	// KernelStatistics is the devices' concern: one VkInstance for both.
	key := InstanceOptions{Validation: validation, NoSyncValidation: validation && opts.NoSyncValidation}
	shared.Lock()
	defer shared.Unlock()
	if s := shared.insts[key]; s != nil {
		return &Instance{h: s.h, validation: s.validation, kernelStats: opts.KernelStatistics, shared: s}, nil
	}
	syncval := validation && !opts.NoSyncValidation && hasSyncValidation()
	var h C.uint64_t
	var call *C.char
	r := Result(C.mr_create_instance(C.uint32_t(MinAPI), cbool(validation), cbool(syncval), &h, &call))
	if err := result(C.GoString(call), r); err != nil {
		if r == -9 { // VK_ERROR_INCOMPATIBLE_DRIVER: no driver, or none for Vulkan 1.2
			return nil, fmt.Errorf("%w (no Vulkan %s driver is installed; Debian mesa-vulkan-drivers has lavapipe): %w", err, MinAPI, ErrNoVulkan)
		}
		return nil, err
	}
	instancesCreated.Add(1)
	s := &sharedInstance{h: uint64(h), validation: validation}
	if shared.insts == nil {
		shared.insts = map[InstanceOptions]*sharedInstance{}
	}
	shared.insts[key] = s
	return &Instance{h: s.h, validation: validation, kernelStats: opts.KernelStatistics, shared: s}, nil
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// ValidationMessages returns, and forgets, the validation layer's warnings
// and errors since the last call on any handle of this process's instance
// (the instance is shared: a test that wants only its own messages reads
// them before and after its work). Safe for concurrent use, and usable
// after Close.
func (in *Instance) ValidationMessages() []string {
	if in == nil || in.shared == nil {
		return nil
	}
	s := in.shared
	s.mu.Lock()
	defer s.mu.Unlock()
	var msgs []string
	for {
		m := C.mr_pop_message(C.uint64_t(s.h))
		if m == nil {
			return msgs
		}
		msgs = append(msgs, C.GoString(m))
		C.free(unsafe.Pointer(m))
	}
}

// Close gives the handle back. The Vulkan instance itself lives as long as
// the process (see NewInstance), so closing never destroys it; Devices and
// NewDevice may not be called on a closed handle.
func (in *Instance) Close() {
	if in == nil {
		return
	}
	in.h = 0
}

// Devices lists the physical devices, in the order Vulkan reports them
// (DeviceInfo.Index is the position).
func (in *Instance) Devices() ([]DeviceInfo, error) {
	if in.h == 0 {
		return nil, fmt.Errorf("vk: Devices: the instance handle is closed")
	}
	var n C.uint32_t
	if err := result("vkEnumeratePhysicalDevices", Result(C.mr_enumerate_devices(C.uint64_t(in.h), &n, nil))); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	phys := make([]C.uint64_t, n)
	r := Result(C.mr_enumerate_devices(C.uint64_t(in.h), &n, &phys[0]))
	if r != 0 && r != 5 { // VK_INCOMPLETE: a device vanished between the calls
		return nil, result("vkEnumeratePhysicalDevices", r)
	}
	devs := make([]DeviceInfo, n)
	for i := range devs {
		devs[i] = in.deviceInfo(uint64(phys[i]), i)
	}
	return devs, nil
}

// coopMatKHRHeaders is the Vulkan headers' version that brought
// VK_KHR_cooperative_matrix.
var coopMatKHRHeaders = MakeVersion(1, 3, 255)

// validationLayerVersion is the installed validation layer's specVersion
// (0 when none is).
func validationLayerVersion() Version {
	name := C.CString(ValidationLayer)
	defer C.free(unsafe.Pointer(name))
	return Version(C.mr_layer_spec_version(name))
}

func (in *Instance) deviceInfo(phys uint64, index int) DeviceInfo {
	var c C.mr_device_info
	C.mr_device_info_get(C.uint64_t(in.h), C.uint64_t(phys), &c)
	d := DeviceInfo{
		Index:            index,
		Name:             C.GoString(&c.name[0]),
		Type:             Other,
		DriverName:       C.GoString(&c.driver_name[0]),
		DriverInfo:       C.GoString(&c.driver_info[0]),
		APIVersion:       Version(c.api_version),
		VendorID:         uint32(c.vendor_id),
		DeviceID:         uint32(c.device_id),
		DeviceLocalBytes: uint64(c.device_local_bytes),
		Limits: Limits{
			MaxComputeSharedMemorySize:      uint32(c.max_shared_memory),
			MaxComputeWorkGroupInvocations:  uint32(c.max_invocations),
			MaxStorageBufferRange:           uint64(c.max_storage_buffer_range),
			MaxPushConstantsSize:            uint32(c.max_push_constants),
			MinStorageBufferOffsetAlignment: uint64(c.min_storage_offset_alignment),
			TimestampPeriod:                 float32(c.timestamp_period),
			TimestampValidBits:              uint32(c.timestamp_valid_bits),
			SubgroupSize:                    uint32(c.subgroup_size),
			MinSubgroupSize:                 uint32(c.min_subgroup),
			MaxSubgroupSize:                 uint32(c.max_subgroup),
			MaxComputeWorkgroupSubgroups:    uint32(c.max_workgroup_subgroups),
			RequiredSubgroupSizeCompute:     c.required_subgroup_stages&C.VK_SHADER_STAGE_COMPUTE_BIT != 0,
			ComputeUnits:                    uint32(c.compute_units),
		},
		phys:          phys,
		computeFamily: int(c.compute_family),
	}
	if p := float64(d.Limits.TimestampPeriod); math.IsNaN(p) || math.IsInf(p, 0) || p <= 0 {
		// A period that converts no tick to time (RADV's null device says
		// +Inf): no timestamps, rather than durations of Inf or NaN (and
		// JSON that cannot encode them).
		d.Limits.TimestampPeriod, d.Limits.TimestampValidBits = 0, 0
	}
	if int(c._type) < len(deviceTypes) {
		d.Type = deviceTypes[c._type]
	}
	for i := 0; i < 3; i++ {
		d.Limits.MaxComputeWorkGroupSize[i] = uint32(c.max_size[i])
		d.Limits.MaxComputeWorkGroupCount[i] = uint32(c.max_count[i])
	}
	computeSubgroups := c.subgroup_stages&C.VK_SHADER_STAGE_COMPUTE_BIT != 0
	d.Features = Features{
		ShaderFloat16:                c.f16 != 0,
		ShaderInt8:                   c.i8 != 0,
		StorageBuffer16BitAccess:     c.sb16 != 0,
		StorageBuffer8BitAccess:      c.sb8 != 0,
		SubgroupArithmetic:           computeSubgroups && c.subgroup_ops&C.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT != 0,
		SubgroupShuffle:              computeSubgroups && c.subgroup_ops&C.VK_SUBGROUP_FEATURE_SHUFFLE_BIT != 0,
		SubgroupBallot:               computeSubgroups && c.subgroup_ops&C.VK_SUBGROUP_FEATURE_BALLOT_BIT != 0,
		CooperativeMatrix:            c.coopmat != 0,
		CooperativeMatrixNV:          c.coopmat_nv != 0 && c.vmm != 0 && c.f16 != 0,
		CooperativeMatrixKHR:         c.coopmat_khr != 0 && c.vmm != 0 && c.f16 != 0,
		VulkanMemoryModel:            c.vmm != 0,
		ConditionalRendering:         c.cond_render != 0,
		SubgroupSizeControl:          c.size_control != 0,
		ComputeFullSubgroups:         c.full_subgroups != 0,
		PipelineExecutableInfo:       c.exec_props != 0,
		IntegerDotProduct:            c.idot != 0,
		IntegerDotProductAccelerated: c.idot_accel != 0,
	}
	// A validation layer older than the extension (Debian 12's is 1.3.239)
	// reports its feature structure in vkCreateDevice's chain as an unknown
	// structure, an error: a validating instance leaves it off there (and
	// its kernels with it), so that the layer checks everything else.
	if in.validation && d.Features.CooperativeMatrixKHR && validationLayerVersion() < coopMatKHRHeaders {
		d.Features.CooperativeMatrixKHR = false
	}
	d.Problem = problem(d.APIVersion, d.computeFamily)
	return d
}
