package vulkan

import (
	"fmt"
	"math"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// The decode step: one token through the whole model, recorded once. Its
// inputs are r.tok and r.tokPos (host-written) and r.counts (GPU-kept); its
// outputs r.logitsHost and r.bestHost.
//
//	embed                                   tok -> x
//	per layer: dense block on x, or         (blockOps)
//	           router [predictor] compact decode_args, copy x -> xs,
//	           the block on xs (indirect), scatter x += g(r) (xs - x)
//	rmsnorm, matvec output, argmax, copy    x -> logits, best

// With Options.Profile every command is followed by a timestamp labelled
// with its kernel's name (r.dispatch, r.timestamp).

func (r *Runner) record() error {
	c := r.c
	a := &r.act
	dB := 4 * uint64(c.NEmbd)
	rec := r.dev.NewRecorder()
	r.step = rec

	embed, err := r.ks.get("embed_"+r.w.tokenEmbd.typ, nil)
	if err != nil {
		return err
	}
	r.dispatch(rec, newOp(embed, shaders.EmbedPush{Cols: uint32(c.NEmbd), N: 1, RowBase: 0, Rows: uint32(c.NVocab)}, shaders.Groups(1),
		rd(r.w.tokenEmbd.buf, 0, 0), rd(r.tok, 0, 0), wr(a.x, 0, dB)))

	for l := range r.w.blocks {
		if r.w.blocks[l].router != nil {
			err = r.recordRouted(rec, l)
		} else {
			var ops []op
			ops, err = r.blockOps(l, a.x)
			for _, o := range ops {
				r.dispatch(rec, o)
			}
		}
		if err != nil {
			return fmt.Errorf("layer %d: %w", l, err)
		}
	}

	norm, err := r.ks.row("rmsnorm", c.NEmbd)
	if err != nil {
		return err
	}
	argmax, err := r.ks.row("argmax", c.NVocab)
	if err != nil {
		return err
	}
	vB := 4 * uint64(c.NVocab)
	r.dispatch(rec, newOp(norm, shaders.RMSNormPush{Cols: uint32(c.NEmbd), N: 1, Eps: c.RMSEps}, shaders.RowGroups(1, norm.spec),
		rd(a.x, 0, dB), rd(r.w.outputNorm, 0, 0), wr(a.xn, 0, dB)))
	r.dispatch(rec, r.w.output.op(a.xn, a.logits, 0))
	r.dispatch(rec, newOp(argmax, shaders.ArgmaxPush{Cols: uint32(c.NVocab), N: 1}, shaders.RowGroups(1, argmax.spec),
		rd(a.logits, 0, vB), wr(r.bestHost, 0, 0)))
	rec.Copy(a.logits, r.logitsHost, 0, 0, vB)
	r.timestamp(rec, "copy")
	r.recordTrace(rec)
	return rec.Err()
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
// are appended to the layer's cache at the GPU-side count.
func (r *Runner) blockOps(l int, xb *vk.Buffer) ([]op, error) {
	c := r.c
	a := &r.act
	b := &r.w.blocks[l]
	kc := r.cache[l]
	d, qd := uint32(c.NEmbd), uint32(c.NHead*c.HeadDim)
	dB, qB, ffB := 4*uint64(d), 4*uint64(qd), 4*uint64(c.NFF)
	var kern [5]*kernel
	for i, name := range []string{"rmsnorm", "decode_kv", "decode_attention", "add", "swiglu"} {
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
	norm, kv, attn, add, swiglu := kern[0], kern[1], kern[2], kern[3], kern[4]
	normOp := func(w *vk.Buffer) op {
		return newOp(norm, shaders.RMSNormPush{Cols: d, N: 1, Eps: c.RMSEps}, shaders.RowGroups(1, norm.spec),
			rd(xb, 0, dB), rd(w, 0, 0), wr(a.xn, 0, dB))
	}
	addOp := newOp(add, shaders.AddPush{N: d}, shaders.Groups((d+255)/256), rd(xb, 0, dB), rd(a.o, 0, dB), wr(xb, 0, dB))

	ops := []op{normOp(b.attnNorm)}
	ops = append(ops, b.qkv.ops(a.xn, a.qkv)...)
	ops = append(ops,
		newOp(kv, shaders.DecodeKVPush{HeadDim: uint32(c.HeadDim), NHead: uint32(c.NHead), NKVHead: uint32(c.NKVHead),
			KOff: uint32(b.qkv.part[1] / 4), VOff: uint32(b.qkv.part[2] / 4), Layer: uint32(l), MaxEntries: uint32(r.ctx)},
			[3]uint32{1, 1, 1},
			rw(a.qkv, 0, 0), rd(r.tokPos, 0, 0), rd(r.w.ropeFreq, 0, 0), wr(kc.k, 0, 0), wr(kc.v, 0, 0), wr(kc.pos, 0, 0), rw(r.counts, 0, 0)),
		newOp(attn, shaders.DecodeAttentionPush{N: 1, Layer: uint32(l), NHead: uint32(c.NHead), NKVHead: uint32(c.NKVHead),
			HeadDim: uint32(c.HeadDim), Scale: float32(1 / math.Sqrt(float64(c.HeadDim)))},
			shaders.AttentionGroups(1, uint32(c.NHead)),
			rd(a.qkv, 0, qB), rd(kc.k, 0, 0), rd(kc.v, 0, 0), rd(kc.pos, 0, 0), rd(r.tokPos, 0, 0), rd(r.counts, 0, 0), wr(a.att, 0, qB)),
		b.o.op(a.att, a.o, 0),
		addOp,
		normOp(b.ffnNorm),
	)
	ops = append(ops, b.gateUp.ops(a.xn, a.gu)...)
	ops = append(ops,
		newOp(swiglu, shaders.SwiGLUPush{N: uint32(c.NFF)}, shaders.ElementGroups(uint32(c.NFF)),
			rd(a.gu, b.gateUp.part[0], ffB), rd(a.gu, b.gateUp.part[1], ffB), wr(a.h, 0, ffB)),
		b.down.op(a.h, a.o, 0),
		addOp,
	)
	return ops, nil
}

// recordRouted records routed block l (DESIGN.md §3, causal routing): the
// router (or predictor) scores the token, compact_positive selects it iff
// the score is > 0 and writes the count and scatter's indirect arguments,
// decode_args turns the count into every block dispatch's arguments (their
// sizes, or nothing), the block runs on a copy of x, and scatter adds
// g(r) * (block output - x) to x. No decision reaches the host: the same
// recording serves a selected and a skipped token.
func (r *Runner) recordRouted(rec *vk.Recorder, l int) error {
	c := r.c
	a := &r.act
	rt := r.w.blocks[l].router
	ro := &r.routes[l]
	d := uint32(c.NEmbd)
	dB := 4 * uint64(d)
	if err := r.checkLoops(rt); err != nil {
		return err
	}
	score, err := r.ks.get("router_score", nil)
	if err != nil {
		return err
	}
	compact, err := r.ks.get("compact_positive", nil)
	if err != nil {
		return err
	}
	argsK, err := r.ks.get("decode_args", nil)
	if err != nil {
		return err
	}
	gate := shaders.ScatterGateSigmoid
	if c.Gate == mod.GateIdentity {
		gate = shaders.ScatterGateIdentity
	}
	scatter, err := r.ks.get("scatter", gate)
	if err != nil {
		return err
	}
	hasBias := uint32(0)
	if rt.hasBias {
		hasBias = 1
	}
	r.dispatch(rec, newOp(score, shaders.RouterPush{N: 1, NEmbd: d, HasBias: hasBias}, shaders.Groups(1),
		rd(rt.w, 0, 0), rd(rt.bias, 0, 0), rd(a.x, 0, dB), wr(ro.score, 0, 0)))
	decide := ro.score // r > 0
	if r.routing == mod.RoutingPredictor {
		pred, err := r.ks.get("predictor_score", nil)
		if err != nil {
			return err
		}
		r.dispatch(rec, newOp(pred, shaders.PredictorPush{N: 1, NEmbd: d, PredHidden: rt.predHidden}, shaders.Groups(1),
			rd(rt.predUp, 0, 0), rd(rt.predDown, 0, 0), rd(a.x, 0, dB), wr(ro.pred, 0, 0)))
		decide = ro.pred // p > 0; the multiplier is still g(r)
	}
	r.dispatch(rec, newOp(compact, shaders.CompactPush{N: 1, RowsPerGroup: shaders.RoutingRowsPerGroup}, [3]uint32{1, 1, 1},
		rd(decide, 0, 0), wr(ro.idx, 0, 0), wr(ro.count, 0, 0), wr(ro.args, 0, 0), wr(ro.mask, 0, 0)))

	ops, err := r.blockOps(l, a.xs)
	if err != nil {
		return err
	}
	table := make([]uint32, 0, 3*len(ops))
	for _, o := range ops {
		table = append(table, o.groups[:]...)
	}
	if ro.groups, err = r.upload(fmt.Sprintf("layer %d dispatch sizes", l), u32Bytes(table)); err != nil {
		return err
	}
	if ro.blockArgs, err = r.buffer(4*uint64(len(table)), vk.DeviceLocal); err != nil {
		return err
	}
	r.dispatch(rec, newOp(argsK, shaders.DecodeArgsPush{M: uint32(len(ops))}, shaders.DecodeArgsGroups(uint32(len(ops))),
		rd(ro.count, 0, 0), rd(ro.groups, 0, 0), wr(ro.blockArgs, 0, 0)))

	rec.Copy(a.x, a.xs, 0, 0, dB)
	r.timestamp(rec, "copy")
	for i, o := range ops {
		rec.DispatchIndirect(o.k.k, o.push, ro.blockArgs, 12*uint64(i), o.binds...)
		r.timestamp(rec, o.k.v.Name)
	}
	rec.DispatchIndirect(scatter.k, vk.MustPackPush(shaders.ScatterPush{NEmbd: d}), ro.args, 0,
		rd(ro.idx, 0, 0), rd(ro.count, 0, 0), rd(ro.score, 0, 0), rd(a.xs, 0, dB), rw(a.x, 0, dB))
	r.timestamp(rec, scatter.v.Name)
	return nil
}

// checkLoops refuses a router or predictor whose one-invocation-per-token
// kernel would pass lavapipe's loop limit (shaders.LavapipeLoopIterations),
// where it would silently compute a wrong score.
func (r *Runner) checkLoops(rt *router) error {
	if !r.ks.cpu {
		return nil
	}
	d := uint32(r.c.NEmbd)
	perRow := d/4 + d%4 + 1
	iters := perRow
	if r.routing == mod.RoutingPredictor {
		iters = rt.predHidden * (perRow + 1)
	}
	if iters > shaders.LavapipeLoopIterations {
		return fmt.Errorf("the %s score kernel would loop %d times per token, over lavapipe's limit %d (shaders.LavapipeLoopIterations)",
			r.routing, iters, shaders.LavapipeLoopIterations)
	}
	return nil
}

// dispatch records o, then its timestamp when profiling.
func (r *Runner) dispatch(rec *vk.Recorder, o op) {
	o.record(rec)
	r.timestamp(rec, o.k.v.Name)
}
