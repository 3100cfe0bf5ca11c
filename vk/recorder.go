package vk

import (
	"fmt"
)

// Access says what a dispatch does with a bound buffer range.
type Access uint8

const (
	Read      Access = 1 << iota // the shader only reads it (GLSL readonly)
	Write                        // the shader only writes it (GLSL writeonly)
	ReadWrite = Read | Write
)

const (
	// Handoff, with Read, Write or both: the kernels order this binding
	// themselves against the command before that bound it with Handoff
	// (the later one's workgroups wait on an atomic count that the earlier
	// one's raise after their writes, through coherent buffers), so no
	// barrier goes between the two. Commands that bind it otherwise get
	// their barriers as always. Vulkan promises no forward progress to a
	// waiting workgroup: the kernels must bound their waits.
	Handoff Access = 4
)

func (a Access) String() string {
	if a&Handoff != 0 && a&^Handoff != 0 {
		return (a &^ Handoff).String() + " handoff"
	}
	switch a {
	case Read:
		return "read"
	case Write:
		return "write"
	case ReadWrite:
		return "read-write"
	}
	return fmt.Sprintf("Access(%d)", uint8(a))
}

// Bind is one storage-buffer binding of a dispatch: Buf[Offset:Offset+Size].
// Offset must be a multiple of Limits.MinStorageBufferOffsetAlignment and
// Size at most Limits.MaxStorageBufferRange; Size 0 means the rest of Buf.
type Bind struct {
	Buf          *Buffer
	Offset, Size uint64
	Access       Access
}

// Timing is the GPU time between one Timestamp and the one before it (or
// the start of the command buffer).
type Timing struct {
	Label string
	NS    float64
}

// Recorder records a sequence of GPU commands, once, for Device.Run to
// submit as many times as wanted (Kompute's Sequence). Barriers between the
// commands are derived from the Binds' access (see track.go): callers never
// write one.
//
// Recording methods do not return errors: the first error sticks, later
// calls do nothing, and Err and Device.Run report it (like bufio.Writer).
// The Vulkan command buffer is built at the first Run; after that the
// recorder is sealed. The buffers and kernels it uses must outlive it.
type Recorder struct {
	dev    *Device
	ops    []op
	track  tracker
	labels []string
	stats  Stats
	err    error
	sealed bool

	// dropBarriers records no derived barrier: only for the test that shows
	// synchronization validation catches what the barriers prevent.
	dropBarriers bool

	conditional bool // between BeginConditional and EndConditional

	cb, descPool, queryPool uint64 // made at the first Run
	ticks                   []uint64
	timings                 []Timing
}

type opKind uint8

const (
	opDispatch opKind = iota
	opCopy
	opFill
	opUpdate
	opBarrier
	opTimestamp
	opBeginConditional
	opEndConditional
)

// op is one recorded command.
type op struct {
	kind opKind

	kernel      *Kernel // opDispatch
	push        []byte  // push constants; opUpdate: the bytes written
	groups      [3]uint32
	indirect    *Buffer // nil: direct dispatch
	indirectOff uint64
	binds       []Bind // sizes resolved

	src, dst       *Buffer // opCopy (src), opCopy and opFill (dst)
	srcOff, dstOff uint64
	n              uint64
	value          uint32

	barrier *barrier // opBarrier
	query   uint32   // opTimestamp
}

// NewRecorder starts an empty recording.
func (d *Device) NewRecorder() *Recorder { return &Recorder{dev: d, track: tracker{all: d.stages()}} }

// Err is the first error met while recording, or nil.
func (r *Recorder) Err() error { return r.err }

// Stats counts what this recorder recorded and how often it was submitted.
func (r *Recorder) Stats() Stats { return r.stats }

// Timings are the durations between Timestamps measured by the last Run; nil
// before a Run or when the device cannot write timestamps.
func (r *Recorder) Timings() []Timing { return r.timings }

func (r *Recorder) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("vk: recording command %d: "+format, append([]any{len(r.ops)}, args...)...)
	}
}

// usable reports whether recording may go on.
func (r *Recorder) usable() bool {
	if r.sealed && r.err == nil {
		r.err = fmt.Errorf("vk: recorder already submitted: commands cannot be added to it (record a new one)")
	}
	return r.err == nil
}

// Dispatch records k over groups workgroups, with push constants push and
// the storage buffers binds in binding order.
func (r *Recorder) Dispatch(k *Kernel, push []byte, groups [3]uint32, binds ...Bind) {
	if !r.usable() {
		return
	}
	for i, g := range groups {
		if max := r.dev.info.Limits.MaxComputeWorkGroupCount[i]; g > max {
			r.fail("%s: %d workgroups in dimension %d, the device allows %d", kernelName(k), g, i, max)
			return
		}
	}
	r.dispatch(op{kind: opDispatch, kernel: k, push: push, groups: groups, binds: binds})
}

// DispatchIndirect records k with the workgroup counts read by the GPU from
// args at offset (three uint32: VkDispatchIndirectCommand), so a count a
// kernel computed needs no trip through the host.
func (r *Recorder) DispatchIndirect(k *Kernel, push []byte, args *Buffer, offset uint64, binds ...Bind) {
	if !r.usable() {
		return
	}
	if !r.checkBuffer(args, "indirect arguments") {
		return
	}
	if offset%4 != 0 || offset+12 > args.size {
		r.fail("%s: indirect arguments at offset %d: want a multiple of 4 with 12 bytes inside the %d-byte buffer",
			kernelName(k), offset, args.size)
		return
	}
	r.dispatch(op{kind: opDispatch, kernel: k, push: push, indirect: args, indirectOff: offset, binds: binds})
}

func kernelName(k *Kernel) string {
	if k == nil {
		return "nil kernel"
	}
	return k.spec.Name
}

func (r *Recorder) dispatch(o op) {
	k := o.kernel
	switch {
	case k == nil:
		r.fail("dispatch of a nil kernel")
		return
	case k.dev != r.dev:
		r.fail("%s: kernel of another device", k.spec.Name)
		return
	case len(o.push) != k.spec.PushConstantBytes:
		r.fail("%s: %d bytes of push constants, the kernel takes %d", k.spec.Name, len(o.push), k.spec.PushConstantBytes)
		return
	case len(o.binds) != k.spec.Bindings:
		r.fail("%s: %d bindings, the kernel has %d", k.spec.Name, len(o.binds), k.spec.Bindings)
		return
	}
	o.push = append([]byte(nil), o.push...)
	o.binds = append([]Bind(nil), o.binds...)
	uses := make([]use, 0, len(o.binds)+1)
	lim := r.dev.info.Limits
	for i := range o.binds {
		b := &o.binds[i]
		what := fmt.Sprintf("%s binding %d", k.spec.Name, i)
		if !r.checkBuffer(b.Buf, what) {
			return
		}
		if b.Size == 0 && b.Offset < b.Buf.size {
			b.Size = b.Buf.size - b.Offset
		}
		switch {
		case b.Access&ReadWrite == 0 || b.Access&^(ReadWrite|Handoff) != 0:
			r.fail("%s: access %v: want Read, Write or ReadWrite (with Handoff or not)", what, b.Access)
			return
		case b.Offset%lim.MinStorageBufferOffsetAlignment != 0:
			r.fail("%s: offset %d is not a multiple of minStorageBufferOffsetAlignment %d", what, b.Offset, lim.MinStorageBufferOffsetAlignment)
			return
		case b.Offset+b.Size > b.Buf.size || b.Size == 0:
			r.fail("%s: range [%d, +%d) is outside the %d-byte buffer", what, b.Offset, b.Size, b.Buf.size)
			return
		case b.Size > lim.MaxStorageBufferRange:
			r.fail("%s: %d bytes exceed maxStorageBufferRange %d: bind the tensor in pieces", what, b.Size, lim.MaxStorageBufferRange)
			return
		}
		u := use{buf: b.Buf, off: b.Offset, end: b.Offset + b.Size, stage: stageCompute, handoff: b.Access&Handoff != 0}
		if b.Access&Read != 0 {
			u.access |= accessShaderRead
		}
		if b.Access&Write != 0 {
			u.write = true
			u.access |= accessShaderWrite
		}
		uses = append(uses, u)
	}
	if o.indirect != nil {
		uses = append(uses, use{buf: o.indirect, off: o.indirectOff, end: o.indirectOff + 12,
			stage: stageDrawIndirect, access: accessIndirectRead})
	}
	r.add(o, uses)
	r.stats.Dispatches++
	if o.indirect != nil {
		r.stats.Indirect++
	}
}

// Copy records a copy of n bytes from src[srcOff:] to dst[dstOff:].
func (r *Recorder) Copy(src, dst *Buffer, srcOff, dstOff, n uint64) {
	if !r.usable() || !r.checkBuffer(src, "copy source") || !r.checkBuffer(dst, "copy destination") {
		return
	}
	switch {
	case n == 0 || srcOff+n > src.size || dstOff+n > dst.size:
		r.fail("copy of %d bytes from offset %d of %d to offset %d of %d: out of range", n, srcOff, src.size, dstOff, dst.size)
		return
	case src == dst && srcOff < dstOff+n && dstOff < srcOff+n:
		r.fail("copy within one buffer with overlapping ranges [%d,+%d) and [%d,+%d)", srcOff, n, dstOff, n)
		return
	}
	r.stats.CopyBytes += n
	r.add(op{kind: opCopy, src: src, dst: dst, srcOff: srcOff, dstOff: dstOff, n: n}, []use{
		{buf: src, off: srcOff, end: srcOff + n, stage: stageTransfer, access: accessTransferRead},
		{buf: dst, off: dstOff, end: dstOff + n, write: true, stage: stageTransfer, access: accessTransferWrite},
	})
}

// Fill records writing value to the n bytes of buf at off as uint32s (off and
// n multiples of 4).
func (r *Recorder) Fill(buf *Buffer, off, n uint64, value uint32) {
	if !r.usable() || !r.checkBuffer(buf, "fill") {
		return
	}
	if off%4 != 0 || n%4 != 0 || n == 0 || off+n > buf.size {
		r.fail("fill of %d bytes at offset %d of a %d-byte buffer: want multiples of 4 inside it", n, off, buf.size)
		return
	}
	r.add(op{kind: opFill, dst: buf, dstOff: off, n: n, value: value}, []use{
		{buf: buf, off: off, end: off + n, write: true, stage: stageTransfer, access: accessTransferWrite},
	})
}

// update records writing data into buf at off with vkCmdUpdateBuffer (off
// and len(data) multiples of 4, at most 65536 bytes): a transfer whose data
// lives in the command buffer. Unexported: only the conditional-rendering
// diagnostic writes a predicate this way.
func (r *Recorder) update(buf *Buffer, off uint64, data []byte) {
	if !r.usable() || !r.checkBuffer(buf, "update") {
		return
	}
	n := uint64(len(data))
	if off%4 != 0 || n%4 != 0 || n == 0 || n > 65536 || off+n > buf.size {
		r.fail("update of %d bytes at offset %d of a %d-byte buffer: want multiples of 4, at most 65536 bytes, inside it", n, off, buf.size)
		return
	}
	r.add(op{kind: opUpdate, dst: buf, dstOff: off, n: n, push: append([]byte(nil), data...)}, []use{
		{buf: buf, off: off, end: off + n, write: true, stage: stageTransfer, access: accessTransferWrite},
	})
}

// BeginConditional starts a span of dispatches that the GPU discards when
// the uint32 at pred[offset] is 0 when the span begins
// (VK_EXT_conditional_rendering): a kernel may compute the predicate, and
// nothing reaches the host. Only dispatches are affected (copies, fills and
// the derived barriers run anyway); spans do not nest. It needs
// Features.ConditionalRendering.
func (r *Recorder) BeginConditional(pred *Buffer, offset uint64) {
	if !r.usable() || !r.checkBuffer(pred, "conditional predicate") {
		return
	}
	switch {
	case !r.dev.info.Features.ConditionalRendering:
		r.fail("conditional span: %s has no VK_EXT_conditional_rendering", r.dev.info.Name)
		return
	case r.conditional:
		r.fail("conditional span inside another (they do not nest)")
		return
	case offset%4 != 0 || offset+4 > pred.size:
		r.fail("conditional predicate at offset %d: want a multiple of 4 with 4 bytes inside the %d-byte buffer", offset, pred.size)
		return
	}
	r.conditional = true
	// The predicate's barrier also serves the span's dispatches: they
	// usually read what the predicate's writer wrote too.
	b := r.track.accessWiden([]use{{buf: pred, off: offset, end: offset + 4, stage: stageConditional, access: accessConditionalRead}}, allStages)
	if b != nil && !r.dropBarriers {
		if b.srcStages&stageTransfer != 0 {
			b = transferToPredicate(b)
		}
		r.ops = append(r.ops, op{kind: opBarrier, barrier: b})
		r.stats.Barriers++
		r.stats.BufferBarriers += len(b.buffers)
	}
	r.ops = append(r.ops, op{kind: opBeginConditional, src: pred, srcOff: offset})
}

// transferToPredicate is b, which orders transfer writes (vkCmdCopyBuffer,
// vkCmdFillBuffer) before a conditional span, made one global memory
// barrier from ALL_COMMANDS. NVIDIA's driver (580.159.04, H200) reads a
// predicate that a copy or fill wrote stale through the barrier the spec
// asks for (TRANSFER, TRANSFER_WRITE -> CONDITIONAL_RENDERING,
// CONDITIONAL_RENDERING_READ), as buffer or global barrier and whatever
// the destination stages; with the source stage ALL_COMMANDS it reads the
// written value (TestConditionalDiagnostic, issue 46). The validation
// layer finds nothing wrong with the spec's barrier: the driver is at
// fault, and this barrier is a superset of b (it orders every earlier
// command and makes every write visible to b's destination stages), so the
// tracker's state after b stays true.
func transferToPredicate(b *barrier) *barrier {
	return &barrier{srcStages: stageAllCommands, dstStages: b.dstStages,
		srcAccess: accessMemoryWrite, dstAccess: accessesOf(b.dstStages)}
}

// EndConditional ends the span BeginConditional started.
func (r *Recorder) EndConditional() {
	if !r.usable() {
		return
	}
	if !r.conditional {
		r.fail("EndConditional without BeginConditional")
		return
	}
	r.conditional = false
	r.ops = append(r.ops, op{kind: opEndConditional})
}

// Timestamp records the GPU clock once every earlier command has finished;
// after Run, Timings gives the time since the previous Timestamp under this
// label. A no-op on a device without timestamps.
func (r *Recorder) Timestamp(label string) {
	if !r.usable() || !r.dev.info.Timestamps() {
		return
	}
	r.labels = append(r.labels, label)
	r.ops = append(r.ops, op{kind: opTimestamp, query: uint32(len(r.labels))}) // query 0: the start
}

func (r *Recorder) checkBuffer(b *Buffer, what string) bool {
	switch {
	case b == nil:
		r.fail("%s: nil buffer", what)
	case b.dev != r.dev:
		r.fail("%s: buffer of another device", what)
	case b.buf == 0:
		r.fail("%s: closed buffer", what)
	default:
		return true
	}
	return false
}

// add appends o, preceded by the barrier its uses need.
func (r *Recorder) add(o op, uses []use) { r.addWiden(o, uses, 0) }

// addWiden is add with the barrier widened to the stages widen
// (tracker.accessWiden).
func (r *Recorder) addWiden(o op, uses []use, widen uint32) {
	if b := r.track.accessWiden(uses, widen); b != nil && !r.dropBarriers {
		r.ops = append(r.ops, op{kind: opBarrier, barrier: b})
		r.stats.Barriers++
		r.stats.BufferBarriers += len(b.buffers)
	}
	r.ops = append(r.ops, o)
}
