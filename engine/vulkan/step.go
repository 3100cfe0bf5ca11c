package vulkan

import (
	"fmt"
	"math"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// The decode step: one token through the whole model, recorded once (twice:
// with the logits' copy to r.logitsHost for Feed, and without it for
// FeedArgmax, which reads 4 bytes a token). Its inputs are r.tok and
// r.tokPos (host-written) and r.counts (GPU-kept); its outputs r.bestHost
// and r.logitsHost.
//
//	embed                                   tok -> x
//	per layer: dense block on x, or         (blockOps)
//	           [predictor hidden] route_decode (x -> xs, the decision, the
//	           arguments), the block on xs and mod_residual x += g(r) (xs - x)
//	           (or the file's gate target), all indirect (recordRouted)
//	[rmsnorm] matvec output, argmax, copy   x -> logits, best (the norm
//	                                        folded into the matvec: FuseNorm)

// With Options.Profile every command is followed by a timestamp labelled
// with its kernel's name (r.dispatch, r.timestamp).

func (r *Runner) record() error {
	var err error
	if r.step, err = r.recordStep(true); err != nil {
		return err
	}
	if r.stepGreedy, err = r.recordStep(false); err != nil {
		return err
	}
	r.fetch = r.dev.NewRecorder() // the logits of a prefill's last row, for Feed
	r.fetch.Copy(r.act.logits, r.logitsHost, 0, 0, 4*uint64(r.c.NVocab))
	return r.fetch.Err()
}

// recordStep records the decode step; with logits it ends by copying the
// logits to logitsHost (Feed), else only their argmax reaches the host
// (FeedArgmax: 4 bytes a token instead of 4·nVocab).
func (r *Runner) recordStep(logits bool) (*vk.Recorder, error) {
	a := &r.act
	rec := r.dev.NewRecorder()

	embed, err := r.ks.get(r.w.tokenEmbd.embedKernel(), nil)
	if err != nil {
		return rec, err
	}
	for _, o := range r.w.tokenEmbd.embedOps(embed, r.tok, a.x, 1) {
		r.dispatch(rec, o)
	}

	for l := range r.w.blocks {
		if r.w.blocks[l].router != nil {
			err = r.recordRouted(rec, l)
		} else {
			var ops []op
			ops, err = r.blockOps(l, a.x, routedBlock{})
			for _, o := range ops {
				r.dispatch(rec, o)
			}
		}
		if err != nil {
			return rec, fmt.Errorf("layer %d: %w", l, err)
		}
	}

	if err := r.recordLogits(rec); err != nil {
		return rec, err
	}
	if logits {
		rec.Copy(a.logits, r.logitsHost, 0, 0, 4*uint64(r.c.NVocab))
		r.timestamp(rec, "copy")
	}
	r.recordTrace(rec)
	return rec, rec.Err()
}

// recordLogits records the logits of the token in act.x (act.logits) and
// their argmax (bestHost): the end of the decode step and of a batched
// prefill.
func (r *Runner) recordLogits(rec *vk.Recorder) error {
	c := r.c
	a := &r.act
	dB := 4 * uint64(c.NEmbd)
	argmax, err := r.ks.row("argmax", c.NVocab)
	if err != nil {
		return err
	}
	vB := 4 * uint64(c.NVocab)
	out := r.w.output
	var outOps []op
	if r.ks.prof.FuseNorm {
		k, err := r.ks.matvec(out.typ, shaders.FuseNorm, int(out.cols))
		if err != nil {
			return err
		}
		outOps = out.fusedOps(k, shaders.FuseNorm, a.x, a.logits, 0, r.w.outputNorm, c.RMSEps)
	} else {
		norm, err := r.ks.row("rmsnorm", c.NEmbd)
		if err != nil {
			return err
		}
		outOps = append([]op{newOp(norm, shaders.RMSNormPush{Cols: uint32(c.NEmbd), N: 1, Eps: c.RMSEps}, shaders.RowGroups(1, norm.spec),
			rd(a.x, 0, dB), rd(r.w.outputNorm, 0, 0), wr(a.xn, 0, dB))}, out.ops(a.xn, a.logits, 0)...)
	}
	for _, o := range outOps {
		r.dispatch(rec, o)
	}
	r.dispatch(rec, newOp(argmax, shaders.ArgmaxPush{Cols: uint32(c.NVocab), N: 1}, shaders.RowGroups(1, argmax.spec),
		rd(a.logits, 0, vB), wr(r.bestHost, 0, 0)))
	return nil
}

// recordTrace copies each routed layer's decision to traceHost (readTrace
// reads it): the score r, the predictor score p with predictor routing, and
// the count of tokens compact_positive selected (0 or 1).
func (r *Runner) recordTrace(rec *vk.Recorder) {
	if r.traceHost == nil {
		return
	}
	for j, l := range r.c.RoutedLayers() {
		ro := &r.routes[l]
		off := 12 * uint64(j)
		rec.Copy(ro.score, r.traceHost, 0, off, 4)
		if r.routing == mod.RoutingPredictor {
			rec.Copy(ro.pred, r.traceHost, 0, off+4, 4)
		}
		rec.Copy(ro.count, r.traceHost, 0, off+8, 4)
	}
	r.timestamp(rec, "copy")
}

// blockOps are the dispatches of Llama block l on one token, in place on xb
// (mod's block): h = x + Attn(norm1(x)), x = h + MLP(norm2(h)); its k and v
// are appended to the layer's cache at the GPU-side count. The residual
// adds are folded into the output and down matvecs; with the profile's
// FuseNorm each RMSNorm is folded into the matvec after it, and SwiGLU into
// the gate|up matvec when gate and up are one stacked matrix; with
// FuseAttention RoPE, the KV append and attention are one dispatch
// (decode_attend). A GPU profile's dense block is then 5 dispatches:
// norm+q|k|v, attention, output+add, norm+gate|up+SwiGLU, down+add.
// A routed block of the public layouts' semantics (rb) turns by its compact
// position, or leaves its MLP output apart for the gate.
func (r *Runner) blockOps(l int, xb *vk.Buffer, rb routedBlock) ([]op, error) {
	c := r.c
	a := &r.act
	b := &r.w.blocks[l]
	kc := r.cache[l]
	d := uint32(c.NEmbd)
	dB, ffB := 4*uint64(d), 4*uint64(c.NFF)
	var kern [4]*kernel
	for i, name := range []string{"rmsnorm", shaders.DecodeKVName(r.kv), shaders.DecodeAttentionName(r.kv), "swiglu"} {
		var err error
		if name == "rmsnorm" {
			kern[i], err = r.ks.row(name, c.NEmbd)
		} else {
			kern[i], err = r.ks.get(name, nil)
		}
		if err != nil {
			return nil, err
		}
	}
	norm, kv, attn, swiglu := kern[0], kern[1], kern[2], kern[3]
	normOp := func(w *vk.Buffer) op {
		return newOp(norm, shaders.RMSNormPush{Cols: d, N: 1, Eps: c.RMSEps}, shaders.RowGroups(1, norm.spec),
			rd(xb, 0, dB), rd(w, 0, 0), wr(a.xn, 0, dB))
	}
	// normed is the ops of stack s on norm(xb) with weight w into y.
	normed := func(s stack, w, y *vk.Buffer) ([]op, error) {
		if !r.ks.prof.FuseNorm {
			return append([]op{normOp(w)}, s.ops(a.xn, y)...), nil
		}
		var ops []op
		for i, m := range s.mvs {
			k, err := r.ks.matvec(m.typ, shaders.FuseNorm, int(m.cols))
			if err != nil {
				return nil, err
			}
			ops = append(ops, m.fusedOps(k, shaders.FuseNorm, xb, y, s.mvOff[i], w, c.RMSEps)...)
		}
		return ops, nil
	}
	// residual is xb += m x.
	residual := func(m mat, x *vk.Buffer) ([]op, error) {
		k, err := r.ks.matvec(m.typ, shaders.FuseAdd, int(m.cols))
		if err != nil {
			return nil, err
		}
		return m.fusedOps(k, shaders.FuseAdd, x, xb, 0, nil, 0), nil
	}

	ops, err := normed(b.qkv, b.attnNorm, a.qkv)
	if err != nil {
		return nil, err
	}
	if r.ks.prof.FuseAttention {
		// RoPE, the KV append and attention in one dispatch.
		attend, err := r.ks.get(shaders.DecodeAttendName(r.kv), shaders.DecodeAttendSpec(r.attnSplits))
		if err != nil {
			return nil, err
		}
		ops = append(ops, newOp(attend, shaders.DecodeAttendPush{HeadDim: uint32(c.HeadDim), NHead: uint32(c.NHead), NKVHead: uint32(c.NKVHead),
			KOff: uint32(b.qkv.part[1] / 4), VOff: uint32(b.qkv.part[2] / 4), Layer: uint32(l), MaxEntries: uint32(r.ctx),
			Scale: float32(1 / math.Sqrt(float64(c.HeadDim))), Compact: rb.compact()},
			shaders.DecodeAttendGroups(uint32(c.NHead), r.attnSplits),
			rd(a.qkv, 0, 0), rd(r.tokPos, 0, 0), rd(r.w.ropeFreq, 0, 0), rw(kc.k, 0, 0), rw(kc.v, 0, 0), rw(kc.pos, 0, 0), rw(r.counts, 0, 0),
			rw(a.part, 0, 0), rw(a.done, 0, 0), wr(a.att, 0, 4*uint64(c.NHead*c.HeadDim))))
	} else {
		ops = append(ops,
			newOp(kv, shaders.DecodeKVPush{HeadDim: uint32(c.HeadDim), NHead: uint32(c.NHead), NKVHead: uint32(c.NKVHead),
				KOff: uint32(b.qkv.part[1] / 4), VOff: uint32(b.qkv.part[2] / 4), Layer: uint32(l), MaxEntries: uint32(r.ctx), Compact: rb.compact()},
				[3]uint32{1, 1, 1},
				rw(a.qkv, 0, 0), rd(r.tokPos, 0, 0), rd(r.w.ropeFreq, 0, 0), wr(kc.k, 0, 0), wr(kc.v, 0, 0), wr(kc.pos, 0, 0), rw(r.counts, 0, 0)),
		)
		attnOps, err := r.attentionOps(l, attn)
		if err != nil {
			return nil, err
		}
		ops = append(ops, attnOps...)
	}
	oOps, err := residual(b.o, a.att)
	if err != nil {
		return nil, err
	}
	ops = append(ops, oOps...)

	if gu := b.gateUp; r.ks.prof.FuseNorm && len(gu.mvs) == 1 && len(gu.mvs[0].pieces) == 1 && gu.part[1] == ffB {
		// gate and up are one matrix [2*nFF][nEmbd]: norm, both matvecs and
		// SwiGLU in one dispatch.
		m := gu.mvs[0]
		k, err := r.ks.matvec(m.typ, shaders.FuseNormSwiGLU, int(m.cols))
		if err != nil {
			return nil, err
		}
		ops = append(ops, m.fusedOps(k, shaders.FuseNormSwiGLU, xb, a.h, 0, b.ffnNorm, c.RMSEps)...)
	} else {
		guOps, err := normed(gu, b.ffnNorm, a.gu)
		if err != nil {
			return nil, err
		}
		ops = append(ops, guOps...)
		ops = append(ops, newOp(swiglu, shaders.SwiGLUPush{N: uint32(c.NFF)}, shaders.ElementGroups(uint32(c.NFF)),
			rd(a.gu, gu.part[0], ffB), rd(a.gu, gu.part[1], ffB), wr(a.h, 0, ffB)))
	}
	if rb.mlpOut != nil { // the gate scales the MLP output: mod_residual adds it
		return append(ops, b.down.ops(a.h, rb.mlpOut, 0)...), nil
	}
	downOps, err := residual(b.down, a.h)
	if err != nil {
		return nil, err
	}
	return append(ops, downOps...), nil
}

// routedBlock is how a routed block differs from a dense one in the public
// MoD layouts' semantics (mod.Config's GateTarget and Positions); the zero
// value is DESIGN.md §3's block.
type routedBlock struct {
	compactPos bool       // RoPE at the token's index among those that entered the layer (mod.PositionsCompact)
	mlpOut     *vk.Buffer // not nil: the down matvec writes the MLP output here, unadded (mod.GateTargetMLP)
}

// compact is rb.compactPos as the decode kernels' push constant.
func (rb routedBlock) compact() uint32 {
	if rb.compactPos {
		return 1
	}
	return 0
}

// routedBlockOf is layer l's routedBlock in the runner's model, with mlpOut
// the buffer for a gated MLP's output.
func (r *Runner) routedBlockOf(mlpOut *vk.Buffer) routedBlock {
	rb := routedBlock{compactPos: r.c.Positions == mod.PositionsCompact}
	if r.c.GateTarget == mod.GateTargetMLP {
		rb.mlpOut = mlpOut
	}
	return rb
}

// attentionOps are decode attention of layer l over its cache, q in a.qkv,
// the output in a.att: the single-pass kernel attn, or with a split
// profile flash-decoding's two passes (the cache in r.attnSplits chunks, a
// workgroup each, then their merge).
func (r *Runner) attentionOps(l int, attn *kernel) ([]op, error) {
	c := r.c
	a := &r.act
	kc := r.cache[l]
	qB := 4 * uint64(c.NHead*c.HeadDim)
	push := shaders.DecodeAttentionPush{N: 1, Layer: uint32(l), NHead: uint32(c.NHead), NKVHead: uint32(c.NKVHead),
		HeadDim: uint32(c.HeadDim), Scale: float32(1 / math.Sqrt(float64(c.HeadDim)))}
	inputs := []vk.Bind{rd(a.qkv, 0, qB), rd(kc.k, 0, 0), rd(kc.v, 0, 0), rd(kc.pos, 0, 0), rd(r.tokPos, 0, 0), rd(r.counts, 0, 0)}
	if r.attnSplits <= 1 {
		return []op{newOp(attn, push, shaders.AttentionGroups(1, uint32(c.NHead)), append(inputs, wr(a.att, 0, qB))...)}, nil
	}
	split, err := r.ks.get(shaders.DecodeAttentionSplitName(r.kv), shaders.DecodeAttentionSplitSpec(r.attnSplits))
	if err != nil {
		return nil, err
	}
	combine, err := r.ks.get("decode_attention_combine", nil)
	if err != nil {
		return nil, err
	}
	nh, hd := uint32(c.NHead), uint32(c.HeadDim)
	return []op{
		newOp(split, push, shaders.DecodeAttentionSplitGroups(1, nh, r.attnSplits), append(inputs, wr(a.part, 0, 0))...),
		newOp(combine, shaders.DecodeAttentionCombinePush{N: 1, NHead: nh, HeadDim: hd, Splits: r.attnSplits}, shaders.Groups(nh),
			rd(a.part, 0, 0), wr(a.att, 0, qB)),
	}, nil
}

// recordRouted records routed block l (DESIGN.md §3, causal routing): one
// dispatch decides (two with an MLP predictor), then the block and the gated
// residual:
//
//	[router_score W1 x, SiLU -> h]   MLP predictor routing: the hidden layer, parallel over its rows
//	route_decode    x -> r [, p = w2 . h (+ b)], count, xs = x (both NaN when
//	                the deciding score is not finite, mod.PoisonRows), and the
//	                indirect arguments of every later dispatch: their sizes
//	                when the token is selected (r > 0, or p > 0, by
//	                mod.Selects' bits), else zero workgroups; a linear
//	                predictor (mod.PredictorLinear) is w2 = its weight, h = x
//	the block on xs, then mod_residual: x += g(r) (xs - x), or the file's
//	                gate target (x += xs + g(r) m with the MLP output m apart,
//	                or x = g(r) xs), all indirect
//
// No decision reaches the host: the same recording serves a selected and a
// skipped token. A skipped token costs the block's dispatches at zero
// workgroups (an indirect dispatch's fixed cost only), and on a device with
// VK_EXT_conditional_rendering not even that: the dispatches are in a
// conditional span on count, which the GPU discards (the barriers between
// them still run).
func (r *Runner) recordRouted(rec *vk.Recorder, l int) error {
	c := r.c
	a := &r.act
	rt := r.w.blocks[l].router
	ro := &r.routes[l]
	d := uint32(c.NEmbd)
	dB := 4 * uint64(d)
	pred := r.routing == mod.RoutingPredictor
	sd := r.ks.scoreDevice()
	sg := !sd.CPU // lavapipe runs the shared-memory tree faster (shaders.PlanScore)
	decide, err := r.ks.get(shaders.RouteDecodeVariant(sd, pred, sg), shaders.RouteDecodeSpec(sd))
	if err != nil {
		return err
	}
	residual, err := r.ks.get(shaders.ModResidualVariant(c.Gate, c.GateTarget), nil)
	if err != nil {
		return err
	}
	rb := r.routedBlockOf(a.mo)
	ops, err := r.blockOps(l, a.xs, rb)
	if err != nil {
		return err
	}
	// The routing buffers are made by the first recording of the step and
	// shared by the second (with and without the logits' copy): the same
	// block, the same tables.
	if ro.idx == nil {
		if ro.idx, err = r.upload(fmt.Sprintf("layer %d index list", l), u32Bytes([]uint32{0})); err != nil {
			return err // the token's row, when it is selected: mod_residual's sel[0]
		}
	}
	resBinds := []vk.Bind{rw(a.x, 0, dB), rd(a.xs, 0, dB), rd(ro.idx, 0, 0), rd(ro.score, 0, 0)}
	if rb.mlpOut != nil {
		resBinds = append(resBinds, rd(rb.mlpOut, 0, dB))
	}
	ops = append(ops, newOp(residual, shaders.ModResidualPush{Cols: d, N: 1, K: 1}, shaders.Groups(1), resBinds...))
	table := make([]uint32, 0, 3*len(ops))
	for _, o := range ops {
		table = append(table, o.groups[:]...)
	}
	if ro.groups == nil {
		if ro.groups, err = r.upload(fmt.Sprintf("layer %d dispatch sizes", l), u32Bytes(table)); err != nil {
			return err
		}
		if ro.blockArgs, err = r.buffer(4*uint64(len(table)), vk.DeviceLocal); err != nil {
			return err
		}
	}

	hasBias := uint32(0)
	if rt.hasBias {
		hasBias = 1
	}
	push := shaders.RouteDecodePush{NEmbd: d, HasBias: hasBias, M: uint32(len(ops))}
	binds := []vk.Bind{rd(rt.w, 0, 0), rd(rt.bias, 0, 0), rw(a.x, 0, dB), wr(a.xs, 0, dB), wr(ro.score, 0, 0),
		wr(ro.count, 0, 0), rd(ro.groups, 0, 0), wr(ro.blockArgs, 0, 0)}
	switch {
	case pred && rt.pred != nil: // linear: p = w . x + b, x read as route_decode's h
		push.PredHidden, push.PredBias = d, 1
		binds = append(binds, rd(a.x, 0, dB), rd(rt.pred, 0, 0), wr(ro.pred, 0, 0), rd(rt.predBias, 0, 0))
	case pred:
		plan := shaders.PlanScore(sd, 1, rt.predHidden, d, sg)
		up, err := r.ks.get(plan.Variant, plan.Spec)
		if err != nil {
			return err
		}
		if ro.hidden == nil {
			if ro.hidden, err = r.buffer(4*uint64(rt.predHidden), vk.DeviceLocal); err != nil {
				return err
			}
		}
		r.dispatch(rec, newOp(up, shaders.RouterPush{N: 1, Rows: rt.predHidden, Cols: d, Act: shaders.RouterActSiLU}, plan.Groups,
			rd(rt.predUp, 0, 0), rd(rt.predDown, 0, 0), rd(a.x, 0, dB), wr(ro.hidden, 0, 0)))
		push.PredHidden = rt.predHidden
		binds = append(binds, rd(ro.hidden, 0, 0), rd(rt.predDown, 0, 0), wr(ro.pred, 0, 0), rd(rt.predDown, 0, 0))
	}
	r.dispatch(rec, newOp(decide, push, [3]uint32{1, 1, 1}, binds...))
	if r.conditional { // count is the predicate: a skipped token's dispatches are discarded whole
		rec.BeginConditional(ro.count, 0)
	}
	for i, o := range ops {
		rec.DispatchIndirect(o.k.k, o.push, ro.blockArgs, 12*uint64(i), o.binds...)
		r.timestamp(rec, o.k.v.Name)
	}
	if r.conditional {
		rec.EndConditional()
	}
	return nil
}

// dispatch records o, then its timestamp when profiling.
func (r *Runner) dispatch(rec *vk.Recorder, o op) {
	o.record(rec)
	r.timestamp(rec, o.k.v.Name)
}
