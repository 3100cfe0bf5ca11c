//go:build cgo

package vk

/*
#include "vk_c.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Run submits the recorder's commands and waits for them to finish. The first
// Run records the Vulkan command buffer; later Runs submit the same one again
// (replay), so whatever changes between Runs must live in buffers.
func (d *Device) Run(r *Recorder) error {
	if r.err != nil {
		return r.err
	}
	if r.dev != d {
		return fmt.Errorf("vk: Run: recorder of another device")
	}
	if !r.sealed {
		r.sealed = true
		if err := d.record(r); err != nil {
			r.err = err
			return err
		}
	}
	if err := d.submitWait(r.cb); err != nil {
		return err
	}
	r.stats.Submits++
	if r.queryPool != 0 {
		return r.readTimings()
	}
	return nil
}

// record builds r's command buffer: descriptor sets from a pool sized for
// exactly its dispatches, the commands with their derived barriers, a
// timestamp query pool when it has Timestamps.
func (d *Device) record(r *Recorder) (err error) {
	if r.conditional {
		return fmt.Errorf("vk: recording: a conditional span was begun and never ended (EndConditional)")
	}
	dh := C.uint64_t(d.h)
	sets, descriptors := 0, 0
	for _, o := range r.ops {
		if o.kind == opDispatch && len(o.binds) > 0 {
			sets++
			descriptors += len(o.binds)
		}
	}
	defer func() {
		if err != nil {
			r.release()
		}
	}()
	if sets > 0 {
		var pool C.uint64_t
		rs := Result(C.mr_create_descriptor_pool(dh, C.uint32_t(sets), C.uint32_t(descriptors), &pool))
		if err := result("vkCreateDescriptorPool", rs); err != nil {
			return err
		}
		r.descPool = uint64(pool)
	}
	if len(r.labels) > 0 {
		var pool C.uint64_t
		if err := result("vkCreateQueryPool", Result(C.mr_create_query_pool(dh, C.uint32_t(len(r.labels)+1), &pool))); err != nil {
			return err
		}
		r.queryPool = uint64(pool)
	}
	var cb C.uint64_t
	var call *C.char
	rs := Result(C.mr_begin(dh, &cb, 0, &call))
	if err := result(C.GoString(call), rs); err != nil {
		return err
	}
	r.cb = uint64(cb)
	d.entryBarrier(r.cb)
	if r.queryPool != 0 {
		C.mr_cmd_reset_queries(dh, cb, C.uint64_t(r.queryPool), C.uint32_t(len(r.labels)+1))
		C.mr_cmd_timestamp(dh, cb, C.uint64_t(r.queryPool), 0)
	}
	for i := range r.ops {
		if err := d.recordOp(cb, r, &r.ops[i]); err != nil {
			return err
		}
	}
	if stages, access := r.track.hostStages, r.track.hostAccess; stages != 0 {
		// Device writes to mapped memory become visible to the host only
		// through a barrier; the fence alone does not do it.
		C.mr_cmd_memory_barrier(dh, cb, C.uint32_t(stages), C.uint32_t(stageHost), C.uint32_t(access), C.uint32_t(accessHostRead))
	}
	if err := result("vkEndCommandBuffer", Result(C.mr_end(dh, cb))); err != nil {
		return err
	}
	r.stats.Recordings++
	d.stats.add(Stats{Recordings: 1, Dispatches: r.stats.Dispatches, Indirect: r.stats.Indirect, Barriers: r.stats.Barriers, BufferBarriers: r.stats.BufferBarriers, CopyBytes: r.stats.CopyBytes})
	return nil
}

func (d *Device) recordOp(cb C.uint64_t, r *Recorder, o *op) error {
	dh := C.uint64_t(d.h)
	switch o.kind {
	case opDispatch:
		var set C.uint64_t
		if len(o.binds) > 0 {
			rs := Result(C.mr_allocate_set(dh, C.uint64_t(r.descPool), C.uint64_t(o.kernel.dsl), &set))
			if err := result("vkAllocateDescriptorSets", rs); err != nil {
				return fmt.Errorf("%s: %w", o.kernel.spec.Name, err)
			}
			n := len(o.binds)
			bufs, offs, sizes := make([]C.uint64_t, n), make([]C.uint64_t, n), make([]C.uint64_t, n)
			for i, b := range o.binds {
				bufs[i], offs[i], sizes[i] = C.uint64_t(b.Buf.buf), C.uint64_t(b.Offset), C.uint64_t(b.Size)
			}
			C.mr_write_set(dh, set, C.uint32_t(n), &bufs[0], &offs[0], &sizes[0])
		}
		var push unsafe.Pointer
		if len(o.push) > 0 {
			push = unsafe.Pointer(&o.push[0])
		}
		var ind, indOff C.uint64_t
		if o.indirect != nil {
			ind, indOff = C.uint64_t(o.indirect.buf), C.uint64_t(o.indirectOff)
		}
		C.mr_cmd_dispatch(dh, cb, C.uint64_t(o.kernel.pipeline), C.uint64_t(o.kernel.layout), set,
			push, C.uint32_t(len(o.push)), C.uint32_t(o.groups[0]), C.uint32_t(o.groups[1]), C.uint32_t(o.groups[2]), ind, indOff)
	case opCopy:
		C.mr_cmd_copy(dh, cb, C.uint64_t(o.src.buf), C.uint64_t(o.dst.buf), C.uint64_t(o.srcOff), C.uint64_t(o.dstOff), C.uint64_t(o.n))
	case opFill:
		C.mr_cmd_fill(dh, cb, C.uint64_t(o.dst.buf), C.uint64_t(o.dstOff), C.uint64_t(o.n), C.uint32_t(o.value))
	case opUpdate:
		C.mr_cmd_update(dh, cb, C.uint64_t(o.dst.buf), C.uint64_t(o.dstOff), C.uint64_t(o.n), unsafe.Pointer(&o.push[0]))
	case opTimestamp:
		C.mr_cmd_timestamp(dh, cb, C.uint64_t(r.queryPool), C.uint32_t(o.query))
	case opBeginConditional:
		C.mr_cmd_begin_conditional(dh, cb, C.uint64_t(o.src.buf), C.uint64_t(o.srcOff))
	case opEndConditional:
		C.mr_cmd_end_conditional(dh, cb)
	case opBarrier:
		b := o.barrier
		if len(b.buffers) == 0 { // a global memory barrier
			C.mr_cmd_memory_barrier(dh, cb, C.uint32_t(b.srcStages), C.uint32_t(b.dstStages), C.uint32_t(b.srcAccess), C.uint32_t(b.dstAccess))
		}
		for start := 0; start < len(b.buffers); start += 64 { // the C side takes 64 at a time
			part := b.buffers[start:min(start+64, len(b.buffers))]
			n := len(part)
			bufs, offs, sizes := make([]C.uint64_t, n), make([]C.uint64_t, n), make([]C.uint64_t, n)
			src, dst := make([]C.uint32_t, n), make([]C.uint32_t, n)
			for i, bb := range part {
				bufs[i], offs[i], sizes[i] = C.uint64_t(bb.buf.buf), C.uint64_t(bb.off), C.uint64_t(bb.end-bb.off)
				src[i], dst[i] = C.uint32_t(bb.srcAccess), C.uint32_t(bb.dstAccess)
			}
			C.mr_cmd_barrier(dh, cb, C.uint32_t(b.srcStages), C.uint32_t(b.dstStages), C.uint32_t(n),
				&bufs[0], &offs[0], &sizes[0], &src[0], &dst[0])
		}
	}
	return nil
}

func (r *Recorder) readTimings() error {
	n := len(r.labels) + 1
	if len(r.ticks) != n {
		r.ticks = make([]uint64, n)
	}
	rs := Result(C.mr_query_results(C.uint64_t(r.dev.h), C.uint64_t(r.queryPool), C.uint32_t(n), (*C.uint64_t)(unsafe.Pointer(&r.ticks[0]))))
	if err := result("vkGetQueryPoolResults", rs); err != nil {
		return err
	}
	lim := r.dev.info.Limits
	mask := ^uint64(0)
	if lim.TimestampValidBits < 64 {
		mask = 1<<lim.TimestampValidBits - 1
	}
	r.timings = make([]Timing, len(r.labels))
	for i, label := range r.labels {
		ticks := (r.ticks[i+1] - r.ticks[i]) & mask // wraps correctly within the valid bits
		r.timings[i] = Timing{Label: label, NS: float64(ticks) * float64(lim.TimestampPeriod)}
	}
	return nil
}

// Close frees the recorder's command buffer, descriptor sets and queries.
func (r *Recorder) Close() {
	if r == nil {
		return
	}
	r.release()
	r.ops = nil
	r.sealed = true
	if r.err == nil {
		r.err = fmt.Errorf("vk: recorder is closed")
	}
}

func (r *Recorder) release() {
	dh := C.uint64_t(r.dev.h)
	if r.cb != 0 {
		C.mr_free_command_buffer(dh, C.uint64_t(r.cb))
		r.cb = 0
	}
	if r.descPool != 0 {
		C.mr_destroy_descriptor_pool(dh, C.uint64_t(r.descPool))
		r.descPool = 0
	}
	if r.queryPool != 0 {
		C.mr_destroy_query_pool(dh, C.uint64_t(r.queryPool))
		r.queryPool = 0
	}
}
