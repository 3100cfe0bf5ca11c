package vulkan

import (
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// The routed layer's selectors (forward.go's recordRouted): what differs
// between the passes. Each scores the rows, decides which go through the
// block, gathers them and their positions, and (causal routing) writes the
// block's indirect arguments for the count it found.

// predictorHidden is the MLP predictor's hidden layer SiLU(W1 x) of n rows
// of x into hidden, parallel over its rows.
func (r *Runner) predictorHidden(rt *router, n int, x, hidden *vk.Buffer) (op, error) {
	plan := r.ks.prof.Score(uint32(n), rt.predHidden, uint32(r.c.NEmbd))
	k, err := r.ks.get(plan.Variant, plan.Spec)
	if err != nil {
		return op{}, err
	}
	return newOp(k, shaders.RouterPush{N: uint32(n), Rows: rt.predHidden, Cols: uint32(r.c.NEmbd), Act: shaders.RouterActSiLU}, plan.Groups,
		rd(rt.predUp, 0, 0), rd(rt.predDown, 0, 0), rd(x, 0, 0), wr(hidden, 0, 0)), nil
}

// selectStep is the decode step's selector: one dispatch decides (two with
// an MLP predictor):
//
//	[router_score W1 x, SiLU -> h]   the MLP predictor's hidden layer
//	route_decode    x -> r [, p = w2 . h (+ b)], count, xs = x (both NaN when
//	                the deciding score is not finite, mod.PoisonRows), and the
//	                block's m indirect arguments: the table's sizes when the
//	                token is selected (r > 0, or p > 0, by mod.Selects' bits),
//	                else zero workgroups; a linear predictor
//	                (mod.PredictorLinear) is w2 = its weight, h = x
func (r *Runner) selectStep(l int, u routedBufs, table, args *vk.Buffer, m int) ([]op, error) {
	rt := r.w.blocks[l].router
	d := uint32(r.c.NEmbd)
	pred := r.routing == mod.RoutingPredictor
	decide, err := r.ks.get(r.ks.prof.RouteDecode(pred))
	if err != nil {
		return nil, err
	}
	push := shaders.RouteDecodePush{NEmbd: d, M: uint32(m)}
	if rt.hasBias {
		push.HasBias = 1
	}
	binds := []vk.Bind{rd(rt.w, 0, 0), rd(rt.bias, 0, 0), rw(u.x, 0, 0), wr(u.xs, 0, 0), wr(u.score, 0, 0),
		wr(u.count, 0, 0), rd(table, 0, 0), wr(args, 0, 0)}
	var ops []op
	if pred {
		pi, err := r.predictorInputs(rt, 1, u)
		if err != nil {
			return nil, err
		}
		ops, binds, push.PredHidden, push.PredBias = pi.ops, append(binds, pi.h, pi.w2, wr(u.pred, 0, 0), pi.pb), pi.hidden, pi.bias
	}
	return append(ops, newOp(decide, push, [3]uint32{1, 1, 1}, binds...)), nil
}

// predictorInput is what a one-workgroup selector (route_decode,
// route_rows) takes for predictor routing: the MLP's hidden layer's
// dispatch before it, its bindings h, w2 and pb, and its push's
// PredHidden and PredBias.
type predictorInput struct {
	ops          []op
	h, w2, pb    vk.Bind
	hidden, bias uint32
}

// predictorInputs is predictorInput for n rows: a linear predictor
// (mod.PredictorLinear) is p = w . x + b, with x read as h and w as w2;
// an MLP one h = SiLU(W1 x) by router.comp first, then p = w2 . h.
func (r *Runner) predictorInputs(rt *router, n int, u routedBufs) (predictorInput, error) {
	if rt.pred != nil {
		return predictorInput{h: rd(u.x, 0, 0), w2: rd(rt.pred, 0, 0), pb: rd(rt.predBias, 0, 0), hidden: uint32(r.c.NEmbd), bias: 1}, nil
	}
	hidden, err := r.predictorHidden(rt, n, u.x, u.hidden)
	if err != nil {
		return predictorInput{}, err
	}
	return predictorInput{ops: []op{hidden}, h: rd(u.hidden, 0, 0), w2: rd(rt.predDown, 0, 0), pb: rd(rt.predDown, 0, 0), hidden: rt.predHidden}, nil
}

// scoreOps are the router score r of a batch's n rows and, with predictor
// routing, the predictor's p (a linear predictor: w . x + b; an MLP one:
// w2 . SiLU(W1 x)), and the buffer of the deciding score.
func (r *Runner) scoreOps(l, n int, u routedBufs) ([]op, *vk.Buffer, error) {
	rt := r.w.blocks[l].router
	nu, d := uint32(n), uint32(r.c.NEmbd)
	score := func(push shaders.RouterPush, w, bias, x, out *vk.Buffer) (op, error) {
		plan := r.ks.prof.Score(nu, push.Rows, push.Cols)
		k, err := r.ks.get(plan.Variant, plan.Spec)
		if err != nil {
			return op{}, err
		}
		push.N = nu
		return newOp(k, push, plan.Groups, rd(w, 0, 0), rd(bias, 0, 0), rd(x, 0, 0), wr(out, 0, 0)), nil
	}
	hasBias := uint32(0)
	if rt.hasBias {
		hasBias = 1
	}
	o, err := score(shaders.RouterPush{Rows: 1, Cols: d, HasBias: hasBias}, rt.w, rt.bias, u.x, u.score)
	if err != nil {
		return nil, nil, err
	}
	ops := []op{o}
	switch {
	case r.routing != mod.RoutingPredictor:
		return ops, u.score, nil
	case rt.pred != nil: // linear: a score as the router's
		o, err = score(shaders.RouterPush{Rows: 1, Cols: d, HasBias: 1}, rt.pred, rt.predBias, u.x, u.pred)
		if err != nil {
			return nil, nil, err
		}
		return append(ops, o), u.pred, nil
	}
	hidden, err := r.predictorHidden(rt, n, u.x, u.hidden)
	if err != nil {
		return nil, nil, err
	}
	o, err = score(shaders.RouterPush{Rows: 1, Cols: rt.predHidden}, rt.predDown, rt.predDown, u.hidden, u.pred)
	if err != nil {
		return nil, nil, err
	}
	return append(ops, hidden, o), u.pred, nil
}

// gatherOps are gather x[idx] -> xs and the selected rows' positions
// in one dispatch (gather_pos; with compact positions also RoPE's, from
// the layer's count before the batch: gather_pos_compact) of a batch's
// rows, at most take of them selected.
func (r *Runner) gatherOps(l int, take uint32, u routedBufs) ([]op, error) {
	binds := []vk.Bind{rd(u.idx, 0, 0), rd(u.count, 0, 0), rd(u.x, 0, 0), wr(u.xs, 0, 0), rd(u.rowPos, 0, 0), wr(u.pos, 0, 0)}
	name := "gather_pos"
	if u.ropePos != u.pos {
		name, binds = "gather_pos_compact", append(binds, rd(r.counts, 0, 0), wr(u.ropePos, 0, 0))
	}
	k, err := r.ks.get(name, nil)
	if err != nil {
		return nil, err
	}
	return []op{newOp(k, shaders.GatherPush{NEmbd: uint32(r.c.NEmbd), Layer: uint32(l)}, shaders.Groups(take), binds...)}, nil
}

// selectCausal is a batch's causal selector: the scores, then
// compact_positive_table (r > 0, or p > 0, on the bits as mod.Selects) ->
// idx, count, each row's decision (a row whose deciding score is not
// finite poisons its x, mod.PoisonRows), and the block's m indirect
// arguments, the table's sizes for the count; then the gather and
// positions.
func (r *Runner) selectCausal(p *frame, l int, u routedBufs, table, args *vk.Buffer, m int) ([]op, error) {
	nu := uint32(p.n)
	if routesRows(p) {
		return r.routeRowsOps(p, l, u, table, args, m)
	}
	ops, decide, err := r.scoreOps(l, p.n, u)
	if err != nil {
		return nil, err
	}
	compact, err := r.ks.get("compact_positive_table", nil)
	if err != nil {
		return nil, err
	}
	ops = append(ops, newOp(compact, shaders.CompactPush{N: nu, RowsPerGroup: shaders.RoutingRowsPerGroup, Cols: uint32(r.c.NEmbd), M: uint32(m)}, [3]uint32{1, 1, 1},
		rd(decide, 0, 0), wr(u.idx, 0, 0), wr(u.count, 0, 0), wr(args, 0, 0), wr(u.selected, 0, 0), rw(u.x, 0, 0), rd(table, 0, 0)))
	var g []op
	if p.paged != nil {
		g, err = r.pagedGatherOps(p, l, u)
	} else {
		g, err = r.gatherOps(l, nu, u)
	}
	return append(ops, g...), err
}

// routesRows says whether pass p's causal selector is route_rows: a
// batched step's matvec path (a few rows).
func routesRows(p *frame) bool {
	return p.paged != nil && p.vec && p.n <= shaders.RouteRowsMost
}

// routeRowsOps is a batched step's causal selector on its matvec path (a
// few rows): route_rows scores every row (r, and with predictor routing
// p, whose MLP's hidden layer SiLU(W1 x) runs before it), decides,
// compacts, writes the block's indirect arguments, gathers the selected
// rows and gives their entries, and writes the routing to the trace, in
// one dispatch where the scores, the compaction, paged_gather and the
// trace's copies took three dispatches and two or three copies.
func (r *Runner) routeRowsOps(p *frame, l int, u routedBufs, table, args *vk.Buffer, m int) ([]op, error) {
	rt, pf := r.w.blocks[l].router, p.paged
	d := uint32(r.c.NEmbd)
	pred := r.routing == mod.RoutingPredictor
	k, err := r.ks.get(shaders.RouteRowsName(pred), nil)
	if err != nil {
		return nil, err
	}
	push := shaders.RouteRowsPush{N: uint32(p.n), NEmbd: d, M: uint32(m), NRouted: uint32(len(r.c.RoutedLayers())), Routed: pf.layer[l]}
	if rt.hasBias {
		push.HasBias = 1
	}
	if r.c.Positions == mod.PositionsCompact {
		push.Compact = 1
	}
	trace := u.selected // no trace: a buffer the kernel does not write
	if p.trace != nil {
		trace, push.TraceRows = p.trace, uint32(p.traceRows)
	}
	binds := []vk.Bind{rd(rt.w, 0, 0), rd(rt.bias, 0, 0), rw(u.x, 0, 0), wr(u.xs, 0, 0), wr(u.score, 0, 0), wr(u.count, 0, 0),
		rd(table, 0, 0), wr(args, 0, 0), wr(u.idx, 0, 0), wr(trace, 0, 0), rd(u.rowPos, 0, 0), rd(pf.rowSeq, 0, 0),
		rd(pf.rmeta, 0, 0), wr(u.pos, 0, 0), wr(u.ropePos, 0, 0), wr(u.ent, 0, 0), wr(u.toff, 0, 0)}
	var ops []op
	if pred {
		pi, err := r.predictorInputs(rt, p.n, u)
		if err != nil {
			return nil, err
		}
		ops, binds, push.PredHidden, push.PredBias = pi.ops, append(binds, pi.h, pi.w2, pi.pb), pi.hidden, pi.bias
	}
	return append(ops, newOp(k, push, [3]uint32{1, 1, 1}, binds...)), nil
}

// recordTopK records eval mode's selector: the router scores, top-k of
// them (k = TopKCount(n); a row whose score is not finite poisons its x)
// -> idx, each row's decision, count; the gather and positions; and with
// Options.Trace the rows' routing. It returns k.
func (r *Runner) recordTopK(rec *vk.Recorder, p *frame, l, j int, u routedBufs) (int, error) {
	nu := uint32(p.n)
	ops, _, err := r.scoreOps(l, p.n, u)
	if err != nil {
		return 0, err
	}
	take := uint32(r.c.TopKCount(p.n))
	if take == 0 { // a floor(c·n) of 0 (mod.RoundingFloor): no row goes through
		r.dispatchAll(rec, ops)
		if p.trace != nil {
			rec.Fill(u.selected, 0, 4*uint64(p.n), 0)
			r.recordTraceRows(rec, p, j, u)
		}
		return 0, nil
	}
	for _, pass := range shaders.TopkPasses(nu, take) {
		var binds []vk.Bind
		pass.Push.Cols = uint32(r.c.NEmbd) // the kernel reading r poisons x's row of a non-finite one (mod.PoisonRows)
		switch pass.Variant {
		case "topk":
			binds = []vk.Bind{rd(u.score, 0, 0), wr(u.selected, 0, 0), wr(u.idx, 0, 0), rw(u.x, 0, 0)}
		case "topk_sort":
			binds = []vk.Bind{rd(u.score, 0, 0), wr(u.sortKeys, 0, 0), rw(u.x, 0, 0)}
		case "topk_merge_global", "topk_merge_local":
			binds = []vk.Bind{rw(u.sortKeys, 0, 0)}
		case "topk_select":
			binds = []vk.Bind{rd(u.sortKeys, 0, 0), wr(u.selected, 0, 0)}
		}
		k, err := r.ks.get(pass.Variant, nil)
		if err != nil {
			return 0, err
		}
		ops = append(ops, newOp(k, pass.Push, pass.Groups, binds...))
	}
	if nu > shaders.TopkLocal { // the multi-pass plan leaves a mask: compact it
		k, err := r.ks.get("compact_mask", nil)
		if err != nil {
			return 0, err
		}
		ops = append(ops, newOp(k, shaders.CompactPush{N: nu, RowsPerGroup: shaders.RoutingRowsPerGroup}, [3]uint32{1, 1, 1},
			rd(u.selected, 0, 0), wr(u.idx, 0, 0), wr(u.count, 0, 0), wr(u.args, 0, 0)))
	}
	g, err := r.gatherOps(l, take, u)
	if err != nil {
		return 0, err
	}
	r.dispatchAll(rec, ops)
	if nu <= shaders.TopkLocal { // topk wrote idx and the decisions; the count is k
		rec.Fill(u.count, 0, 4, take)
	}
	r.dispatchAll(rec, g)
	r.recordTraceRows(rec, p, j, u)
	return int(take), nil
}
