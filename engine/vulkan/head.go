package vulkan

import (
	"fmt"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// rowsHead is what a batched recording (an eval window, a prefill chunk)
// ends with for its rows.
type rowsHead int

const (
	// headLast: the last row's logits and their argmax, as the decode step
	// ends (recordHead): a prefill's chunk before decoding goes on.
	headLast rowsHead = iota
	// headLogits: every row's logits, copied to the host (Eval, Score).
	headLogits
	// headLoss: every row's negative log-likelihood of the token after it
	// (the nll kernel on the device), a float a row to the host: scoring a
	// window of n rows downloads 4n bytes, not 4n·nVocab (Losses).
	headLoss
)

// headBufs are the buffers of an all-rows head over up to rows rows.
type headBufs struct {
	logits *vk.Buffer // [rows][nVocab] on the device
	host   *vk.Buffer // headLogits: [rows][nVocab] host-visible
	target *vk.Buffer // headLoss: [rows] u32 host-visible, the token each row predicts
	loss   *vk.Buffer // headLoss: [rows] f32 host-visible
}

// newHeadBufs makes the buffers of head over rows rows.
func (r *Runner) newHeadBufs(head rowsHead, rows int) (headBufs, error) {
	var hb headBufs
	if head == headLast {
		return hb, nil
	}
	al := &allocator{r: r}
	must := al.buf
	n, v := uint64(rows), uint64(r.c.NVocab)
	hb.logits = must(4*n*v, vk.DeviceLocal)
	if head == headLogits {
		hb.host = must(4*n*v, vk.HostVisible)
	} else {
		hb.target, hb.loss = must(4*n, vk.HostVisible), must(4*n, vk.HostVisible)
	}
	if al.err != nil {
		return headBufs{}, fmt.Errorf("the output of %d rows: %w", rows, al.err)
	}
	return hb, nil
}

// recordHead records pass p's head: every row's logits or losses
// (recordRowsHead), or the last row's logits and their argmax (bestHost),
// as the decode step ends, the logits copied to the host when the pass
// asks.
func (r *Runner) recordHead(rec *vk.Recorder, p *frame) error {
	c := r.c
	if p.paged != nil {
		return r.recordPagedHead(rec, p)
	}
	if p.head != headLast {
		return r.recordRowsHead(rec, p)
	}
	if p.last != p.x { // a batch: its last row, where the decode step's head reads it
		dB := 4 * uint64(c.NEmbd)
		rec.Copy(p.x, p.last, uint64(p.n-1)*dB, 0, dB)
		r.timestamp(rec, "copy")
	}
	vB := 4 * uint64(c.NVocab)
	argmaxOp := func(st shaders.Step) (op, error) {
		if st.Role != shaders.RoleArgmax {
			return noOther(st)
		}
		draw := p.draw
		if draw.Buf == nil {
			draw = rd(r.drawHost, 0, shaders.ArgmaxDrawBytesPer)
		}
		return r.argmaxOp(st, p.logits, r.bestHost, 1, r.act.amaxPart, r.act.amaxDone, draw)
	}
	out := stack{mvs: []mat{r.w.output}, mvOff: []uint64{0}}
	ops, err := r.normedOps(p, r.ks.prof.Head(), out, p.last, r.w.outputNorm, p.logits, argmaxOp)
	if err != nil {
		return err
	}
	r.dispatchAll(rec, ops)
	if p.copyLogits {
		rec.Copy(p.logits, r.logitsHost, 0, 0, vB)
		r.timestamp(rec, "copy")
	}
	return nil
}

// argmaxOp is plan step st, the argmax of n rows of logits into out: the
// profile's variant, argmax_wide with its scratch part and done
// (ArgmaxWidePartWords of n rows; done n words, zero) and each row's draw
// parameters (draw: [n] shaders.ArgmaxDraw, temperature 0 for the argmax),
// or argmax (no draw: DrawsOnDevice).
func (r *Runner) argmaxOp(st shaders.Step, logits, out *vk.Buffer, n int, part, done *vk.Buffer, draw vk.Bind) (op, error) {
	cols, nu := uint32(r.c.NVocab), uint32(n)
	vB := 4 * uint64(cols) * uint64(n)
	if st.Variant == "argmax_wide" {
		argmax, err := r.ks.get(st.Variant, st.Spec)
		if err != nil {
			return op{}, err
		}
		return newOp(argmax, shaders.ArgmaxPush{Cols: cols, N: nu}, shaders.ArgmaxWideGroups(nu, cols, argmax.spec),
			rd(logits, 0, vB), wr(out, 0, 0), rw(part, 0, 0), rw(done, 0, 0), draw), nil
	}
	argmax, err := r.ks.row(st.Variant, int(cols))
	if err != nil {
		return op{}, err
	}
	return newOp(argmax, shaders.ArgmaxPush{Cols: cols, N: nu}, shaders.RowGroups(nu, argmax.spec), rd(logits, 0, vB), wr(out, 0, 0)), nil
}

// recordRowsHead records the head of every one of a batch's n rows: the
// final rmsnorm and the output matmul into the head's logits, then for
// headLogits their copy to the host, for headLoss the loss of each row's
// target (hb.target) into hb.loss.
func (r *Runner) recordRowsHead(rec *vk.Recorder, p *frame) error {
	c := r.c
	n, head, hb := p.n, p.head, r.pf.heads[p.head]
	norm, err := r.rmsnormOp(p.x, r.w.outputNorm, p.xn, n)
	if err != nil {
		return err
	}
	r.dispatch(rec, norm)
	xn := p.xn
	for _, o := range r.pf.output.opsInPieces(r.ks.prof.MaxStorageBufferRange, r.dev.Info().Limits.MinStorageBufferOffsetAlignment, xn, hb.logits, n) {
		r.dispatch(rec, o)
	}
	switch head {
	case headLogits:
		rec.Copy(hb.logits, hb.host, 0, 0, 4*uint64(n)*uint64(c.NVocab))
		r.timestamp(rec, "copy")
	case headLoss:
		nll, err := r.ks.row("nll", c.NVocab)
		if err != nil {
			return err
		}
		// The logits bound in pieces of rows within maxStorageBufferRange,
		// each at an aligned offset.
		vB := 4 * uint64(c.NVocab)
		per := rowsPerPiece(r.ks.prof.MaxStorageBufferRange, r.dev.Info().Limits.MinStorageBufferOffsetAlignment, n, vB)
		for i := 0; i < n; i += per {
			k := uint32(min(per, n-i))
			r.dispatch(rec, newOp(nll, shaders.NLLPush{Cols: uint32(c.NVocab), N: k, RowBase: uint32(i)}, shaders.RowGroups(k, nll.spec),
				rd(hb.logits, uint64(i)*vB, uint64(k)*vB), rd(hb.target, 0, 0), wr(hb.loss, 0, 0)))
		}
	}
	return nil
}

// uploadTargets writes the token each of the rows of tokens predicts into
// hb.target: tokens[i+1], and next for the last (0 when there is none: its
// loss is not used).
func (hb headBufs) uploadTargets(tokens []int32, next int32) error {
	ids := make([]uint32, len(tokens))
	for i := range ids {
		t := next
		if i+1 < len(tokens) {
			t = tokens[i+1]
		}
		ids[i] = uint32(t) // checked: in the vocabulary
	}
	return hb.target.Upload(u32Bytes(ids), 0)
}
