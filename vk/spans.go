package vk

import (
	"errors"
	"fmt"
)

// Span describes one conditional span of a recording, for tests that check
// that its predicate's write is ordered before the span reads it (the
// derived barriers do it; a driver that reads the predicate early shows up
// only on its GPU, so the order is checked where it is recorded too).
type Span struct {
	Predicate *Buffer
	Offset    uint64
	// Writer is the last command of this recording before the span that
	// wrote the predicate's 4 bytes ("copy", "fill", "update", or the
	// kernel's name), with its stage and access (VkPipelineStageFlags,
	// VkAccessFlags); "" when none did (the host or an earlier submit wrote
	// it: the command buffer's entry barrier orders that).
	Writer                    string
	WriterStage, WriterAccess uint32
	// Before is the barrier recorded just before
	// vkCmdBeginConditionalRenderingEXT, spelled out ("" when none).
	Before string
	// Ordered: a barrier between the write and the begin waits for the
	// writer's stage (ALL_COMMANDS for a transfer: see
	// transferToPredicate) and makes its write visible to the predicate
	// read (CONDITIONAL_RENDERING stage and access) over the predicate's
	// range.
	Ordered bool
}

// Spans lists the recording's conditional spans in order.
func (r *Recorder) Spans() []Span {
	var spans []Span
	for i, o := range r.ops {
		if o.kind != opBeginConditional {
			continue
		}
		s := Span{Predicate: o.src, Offset: o.srcOff, Ordered: true}
		if i > 0 && r.ops[i-1].kind == opBarrier {
			s.Before = r.ops[i-1].barrier.String()
		}
		w := -1
		for j := i - 1; j >= 0 && w < 0; j-- {
			if name, stage, access, ok := r.ops[j].writes(o.src, o.srcOff, o.srcOff+4); ok {
				w, s.Writer, s.WriterStage, s.WriterAccess = j, name, stage, access
			}
		}
		if w >= 0 {
			s.Ordered = false
			for _, b := range r.ops[w+1 : i] {
				if b.kind == opBarrier && b.barrier.orders(o.src, o.srcOff, o.srcOff+4, s.WriterStage, s.WriterAccess) {
					s.Ordered = true
				}
			}
		}
		spans = append(spans, s)
	}
	return spans
}

// CheckSpans is an error naming every span of the recording whose
// predicate's write is not ordered before the span (Span.Ordered).
func (r *Recorder) CheckSpans() error {
	var errs []error
	for i, s := range r.Spans() {
		if !s.Ordered {
			errs = append(errs, fmt.Errorf("vk: conditional span %d: its predicate (offset %d), written by %s (stage %s, access %s), "+
				"is not ordered before the predicate read; barrier before the span: %q", i, s.Offset, s.Writer,
				flagNames(s.WriterStage, stageNames), flagNames(s.WriterAccess, accessNames), s.Before))
		}
	}
	return errors.Join(errs...)
}

// writes says whether o writes buf[off:end), and with which stage and
// access.
func (o *op) writes(buf *Buffer, off, end uint64) (name string, stage, access uint32, ok bool) {
	in := func(b *Buffer, o, n uint64) bool { return b == buf && o < end && off < o+n }
	switch o.kind {
	case opCopy:
		return "copy", stageTransfer, accessTransferWrite, in(o.dst, o.dstOff, o.n)
	case opFill:
		return "fill", stageTransfer, accessTransferWrite, in(o.dst, o.dstOff, o.n)
	case opUpdate:
		return "update", stageTransfer, accessTransferWrite, in(o.dst, o.dstOff, o.n)
	case opDispatch:
		for _, b := range o.binds {
			if b.Access&Write != 0 && in(b.Buf, b.Offset, b.Size) {
				return o.kernel.spec.Name, stageCompute, accessShaderWrite, true
			}
		}
	}
	return "", 0, 0, false
}

// orders says whether b waits for stage and makes access's writes to
// buf[off:end) visible to the conditional-rendering read. A transfer's
// write needs a source stage of ALL_COMMANDS: NVIDIA's driver reads the
// predicate stale through a TRANSFER-stage barrier (transferToPredicate).
func (b *barrier) orders(buf *Buffer, off, end uint64, stage, access uint32) bool {
	const anyStage = stageAllCommands
	if stage == stageTransfer {
		stage = anyStage
	}
	if b.srcStages&(stage|anyStage) == 0 || b.dstStages&(stageConditional|anyStage) == 0 {
		return false
	}
	readable := func(src, dst uint32) bool {
		return src&(access|accessMemoryWrite) != 0 && dst&(accessConditionalRead|accessMemoryRead) != 0
	}
	if len(b.buffers) == 0 {
		return readable(b.srcAccess, b.dstAccess)
	}
	for _, bb := range b.buffers {
		if bb.buf == buf && bb.off <= off && end <= bb.end && readable(bb.srcAccess, bb.dstAccess) {
			return true
		}
	}
	return false
}
