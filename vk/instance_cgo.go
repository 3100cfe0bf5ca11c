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

// NewInstance creates a Vulkan 1.2 instance. With opts.Validation, the
// validation layer is enabled when installed (see Instance.Validating).
func NewInstance(opts InstanceOptions) (*Instance, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	if v := Version(C.mr_instance_version()); v < MinAPI {
		return nil, fmt.Errorf("vk: the Vulkan loader is version %s, modrun needs %s: %w", v, MinAPI, ErrNoVulkan)
	}
	validation := opts.Validation && HasValidationLayer()
	syncval := validation && hasSyncValidation()
	var h C.uint64_t
	var call *C.char
	r := Result(C.mr_create_instance(C.uint32_t(MinAPI), cbool(validation), cbool(syncval), &h, &call))
	if err := result(C.GoString(call), r); err != nil {
		if r == -9 { // VK_ERROR_INCOMPATIBLE_DRIVER: no driver, or none for Vulkan 1.2
			return nil, fmt.Errorf("%w (no Vulkan %s driver is installed; Debian mesa-vulkan-drivers has lavapipe): %w", err, MinAPI, ErrNoVulkan)
		}
		return nil, err
	}
	return &Instance{h: uint64(h), validation: validation}, nil
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// ValidationMessages returns, and forgets, the validation layer's warnings
// and errors since the last call. Safe for concurrent use.
func (in *Instance) ValidationMessages() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	msgs := in.kept
	in.kept = nil
	if in.h == 0 {
		return msgs
	}
	for {
		m := C.mr_pop_message(C.uint64_t(in.h))
		if m == nil {
			return msgs
		}
		msgs = append(msgs, C.GoString(m))
		C.free(unsafe.Pointer(m))
	}
}

// Close destroys the instance. Messages not yet read stay readable through
// ValidationMessages, except those that destroying the instance itself
// produces (the messenger is gone by then).
func (in *Instance) Close() {
	if in == nil || in.h == 0 {
		return
	}
	in.kept = append(in.kept, in.ValidationMessages()...)
	in.mu.Lock()
	defer in.mu.Unlock()
	C.mr_destroy_instance(C.uint64_t(in.h))
	in.h = 0
}

// Devices lists the physical devices, in the order Vulkan reports them
// (DeviceInfo.Index is the position).
func (in *Instance) Devices() ([]DeviceInfo, error) {
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
		},
		phys:          phys,
		computeFamily: int(c.compute_family),
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
		ShaderFloat16:            c.f16 != 0,
		ShaderInt8:               c.i8 != 0,
		StorageBuffer16BitAccess: c.sb16 != 0,
		StorageBuffer8BitAccess:  c.sb8 != 0,
		SubgroupArithmetic:       computeSubgroups && c.subgroup_ops&C.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT != 0,
		SubgroupShuffle:          computeSubgroups && c.subgroup_ops&C.VK_SUBGROUP_FEATURE_SHUFFLE_BIT != 0,
		SubgroupBallot:           computeSubgroups && c.subgroup_ops&C.VK_SUBGROUP_FEATURE_BALLOT_BIT != 0,
		CooperativeMatrix:        c.coopmat != 0,
		CooperativeMatrixNV:      c.coopmat_nv != 0 && c.vmm != 0 && c.f16 != 0,
		VulkanMemoryModel:        c.vmm != 0,
		ConditionalRendering:     c.cond_render != 0,
		SubgroupSizeControl:      c.size_control != 0,
		ComputeFullSubgroups:     c.full_subgroups != 0,
	}
	d.Problem = problem(d.APIVersion, d.computeFamily)
	return d
}
