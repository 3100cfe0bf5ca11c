package vk

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// ValidationLayer is the Khronos validation layer's name.
const ValidationLayer = "VK_LAYER_KHRONOS_validation"

// DefaultTimeout is a new Device's Timeout.
const DefaultTimeout = 5 * time.Minute

// InstanceOptions configure NewInstance.
type InstanceOptions struct {
	// Validation enables the Khronos validation layer, when it is installed,
	// with synchronization validation (which reports a missing barrier as a
	// hazard), and collects its messages (see Instance.ValidationMessages).
	// Tests set it.
	Validation bool
	// NoSyncValidation leaves synchronization validation off under
	// Validation: for recordings whose kernels order some commands
	// themselves (Access Handoff), where it would report each barrier
	// left out on purpose as a hazard. The rest of the layer's checks stay.
	NoSyncValidation bool
	// KernelStatistics keeps each kernel's compiler statistics (registers,
	// spills, instructions: Kernel.Statistics) on the devices it opens that
	// offer VK_KHR_pipeline_executable_properties
	// (Features.PipelineExecutableInfo). Off by default: a driver may
	// compile more slowly while it keeps them.
	KernelStatistics bool
}

// Instance is a handle on the process's Vulkan instance (one per
// InstanceOptions, made once: NewInstance): the entry point that lists
// devices. Close it after every Device made from it.
type Instance struct {
	h           uint64 // mr_instance*; 0 once the handle is closed
	validation  bool   // the layer is on
	kernelStats bool   // InstanceOptions.KernelStatistics
	shared      *sharedInstance
}

// Validating says whether the validation layer is on.
func (in *Instance) Validating() bool { return in.validation }

// Device is one logical device with one compute queue. A Device and the
// objects made from it are not safe for concurrent use; close the Buffers,
// Kernels and Recorders before the Device.
type Device struct {
	inst *Instance
	info DeviceInfo
	h    uint64 // mr_device*

	// Timeout bounds how long Run waits for the GPU before it returns an
	// error (VK_TIMEOUT) instead of hanging.
	Timeout time.Duration
	// MemoryLimit caps the bytes this device's live buffers may hold
	// together (0: only the driver's limit). NewBuffer past it fails with
	// an *OutOfMemoryError, as when the device's memory runs out: a program
	// may leave room for others, and tests make an allocation fail midway.
	MemoryLimit uint64

	shared *sharedDevice // the VkDevice this Device is a handle on
	key    deviceKey

	staging *Buffer // host-visible, for Upload and Download of device-local buffers
	stats   Stats
	held    [2]uint64 // bytes of the live buffers, by BufferKind
	// broken is set by a submit that failed so that the device's state is
	// unknown (VK_ERROR_DEVICE_LOST, a fence that timed out): every later
	// Run, Upload and Download returns it at once, never waits.
	broken error
}

// Info describes the device.
func (d *Device) Info() DeviceInfo { return d.info }

// Stats are what a Device (in total) or a Recorder has done.
type Stats struct {
	Recordings     int    // command buffers recorded
	Submits        int    // command buffers submitted (each waited for)
	Dispatches     int    // dispatches recorded
	Indirect       int    // of the Dispatches, those whose workgroup counts the GPU reads (DispatchIndirect)
	Barriers       int    // derived vkCmdPipelineBarrier calls recorded
	BufferBarriers int    // buffer memory barriers in them
	CopyBytes      uint64 // bytes of the buffer-to-buffer copies recorded (Copy)
}

func (s *Stats) add(o Stats) {
	s.Recordings += o.Recordings
	s.Submits += o.Submits
	s.Dispatches += o.Dispatches
	s.Indirect += o.Indirect
	s.Barriers += o.Barriers
	s.BufferBarriers += o.BufferBarriers
	s.CopyBytes += o.CopyBytes
}

// Stats counts everything recorded and submitted on the device so far.
func (d *Device) Stats() Stats { return d.stats }

// BufferKind says where a buffer lives.
type BufferKind int

const (
	// DeviceLocal memory is the fastest for kernels; the host reaches it
	// only through Upload and Download (a staging copy). Usable as storage,
	// copy source and destination, and indirect-dispatch arguments.
	DeviceLocal BufferKind = iota
	// HostVisible memory is mapped and coherent: Upload and Download are
	// plain copies. Also usable as a storage buffer, slower on a discrete GPU.
	HostVisible
)

func (k BufferKind) String() string {
	if k == HostVisible {
		return "host-visible"
	}
	return "device-local"
}

// Buffer is a range of GPU memory.
type Buffer struct {
	dev    *Device
	kind   BufferKind
	size   uint64
	buf    uint64 // VkBuffer
	mem    uint64 // VkDeviceMemory
	mapped unsafe.Pointer
}

// Size is the buffer's size in bytes (what was asked, rounded up to 4).
func (b *Buffer) Size() uint64 { return b.size }

// Kind says where the buffer lives.
func (b *Buffer) Kind() BufferKind { return b.kind }

// KernelSpec describes a compute shader's interface.
type KernelSpec struct {
	Name              string   // for errors and profiles: "matvec_f16"
	Bindings          int      // storage buffers at set 0, bindings 0..Bindings-1
	PushConstantBytes int      // size of the push-constant block, a multiple of 4
	Specialization    []uint32 // value i is constant_id i
	// RequiredSubgroupSize, when not 0, makes every subgroup of the
	// kernel's dispatches exactly this size and full
	// (VK_EXT_subgroup_size_control); NewKernel refuses it on a device
	// that cannot (DeviceInfo.CanRequireSubgroupSize). The workgroup size
	// must be a multiple of it.
	RequiredSubgroupSize uint32
}

// Kernel is a compute pipeline.
type Kernel struct {
	dev                   *Device
	spec                  KernelSpec
	dsl, layout, pipeline uint64
}

// KernelStatistic is one compiler statistic of a kernel (Kernel.Statistics).
type KernelStatistic struct {
	Executable  string  `json:"executable"`  // the pipeline's executable (a compute pipeline has one; RADV: "Compute Shader")
	Name        string  `json:"name"`        // the driver's name for it: "VGPRs", "Spilled VGPRs"
	Description string  `json:"description"` // the driver's words for it
	Value       float64 `json:"value"`       // booleans are 0 or 1
}

// statsFeature is the index in deviceKey.features of "kernel statistics
// kept" (InstanceOptions.KernelStatistics on a device that offers them).
const statsFeature = 10

// Spec is what the kernel was made from.
func (k *Kernel) Spec() KernelSpec { return k.spec }

// stagingBytes is the most host memory Upload and Download stage at once.
const stagingBytes = 16 << 20

// maxBindings bounds KernelSpec.Bindings (the C side's array).
const maxBindings = 32

// Live counts the Vulkan objects of this process that hold memory and are
// not closed yet: a test takes it before and after some work to show that
// the work (an Open that failed midway included) leaks nothing.
type Live struct {
	Devices int
	Buffers int
	Bytes   uint64 // the Buffers' sizes
}

// sharedInstance is one of the process's instances (NewInstance).
// mu serializes the reading of its validation messages.
type sharedInstance struct {
	h          uint64 // mr_instance*
	validation bool   // the layer is on
	mu         sync.Mutex
}

// deviceKey says which VkDevice a Device may share: the same physical
// device of the same instance, the same queue family and the same optional
// features enabled (a vktest.Restriction that turns one off makes a
// VkDevice of its own; lowered limits are checked in Go, per Device).
type deviceKey struct {
	inst, phys uint64
	family     int
	features   [12]bool
}

// sharedDevice is a VkDevice and the number of open Devices on it.
type sharedDevice struct {
	base uint64 // mr_device* that made the VkDevice; each Device has a clone
	refs int
}

// instancesCreated and devicesCreated count the vkCreateInstance and
// vkCreateDevice calls that succeeded in this process.
var instancesCreated, devicesCreated atomic.Int64

// InstancesCreated is how many Vulkan instances this process has created:
// at most one per InstanceOptions, however many models it opens and closes
// (NVIDIA's driver stops creating them after about 30).
func InstancesCreated() int { return int(instancesCreated.Load()) }

// DevicesCreated is how many Vulkan logical devices (VkDevice) this process
// has created. Devices open at once on the same physical device with the
// same features share one (NewDevice).
func DevicesCreated() int { return int(devicesCreated.Load()) }

var live struct {
	devices, buffers atomic.Int64
	bytes            atomic.Uint64
}

// LiveObjects is what is live now, over every Device.
func LiveObjects() Live {
	return Live{Devices: int(live.devices.Load()), Buffers: int(live.buffers.Load()), Bytes: live.bytes.Load()}
}
