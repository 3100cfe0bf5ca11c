//go:build cgo

package vk

/*
#include <stdlib.h>
#include <string.h>
#include "vk_c.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"sync"
	"unsafe"
)

var devices struct {
	sync.Mutex
	m map[deviceKey]*sharedDevice
}

// NewDevice opens the device info describes (one of Devices(), or what
// ChooseDevice picked) with one compute queue and every optional feature
// that it has enabled. Devices open at once on the same physical device
// with the same features share one VkDevice and queue (two models on one
// GPU): each has its own command pool, fence, buffers and memory limit,
// and their submits are serialized on the queue. The VkDevice is destroyed
// when the last of them closes.
func (in *Instance) NewDevice(info DeviceInfo) (*Device, error) {
	if info.phys == 0 {
		return nil, fmt.Errorf("vk: device %d (%s) was not listed by this instance's Devices", info.Index, info.Name)
	}
	if info.Problem != "" {
		return nil, fmt.Errorf("vk: device %d (%s): %s", info.Index, info.Name, info.Problem)
	}
	if in.h == 0 {
		return nil, fmt.Errorf("vk: device %d (%s): the instance handle is closed", info.Index, info.Name)
	}
	f := info.Features
	stats := in.kernelStats && f.PipelineExecutableInfo
	coop := f.CooperativeMatrixNV || f.CooperativeMatrixKHR // their shaders declare the Vulkan memory model
	key := deviceKey{inst: in.h, phys: info.phys, family: info.computeFamily, features: [12]bool{f.ShaderFloat16, f.ShaderInt8,
		f.StorageBuffer16BitAccess, f.StorageBuffer8BitAccess, f.ConditionalRendering, f.SubgroupSizeControl, f.ComputeFullSubgroups,
		f.VulkanMemoryModel && coop, f.CooperativeMatrixNV, f.CooperativeMatrixKHR, stats, f.IntegerDotProduct}}
	devices.Lock()
	defer devices.Unlock()
	sd := devices.m[key]
	if sd == nil {
		var h C.uint64_t
		var call *C.char
		r := C.mr_create_device(C.uint64_t(in.h), C.uint64_t(info.phys), C.uint32_t(info.computeFamily),
			cbool(f.ShaderFloat16), cbool(f.ShaderInt8), cbool(f.StorageBuffer16BitAccess), cbool(f.StorageBuffer8BitAccess),
			cbool(f.ConditionalRendering), cbool(f.SubgroupSizeControl), cbool(f.ComputeFullSubgroups),
			cbool(f.VulkanMemoryModel && coop), cbool(f.CooperativeMatrixNV), cbool(f.CooperativeMatrixKHR), cbool(stats), cbool(f.IntegerDotProduct), &h, &call)
		if err := result(C.GoString(call), Result(r)); err != nil {
			return nil, fmt.Errorf("device %d (%s): %w", info.Index, info.Name, err)
		}
		devicesCreated.Add(1)
		sd = &sharedDevice{base: uint64(h)}
		if devices.m == nil {
			devices.m = map[deviceKey]*sharedDevice{}
		}
		devices.m[key] = sd
	}
	var h C.uint64_t
	var call *C.char
	if err := result(C.GoString(call), Result(C.mr_clone_device(C.uint64_t(sd.base), &h, &call))); err != nil {
		if sd.refs == 0 {
			C.mr_destroy_device(C.uint64_t(sd.base))
			delete(devices.m, key)
		}
		return nil, fmt.Errorf("device %d (%s): %w", info.Index, info.Name, err)
	}
	sd.refs++
	live.devices.Add(1)
	return &Device{inst: in, info: info, h: uint64(h), shared: sd, key: key, Timeout: DefaultTimeout}, nil
}

// Close waits for the device (every Device sharing its VkDevice) to finish
// its work and frees the Device: its staging buffer, command pool and
// fence, and the VkDevice when no other Device uses it.
func (d *Device) Close() {
	if d == nil || d.h == 0 {
		return
	}
	if d.staging != nil {
		d.staging.Close()
		d.staging = nil
	}
	C.mr_destroy_device(C.uint64_t(d.h))
	d.h = 0
	live.devices.Add(-1)
	devices.Lock()
	defer devices.Unlock()
	if d.shared.refs--; d.shared.refs == 0 {
		C.mr_destroy_device(C.uint64_t(d.shared.base))
		delete(devices.m, d.key)
	}
}

// WaitIdle waits until the device has finished all submitted work.
func (d *Device) WaitIdle() error {
	return result("vkDeviceWaitIdle", Result(C.mr_wait_idle(C.uint64_t(d.h))))
}

// Buffer usage and memory property bits (VkBufferUsageFlagBits,
// VkMemoryPropertyFlagBits).
const (
	usageTransferSrc = C.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
	usageTransferDst = C.VK_BUFFER_USAGE_TRANSFER_DST_BIT
	usageStorage     = C.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
	usageIndirect    = C.VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT
	usageConditional = C.VK_BUFFER_USAGE_CONDITIONAL_RENDERING_BIT_EXT
	memDeviceLocal   = C.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
	memHostVisible   = C.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
	memHostCoherent  = C.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
	memHostCached    = C.VK_MEMORY_PROPERTY_HOST_CACHED_BIT
)

// NewBuffer allocates bytes (rounded up to a multiple of 4) of kind memory.
// Its contents start undefined.
func (d *Device) NewBuffer(bytes uint64, kind BufferKind) (*Buffer, error) {
	if bytes == 0 {
		return nil, fmt.Errorf("vk: NewBuffer: size 0")
	}
	size := (bytes + 3) &^ 3
	usage := C.uint32_t(usageStorage | usageTransferSrc | usageTransferDst | usageIndirect)
	if d.info.Features.ConditionalRendering {
		usage |= usageConditional // any buffer may hold a predicate
	}
	required, preferred, mapped := C.uint32_t(memDeviceLocal), C.uint32_t(0), 0
	if kind == HostVisible {
		// Cached memory makes Download (the host reading) fast; not required.
		required, preferred, mapped = memHostVisible|memHostCoherent, memHostCached, 1
	}
	oom := &OutOfMemoryError{Kind: kind, Asked: size, Held: d.held[kind], Heap: d.info.DeviceLocalBytes, Limit: d.MemoryLimit}
	// The device-local heap is a hard limit, even where the driver would
	// go past it (lavapipe takes host memory until the system runs out).
	heapFull := kind == DeviceLocal && oom.Heap > 0 && d.held[kind]+size > oom.Heap
	if heapFull || (d.MemoryLimit > 0 && d.held[DeviceLocal]+d.held[HostVisible]+size > d.MemoryLimit) {
		if !heapFull {
			oom.Held = d.held[DeviceLocal] + d.held[HostVisible]
		}
		oom.Err = &Error{Call: "vkAllocateMemory", Result: ErrorOutOfDeviceMemory}
		return nil, oom
	}
	var buf, mem C.uint64_t
	var ptr unsafe.Pointer
	var call *C.char
	r := C.mr_create_buffer(C.uint64_t(d.h), C.uint64_t(size), usage, required, preferred, C.int(mapped), &buf, &mem, &ptr, &call)
	if err := result(C.GoString(call), Result(r)); err != nil {
		if Result(r) == ErrorOutOfDeviceMemory || Result(r) == ErrorOutOfHostMemory {
			oom.Err = err
			return nil, oom
		}
		return nil, fmt.Errorf("%s buffer of %d bytes: %w", kind, size, err)
	}
	d.held[kind] += size
	live.buffers.Add(1)
	live.bytes.Add(size)
	return &Buffer{dev: d, kind: kind, size: size, buf: uint64(buf), mem: uint64(mem), mapped: ptr}, nil
}

// Close frees the buffer. No recorded command that uses it may run again.
func (b *Buffer) Close() {
	if b == nil || b.buf == 0 {
		return
	}
	C.mr_destroy_buffer(C.uint64_t(b.dev.h), C.uint64_t(b.buf), C.uint64_t(b.mem))
	b.buf, b.mem, b.mapped = 0, 0, nil
	b.dev.held[b.kind] -= b.size
	live.buffers.Add(-1)
	live.bytes.Add(-b.size)
}

// Upload copies data into the buffer at offset, and returns when the copy is
// complete (so data may be reused at once). A device-local buffer is written
// through a staging buffer and a transfer on the queue; do not Upload while a
// Run that uses the buffer is in flight.
func (b *Buffer) Upload(data []byte, offset uint64) error {
	if err := b.checkRange("Upload", offset, uint64(len(data))); err != nil || len(data) == 0 {
		return err
	}
	if b.kind == HostVisible {
		C.memcpy(unsafe.Add(b.mapped, offset), unsafe.Pointer(&data[0]), C.size_t(len(data)))
		return nil
	}
	return b.dev.staged(data, func(st *Buffer, n, done uint64) {
		C.memcpy(st.mapped, unsafe.Pointer(&data[done]), C.size_t(n))
	}, func(cb uint64, st *Buffer, n, done uint64) {
		C.mr_cmd_copy(C.uint64_t(b.dev.h), C.uint64_t(cb), C.uint64_t(st.buf), C.uint64_t(b.buf), 0, C.uint64_t(offset+done), C.uint64_t(n))
	}, nil)
}

// Download copies len(dst) bytes of the buffer at offset into dst: what
// every Run (and Upload) that has returned left there. A Run returns once
// its work is done, and its recording ends with a barrier that makes its
// writes to host-visible buffers visible to the host, so a host-visible
// buffer is read straight from its mapping: no vkDeviceWaitIdle, which
// cost ~28 µs a call on lavapipe (a greedy token's 4 bytes of argmax, a
// sampled token's logits, a chain's counts each paid it) and waited for
// the work of every Device opened on the same GPU (they share one VkDevice
// and queue: another model's runner, a server's other loop), not this
// buffer's. Do not Download a buffer while a Run that writes it is in
// flight on another goroutine.
func (b *Buffer) Download(dst []byte, offset uint64) error {
	if err := b.checkRange("Download", offset, uint64(len(dst))); err != nil || len(dst) == 0 {
		return err
	}
	if b.kind == HostVisible {
		if b.dev.broken != nil {
			return b.dev.broken
		}
		C.memcpy(unsafe.Pointer(&dst[0]), unsafe.Add(b.mapped, offset), C.size_t(len(dst)))
		return nil
	}
	return b.dev.staged(dst, nil, func(cb uint64, st *Buffer, n, done uint64) {
		C.mr_cmd_copy(C.uint64_t(b.dev.h), C.uint64_t(cb), C.uint64_t(b.buf), C.uint64_t(st.buf), C.uint64_t(offset+done), 0, C.uint64_t(n))
		// The host reads the staging buffer next: make the copy visible to it.
		C.mr_cmd_memory_barrier(C.uint64_t(b.dev.h), C.uint64_t(cb), C.uint32_t(stageTransfer), C.uint32_t(stageHost),
			C.uint32_t(accessTransferWrite), C.uint32_t(accessHostRead))
	}, func(st *Buffer, n, done uint64) {
		C.memcpy(unsafe.Pointer(&dst[done]), st.mapped, C.size_t(n))
	})
}

func (b *Buffer) checkRange(what string, offset, n uint64) error {
	if b.buf == 0 {
		return fmt.Errorf("vk: %s: closed buffer", what)
	}
	if offset > b.size || n > b.size-offset {
		return fmt.Errorf("vk: %s of %d bytes at offset %d: outside the %d-byte buffer", what, n, offset, b.size)
	}
	return nil
}

// staged moves data through the staging buffer in chunks: before(chunk) on
// the host, then copy(cb) as a one-time command buffer, submitted and waited
// for, then after(chunk) on the host.
func (d *Device) staged(data []byte, before func(st *Buffer, n, done uint64),
	copy func(cb uint64, st *Buffer, n, done uint64), after func(st *Buffer, n, done uint64)) error {
	if d.staging == nil || d.staging.size < min(uint64(len(data)), stagingBytes) {
		if d.staging != nil {
			d.staging.Close()
			d.staging = nil
		}
		st, err := d.NewBuffer(max(min(uint64(len(data)), stagingBytes), 1<<16), HostVisible)
		if err != nil {
			return fmt.Errorf("staging: %w", err)
		}
		d.staging = st
	}
	st := d.staging
	for done := uint64(0); done < uint64(len(data)); {
		n := min(uint64(len(data))-done, st.size)
		if before != nil {
			before(st, n, done)
		}
		err := d.oneShot(func(cb uint64) { copy(cb, st, n, done) })
		if err != nil {
			return err
		}
		if after != nil {
			after(st, n, done)
		}
		done += n
	}
	return nil
}

// oneShot records fn into a fresh command buffer, submits it and waits.
func (d *Device) oneShot(fn func(cb uint64)) error {
	var cb C.uint64_t
	var call *C.char
	r := Result(C.mr_begin(C.uint64_t(d.h), &cb, 1, &call))
	if err := result(C.GoString(call), r); err != nil {
		return err
	}
	defer C.mr_free_command_buffer(C.uint64_t(d.h), cb)
	d.entryBarrier(uint64(cb))
	fn(uint64(cb))
	if err := result("vkEndCommandBuffer", Result(C.mr_end(C.uint64_t(d.h), cb))); err != nil {
		return err
	}
	return d.submitWait(uint64(cb))
}

// entryBarrier orders a command buffer after everything submitted before it
// (submission order spans command buffers): earlier submissions' writes are
// made visible, and their reads finish before this one's writes. Runs are
// serialized by a fence, so this costs one barrier per submit.
func (d *Device) entryBarrier(cb uint64) {
	stages := d.stages()
	C.mr_cmd_memory_barrier(C.uint64_t(d.h), C.uint64_t(cb),
		C.uint32_t(stages), C.uint32_t(stages),
		C.uint32_t(accessShaderWrite|accessTransferWrite), C.uint32_t(accessesOf(stages)))
}

// submitWait submits cb and waits for it, at most d.Timeout. A lost device
// or a timeout breaks the device: what the GPU still does with its buffers
// is unknown, so nothing may be submitted, read or waited for again.
func (d *Device) submitWait(cb uint64) error {
	if d.broken != nil {
		return d.broken
	}
	r, name := takeFault()
	if r == Success {
		var call *C.char
		r = Result(C.mr_submit_wait(C.uint64_t(d.h), C.uint64_t(cb), C.uint64_t(d.Timeout.Nanoseconds()), &call))
		name = C.GoString(call)
	}
	if err := result(name, r); err != nil {
		switch r {
		case Timeout:
			d.broken = fmt.Errorf("%w: the GPU did not finish within Device.Timeout (%s); the device is unusable now: close it",
				err, d.Timeout)
		case ErrorDeviceLost:
			d.broken = fmt.Errorf("%w: the GPU stopped (a driver reset or a fault); the device is unusable now: close it", err)
		default:
			return err
		}
		return d.broken
	}
	d.stats.Submits++
	return nil
}

// spirvMagic opens every SPIR-V module.
const spirvMagic = 0x07230203

// NewKernel makes a compute pipeline from a SPIR-V module (entry point
// "main") whose interface spec describes.
func (d *Device) NewKernel(spirv []byte, spec KernelSpec) (*Kernel, error) {
	switch {
	case len(spirv) < 20 || len(spirv)%4 != 0 || binary.LittleEndian.Uint32(spirv) != spirvMagic:
		return nil, fmt.Errorf("vk: kernel %q: not a SPIR-V module (%d bytes)", spec.Name, len(spirv))
	case spec.Bindings < 0 || spec.Bindings > maxBindings:
		return nil, fmt.Errorf("vk: kernel %q: %d bindings, want 0 to %d", spec.Name, spec.Bindings, maxBindings)
	case spec.PushConstantBytes < 0 || spec.PushConstantBytes%4 != 0 || uint32(spec.PushConstantBytes) > d.info.Limits.MaxPushConstantsSize:
		return nil, fmt.Errorf("vk: kernel %q: %d bytes of push constants, want a multiple of 4 up to maxPushConstantsSize %d",
			spec.Name, spec.PushConstantBytes, d.info.Limits.MaxPushConstantsSize)
	}
	if spec.RequiredSubgroupSize != 0 {
		if err := d.info.CanRequireSubgroupSize(spec.RequiredSubgroupSize); err != nil {
			return nil, fmt.Errorf("vk: kernel %q: %w", spec.Name, err)
		}
	}
	code := make([]uint32, len(spirv)/4) // 4-aligned, which a []byte need not be
	for i := range code {
		code[i] = binary.LittleEndian.Uint32(spirv[4*i:])
	}
	spec.Specialization = append([]uint32(nil), spec.Specialization...)
	var specPtr *C.uint32_t
	if len(spec.Specialization) > 0 {
		specPtr = (*C.uint32_t)(unsafe.Pointer(&spec.Specialization[0]))
	}
	var dsl, layout, pipeline C.uint64_t
	var call *C.char
	r := C.mr_create_kernel(C.uint64_t(d.h), (*C.uint32_t)(unsafe.Pointer(&code[0])), C.size_t(len(spirv)),
		C.uint32_t(spec.Bindings), C.uint32_t(spec.PushConstantBytes), specPtr, C.uint32_t(len(spec.Specialization)),
		C.uint32_t(spec.RequiredSubgroupSize), &dsl, &layout, &pipeline, &call)
	if err := result(C.GoString(call), Result(r)); err != nil {
		return nil, fmt.Errorf("kernel %q: %w", spec.Name, err)
	}
	return &Kernel{dev: d, spec: spec, dsl: uint64(dsl), layout: uint64(layout), pipeline: uint64(pipeline)}, nil
}

// Close destroys the pipeline. No recorded command that uses it may run again.
func (k *Kernel) Close() {
	if k == nil || k.pipeline == 0 {
		return
	}
	C.mr_destroy_kernel(C.uint64_t(k.dev.h), C.uint64_t(k.dsl), C.uint64_t(k.layout), C.uint64_t(k.pipeline))
	k.dsl, k.layout, k.pipeline = 0, 0, 0
}

// Statistics are the kernel's compiler statistics as its driver reports
// them (VK_KHR_pipeline_executable_properties): registers, spills,
// instructions, occupancy, under names the driver chooses (RADV: "VGPRs",
// "Spilled VGPRs", "Subgroups per SIMD"). The device must come from an
// instance with InstanceOptions.KernelStatistics and offer the extension.
func (k *Kernel) Statistics() ([]KernelStatistic, error) {
	if k == nil || k.pipeline == 0 {
		return nil, fmt.Errorf("vk: kernel statistics of a closed kernel")
	}
	if !k.dev.key.features[statsFeature] {
		return nil, fmt.Errorf("vk: kernel %q: no statistics: device %d (%s) was not opened with InstanceOptions.KernelStatistics, or does not offer VK_KHR_pipeline_executable_properties",
			k.spec.Name, k.dev.info.Index, k.dev.info.Name)
	}
	var n C.uint32_t
	var call *C.char
	if err := result(C.GoString(call), Result(C.mr_kernel_stats(C.uint64_t(k.dev.h), C.uint64_t(k.pipeline), nil, 0, &n, &call))); err != nil {
		return nil, fmt.Errorf("kernel %q: %w", k.spec.Name, err)
	}
	if n == 0 {
		return nil, nil
	}
	raw := (*C.mr_stat)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.mr_stat{}))))
	if raw == nil {
		return nil, fmt.Errorf("kernel %q: statistics: out of host memory", k.spec.Name)
	}
	defer C.free(unsafe.Pointer(raw))
	cap := n
	if err := result(C.GoString(call), Result(C.mr_kernel_stats(C.uint64_t(k.dev.h), C.uint64_t(k.pipeline), raw, cap, &n, &call))); err != nil {
		return nil, fmt.Errorf("kernel %q: %w", k.spec.Name, err)
	}
	out := make([]KernelStatistic, 0, min(n, cap))
	for _, s := range unsafe.Slice(raw, min(n, cap)) {
		out = append(out, KernelStatistic{Executable: C.GoString(&s.exec[0]), Name: C.GoString(&s.name[0]),
			Description: C.GoString(&s.desc[0]), Value: float64(s.value)})
	}
	return out, nil
}
