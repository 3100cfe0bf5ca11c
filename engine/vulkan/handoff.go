package vulkan

import (
	"encoding/binary"
	"fmt"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// The decode step without barriers (shaders.Profile.Handoff, issue 42
// item 6; docs/decode-attention-cost.md, "Dispatches without barriers"):
// each of the step's kernels that has a handoff variant (shaders/
// handoff.go: the GPU profile's dense blocks and head on the measured
// weight types) is recorded as that variant, every binding with vk's
// Handoff access, so that vk derives no barrier between two of them. Each
// waits on the count of workgroups done of the handoff dispatch before it
// (its slot in r.hand), and counts itself in its own slot: the kernels
// keep the order the barriers kept, and the GPU never drains between
// them. A kernel without a handoff variant (the embedding, a routed
// layer's selector and block, the logits' copy) keeps its barriers; a
// handoff kernel after one waits on a count already complete.
//
// The step zeroes r.hand first (one fill) and copies its stall flag to
// r.handHost last; runStep reads it, and a set flag (a wait that gave up:
// a driver that does not start a dispatch's workgroups after the earlier
// dispatch's) fails the step by name rather than returning what a
// stalled step computed.

// handoffEnv is MODRUN_HANDOFF applied to prof: unset, the profile's
// choice; "1" on; "0" off. A measuring knob: the GPU bundle's quick mode
// runs the decode rows with it beside the default, since what a barrier
// costs against a wait is a GPU's to say.
func handoffEnv(prof *shaders.Profile, k Knobs) error {
	return setHandoff(prof, k.get("MODRUN_HANDOFF"))
}

// setHandoff applies MODRUN_HANDOFF's value v to prof.
func setHandoff(prof *shaders.Profile, v string) error {
	switch v {
	case "":
	case "1":
		prof.Handoff = true
	case "0":
		prof.Handoff = false
	default:
		return fmt.Errorf("vulkan: MODRUN_HANDOFF=%q: want 1 (the decode step's kernels hand off without barriers) or 0 (barriers)", v)
	}
	return nil
}

// handoffWords is the size of the step's handoff buffer: the stall flag
// and a slot for each dispatch of the step, at most maxStepDispatches.
func handoffWords(nLayer int) uint64 { return 1 + uint64(maxStepDispatches(nLayer)) }

// maxStepDispatches bounds the dispatches of one decode step: a block
// takes at most 12 (a routed block's selector, the unfused norms, q, k
// and v apart, the attention's passes, gate, up and swiglu, down, the
// gated residual), the head and the embedding a few.
func maxStepDispatches(nLayer int) int { return 16*nLayer + 16 }

// handoffRec is the hand-off's state while a step is recorded.
type handoffRec struct {
	next       uint32 // the next dispatch's slot
	wait, need uint32 // the last handoff dispatch's slot and workgroups
	err        error
}

// beginHandoff starts recording rec's pass with the hand-off when the
// profile asks for it and the pass is the decode step: the counts zeroed
// first.
func (r *Runner) beginHandoff(rec *vk.Recorder, p *frame) {
	if r.hand == nil || !p.step || p.paged != nil {
		return
	}
	rec.Fill(r.hand, 0, r.hand.Size(), 0)
	r.handRecs[rec] = &handoffRec{next: 1}
}

// endHandoff ends rec's hand-off: the stall flag copied to the host
// (recordFrame forgets rec's state after).
func (r *Runner) endHandoff(rec *vk.Recorder) error {
	h := r.handRecs[rec]
	if h == nil {
		return nil
	}
	if h.err != nil {
		return h.err
	}
	rec.Copy(r.hand, r.handHost, 4*shaders.HandoffStallWord, 0, 4)
	return nil
}

// handoffOp is o as rec's hand-off records it: its handoff variant after
// the last one's, or o itself when its kernel has none or rec has no
// hand-off.
func (r *Runner) handoffOp(rec *vk.Recorder, o op) op {
	h := r.handRecs[rec]
	if h == nil || h.err != nil {
		return o
	}
	name, ok := shaders.HandoffName(o.k.v.Name)
	if !ok {
		return o
	}
	k, err := r.ks.get(name, o.k.spec)
	if err != nil {
		h.err = err
		return o
	}
	if slots := uint32(r.hand.Size()/4) - 1; h.next > slots {
		h.err = fmt.Errorf("vulkan: the decode step's hand-off has %d slots, and the step more dispatches", slots)
		return o
	}
	slot := h.next
	h.next++
	push := append(append([]byte(nil), o.push...),
		vk.MustPackPush(shaders.HandoffPush{HandWait: h.wait, HandNeed: h.need, HandSlot: slot})...)
	binds := make([]vk.Bind, 0, len(o.binds)+1)
	for _, b := range o.binds {
		b.Access |= vk.Handoff
		binds = append(binds, b)
	}
	binds = append(binds, vk.Bind{Buf: r.hand, Access: vk.ReadWrite | vk.Handoff})
	h.wait, h.need = slot, o.groups[0]*o.groups[1]*o.groups[2]
	return op{k: k, push: push, groups: o.groups, binds: binds}
}

// checkHandoff fails the step just run when one of its waits gave up.
func (r *Runner) checkHandoff() error {
	if r.handHost == nil {
		return nil
	}
	var raw [4]byte
	if err := r.handHost.Download(raw[:], 0); err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(raw[:]) != 0 {
		return r.stallError()
	}
	return nil
}

// stallError is the error of a step whose hand-off's stall flag is set.
func (r *Runner) stallError() error {
	return fmt.Errorf("a kernel's wait for the one before it gave up (MODRUN_HANDOFF's hand-off between dispatches): device %s does not start a dispatch's workgroups after the earlier dispatch's, "+
		"and the step's results are wrong: run with MODRUN_HANDOFF=0", r.dev.Info().Name)
}

// handoffReady is the count the self-check presets in the slot a handoff
// kernel waits on.
const handoffReady = 3

// handoffChecker is the self-check of handoff variant v: its base
// variant's case with the wait satisfied (slot 1 preset), its own slot 2
// that must count every workgroup, and a stall flag that must stay 0; ok
// is false when the base has no check.
func handoffChecker(v shaders.Variant) (func(shaders.Variant, []uint32) (checkCase, error), bool) {
	base, err := shaders.Lookup(shaders.HandoffBase(v.Name))
	if err != nil {
		return nil, false
	}
	mk, ok := checkerFor(base)
	if !ok {
		return nil, false
	}
	return func(_ shaders.Variant, spec []uint32) (checkCase, error) {
		c, err := mk(base, spec)
		if err != nil {
			return c, err
		}
		c.push = shaders.WithHandoff(c.push, shaders.HandoffPush{HandWait: 1, HandNeed: handoffReady, HandSlot: 2})
		c.bufs = append(c.bufs, checkBuf{data: u32Bytes([]uint32{0, handoffReady, 0}),
			wantU32: []uint32{0, handoffReady, c.groups[0] * c.groups[1] * c.groups[2]}})
		return c, nil
	}, true
}
