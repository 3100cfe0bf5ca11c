package vulkan

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// The forward recorder (DESIGN.md §6): one function records embed →
// blocks → head for n rows, and every mode is a configuration of it (a
// pass), not a copy:
//
//	the decode step      n = 1 in r.act, the block in matvecs, the routed
//	                     layer decided by route_decode; head: the logits
//	                     and their argmax (copied to the host or not)
//	a prefill chunk      n rows in r.pf.a, the block in matmuls, causal
//	                     routing (compact_positive) over the rows; head:
//	                     the last row's logits and argmax, or every row's
//	                     logits or losses (causal scoring)
//	an eval window       the same with top-k routing and attention among
//	                     the window's rows (no cache): the Evaluator
//
//	embed                              tok -> x [n]
//	per layer: dense: the block on x   (block.go: its five stages pick
//	                                   matvec or matmul kernels by the pass)
//	           routed: the selector    (route_decode | score, compact_positive |
//	                                   score, top-k), gather x[idx] -> xs, the
//	                                   selected rows' positions; the block on
//	                                   xs and mod_residual x[idx] += g(r) (xs -
//	                                   x[idx]) (or the file's gate target)
//	head                               -> logits, best | all rows' logits | losses
//
// Only the routed layer's selector differs between the modes. A causal
// selector's count lives on the GPU only: the block and mod_residual are
// indirect dispatches whose sizes the selector picks for the count from a
// table made at recording (routedTable), so a routed block costs what its
// selected rows cost, and a skipped token's costs an indirect dispatch's
// fixed cost only; on a device with VK_EXT_conditional_rendering the
// dispatches sit in a span conditional on the count, which the GPU
// discards when it is 0. No decision reaches the host: the same recording
// serves every decision. With Options.Profile every command is followed by
// a timestamp labelled with its kernel's name (r.dispatch, r.timestamp),
// in every pass.

// pass is one configuration of the forward recorder.
type pass struct {
	n    int  // rows
	step bool // the decode step: one row in r.act, matvec kernels, route_decode; else a batch in r.pf.a
	head rowsHead
	// copyLogits: the step's logits are copied to the host (Feed); without
	// it only their argmax is (FeedArgmax: 4 bytes a token instead of
	// 4·nVocab).
	copyLogits bool
}

// stepPass is the decode step.
func stepPass(copyLogits bool) pass { return pass{n: 1, step: true, copyLogits: copyLogits} }

// recordForward records pass p.
func (r *Runner) recordForward(p pass) (*vk.Recorder, error) {
	rec := r.dev.NewRecorder()
	tok, x := r.tok, r.act.x
	rows := blockRows{x: x, n: 1, maxRows: 1, pos: r.tokPos, ropePos: r.tokPos}
	if !p.step {
		a := &r.pf.a
		tok, x = r.pf.tok, a.x
		rows = blockRows{x: x, n: p.n, maxRows: p.n, pos: a.pos, ropePos: a.pos, rows: r.pf.rows}
		rec.Fill(r.pf.rows, 0, 4, uint32(p.n)) // the dense layers' append count
	}
	embed, err := r.ks.get(r.w.tokenEmbd.embedKernel(), nil)
	if err != nil {
		return rec, err
	}
	r.dispatchAll(rec, r.w.tokenEmbd.embedOps(embed, tok, x, p.n))
	routed := 0 // routed layers so far: the trace's index
	for l := range r.w.blocks {
		if r.w.blocks[l].router != nil {
			err = r.recordRouted(rec, p, l, routed)
			routed++
		} else {
			var ops []op
			ops, err = r.blockOps(p, l, rows, routedBlock{})
			r.dispatchAll(rec, ops)
		}
		if err != nil {
			return rec, fmt.Errorf("layer %d: %w", l, err)
		}
	}
	if err := r.recordHead(rec, p); err != nil {
		return rec, err
	}
	return rec, rec.Err()
}

// recordHead records pass p's head: every row's logits or losses, or the
// last row's logits and their argmax (bestHost), as the decode step ends.
func (r *Runner) recordHead(rec *vk.Recorder, p pass) error {
	c := r.c
	a := &r.act
	if p.head != headLast {
		pf := r.pf
		return r.recordRowsHead(rec, p.head, pf.output, pf.a.x, pf.a.xn, p.n, pf.heads[p.head])
	}
	dB := 4 * uint64(c.NEmbd)
	if !p.step { // the last row, where the decode step's head reads it
		rec.Copy(r.pf.a.x, a.x, uint64(p.n-1)*dB, 0, dB)
		r.timestamp(rec, "copy")
	}
	argmax, err := r.ks.row("argmax", c.NVocab)
	if err != nil {
		return err
	}
	vB := 4 * uint64(c.NVocab)
	out := r.w.output
	var ops []op
	if r.ks.prof.FuseNorm {
		k, err := r.ks.matvec(out.typ, shaders.FuseNorm, int(out.cols))
		if err != nil {
			return err
		}
		ops = out.fusedOps(k, shaders.FuseNorm, a.x, a.logits, 0, r.w.outputNorm, c.RMSEps)
	} else {
		norm, err := r.rmsnormOp(a.x, r.w.outputNorm, a.xn, 1)
		if err != nil {
			return err
		}
		ops = append([]op{norm}, out.ops(a.xn, a.logits, 0)...)
	}
	r.dispatchAll(rec, ops)
	r.dispatch(rec, newOp(argmax, shaders.ArgmaxPush{Cols: uint32(c.NVocab), N: 1}, shaders.RowGroups(1, argmax.spec),
		rd(a.logits, 0, vB), wr(r.bestHost, 0, 0)))
	if p.copyLogits {
		rec.Copy(a.logits, r.logitsHost, 0, 0, vB)
		r.timestamp(rec, "copy")
	}
	return nil
}

// routedBufs are the buffers of a routed layer in a pass.
type routedBufs struct {
	x, xs        *vk.Buffer // [n][nEmbd] the rows; the selected rows, gathered (the block's rows)
	score, pred  *vk.Buffer // [n] f32 router and predictor scores
	hidden       *vk.Buffer // the MLP predictor's hidden layer
	idx          *vk.Buffer // [n] u32 the selected rows, ascending (mod_residual's sel)
	count        *vk.Buffer // [1] u32 how many
	selected     *vk.Buffer // [n] u32 each row's decision (the trace's)
	pos, ropePos *vk.Buffer // [n] u32 the selected rows' positions, and RoPE's (compact ones with mod.PositionsCompact)
	mlpOut       *vk.Buffer // a gated MLP's output (mod.GateTargetMLP)
}

// routedBufsOf is layer l's routedBufs in pass p.
func (r *Runner) routedBufsOf(p pass, l int) routedBufs {
	if p.step {
		ro := &r.routes[l]
		return routedBufs{x: r.act.x, xs: r.act.xs, score: ro.score, pred: ro.pred, hidden: ro.hidden, idx: ro.idx,
			count: ro.count, selected: ro.count, pos: r.tokPos, ropePos: r.tokPos, mlpOut: r.act.mo}
	}
	pf := r.pf
	a := &pf.a
	u := routedBufs{x: a.x, xs: a.xs, score: a.r, pred: pf.pred, hidden: pf.hidden, idx: a.keys,
		count: a.count, selected: a.mask, pos: pf.psel, ropePos: pf.psel, mlpOut: a.ob}
	if r.c.Positions == mod.PositionsCompact {
		u.ropePos = pf.prope
	}
	return u
}

// recordRouted records routed layer l, the j-th routed one, in pass p: the
// selector, then the block and mod_residual on the selected rows. With
// Options.Trace each row's r, p and decision are copied to the trace.
func (r *Runner) recordRouted(rec *vk.Recorder, p pass, l, j int) error {
	c := r.c
	u := r.routedBufsOf(p, l)
	rb := r.routedBlockOf(u.mlpOut)
	residual, err := r.ks.get(shaders.ModResidualVariant(c.Gate, c.GateTarget), nil)
	if err != nil {
		return err
	}
	d, nu := uint32(c.NEmbd), uint32(p.n)
	resBinds := []vk.Bind{rw(u.x, 0, 0), rd(u.xs, 0, 0), rd(u.idx, 0, 0), rd(u.score, 0, 0)}
	if rb.mlpOut != nil {
		resBinds = append(resBinds, rd(rb.mlpOut, 0, 0))
	}
	// blockOn is the block and the gated residual on k selected rows of
	// at most maxRows.
	blockOn := func(k, maxRows int) ([]op, error) {
		br := blockRows{x: u.xs, n: k, maxRows: maxRows, pos: u.pos, ropePos: u.ropePos, rows: u.count}
		ops, err := r.blockOps(p, l, br, rb)
		if err != nil {
			return nil, err
		}
		return append(ops, newOp(residual, shaders.ModResidualPush{Cols: d, N: nu, K: nu}, shaders.Groups(uint32(k)), resBinds...)), nil
	}

	if r.routing == mod.RoutingTopK { // eval mode: k = TopKCount(n) rows, known now
		take, err := r.recordTopK(rec, p, l, j, u)
		if err != nil || take == 0 {
			return err
		}
		block, err := blockOn(take, take)
		if err != nil {
			return err
		}
		r.dispatchAll(rec, block)
		return nil
	}

	// Causal routing: the count is on the GPU; the block's dispatches are
	// indirect, sized by the selector from the table.
	block, err := blockOn(p.n, p.n)
	if err != nil {
		return err
	}
	table, err := r.routedTable(p, block, blockOn)
	if err != nil {
		return err
	}
	args, err := r.routedArgs(l, len(block))
	if err != nil {
		return err
	}
	var ops []op
	if p.step {
		ops, err = r.selectStep(l, u, table, args, len(block))
	} else {
		ops, err = r.selectCausal(p, l, u, table, args, len(block))
	}
	if err != nil {
		return err
	}
	r.dispatchAll(rec, ops)
	r.recordTraceRows(rec, p, j, u)
	if r.conditional { // count is the predicate: a block no row entered is discarded whole
		rec.BeginConditional(u.count, 0)
	}
	for i, o := range block {
		rec.DispatchIndirect(o.k.k, o.push, args, 12*uint64(i), o.binds...)
		r.timestamp(rec, o.k.v.Name)
	}
	if r.conditional {
		rec.EndConditional()
	}
	return nil
}

// tableKey names a routed block's dispatch-size table: the pass's shape.
type tableKey struct {
	step bool
	n    int
}

// routedTable is the dispatch sizes of a routed block (block: its m
// dispatches for the pass's n rows) for each count the selector may find:
// for the decode step, 1 (route_decode writes zero workgroups for 0); for
// a batch of n, 0..n (prefill_args picks). The tables are the same for
// every routed layer, so one is made per shape.
func (r *Runner) routedTable(p pass, block []op, blockOn func(k, maxRows int) ([]op, error)) (*vk.Buffer, error) {
	key := tableKey{p.step, p.n}
	if t, ok := r.tables[key]; ok {
		return t, nil
	}
	first := 0
	if p.step {
		first = 1
	}
	m := len(block)
	sizes := make([]uint32, 0, 3*m*(p.n+1-first))
	for k := first; k <= p.n; k++ {
		opsK, err := blockOn(k, p.n)
		if err != nil {
			return nil, err
		}
		if len(opsK) != m {
			return nil, fmt.Errorf("vulkan: a routed block of %d rows has %d dispatches, of %d rows %d", k, len(opsK), p.n, m)
		}
		for _, o := range opsK {
			sizes = append(sizes, o.groups[:]...)
		}
	}
	t, err := r.upload(fmt.Sprintf("routed block dispatch sizes (%d rows)", p.n), u32Bytes(sizes))
	if err != nil {
		return nil, err
	}
	r.tables[key] = t
	return t, nil
}

// routedArgs is layer l's buffer of m indirect arguments, made or grown
// on first use; every pass of the layer writes its arguments there before
// its block reads them.
func (r *Runner) routedArgs(l, m int) (*vk.Buffer, error) {
	if b := r.args[l]; b != nil && b.Size() >= 12*uint64(m) {
		return b, nil
	}
	b, err := r.buffer(12*uint64(m), vk.DeviceLocal)
	if err != nil {
		return nil, err
	}
	r.args[l] = b
	return b, nil
}

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
	switch {
	case pred && rt.pred != nil: // linear: p = w . x + b, x read as route_decode's h
		push.PredHidden, push.PredBias = d, 1
		binds = append(binds, rd(u.x, 0, 0), rd(rt.pred, 0, 0), wr(u.pred, 0, 0), rd(rt.predBias, 0, 0))
	case pred:
		hidden, err := r.predictorHidden(rt, 1, u.x, u.hidden)
		if err != nil {
			return nil, err
		}
		ops = append(ops, hidden)
		push.PredHidden = rt.predHidden
		binds = append(binds, rd(u.hidden, 0, 0), rd(rt.predDown, 0, 0), wr(u.pred, 0, 0), rd(rt.predDown, 0, 0))
	}
	return append(ops, newOp(decide, push, [3]uint32{1, 1, 1}, binds...)), nil
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
// (prefill_pos; with compact positions also RoPE's, from the layer's count
// before the batch: prefill_pos_compact) of a batch of n rows, at most take
// of them selected.
func (r *Runner) gatherOps(l, n int, take uint32, u routedBufs) ([]op, error) {
	a := &r.pf.a
	nu := uint32(n)
	gather, err := r.ks.get("gather", nil)
	if err != nil {
		return nil, err
	}
	ops := []op{newOp(gather, shaders.GatherPush{NEmbd: uint32(r.c.NEmbd)}, shaders.Groups(take),
		rd(u.idx, 0, 0), rd(u.count, 0, 0), rd(u.x, 0, 0), wr(u.xs, 0, 0))}
	if u.ropePos == u.pos {
		k, err := r.ks.get("prefill_pos", nil)
		if err != nil {
			return nil, err
		}
		return append(ops, newOp(k, shaders.PrefillPush{N: nu}, shaders.Groups((nu+63)/64),
			rd(u.idx, 0, 0), rd(u.count, 0, 0), rd(a.pos, 0, 0), wr(u.pos, 0, 0))), nil
	}
	k, err := r.ks.get("prefill_pos_compact", nil)
	if err != nil {
		return nil, err
	}
	return append(ops, newOp(k, shaders.PrefillPush{N: nu, Layer: uint32(l)}, shaders.Groups((nu+63)/64),
		rd(u.idx, 0, 0), rd(u.count, 0, 0), rd(a.pos, 0, 0), wr(u.pos, 0, 0), rd(r.counts, 0, 0), wr(u.ropePos, 0, 0))), nil
}

// selectCausal is a batch's causal selector: the scores, compact_positive
// (r > 0, or p > 0, on the bits as mod.Selects) -> idx, count, each row's
// decision (a row whose deciding score is not finite poisons its x,
// mod.PoisonRows), the gather and positions, then prefill_args: the
// block's m indirect arguments, the table's sizes for the count.
func (r *Runner) selectCausal(p pass, l int, u routedBufs, table, args *vk.Buffer, m int) ([]op, error) {
	a := &r.pf.a
	nu := uint32(p.n)
	ops, decide, err := r.scoreOps(l, p.n, u)
	if err != nil {
		return nil, err
	}
	compact, err := r.ks.get("compact_positive", nil)
	if err != nil {
		return nil, err
	}
	ops = append(ops, newOp(compact, shaders.CompactPush{N: nu, RowsPerGroup: shaders.RoutingRowsPerGroup, Cols: uint32(r.c.NEmbd)}, [3]uint32{1, 1, 1},
		rd(decide, 0, 0), wr(u.idx, 0, 0), wr(u.count, 0, 0), wr(a.args, 0, 0), wr(u.selected, 0, 0), rw(u.x, 0, 0)))
	g, err := r.gatherOps(l, p.n, nu, u)
	if err != nil {
		return nil, err
	}
	argsK, err := r.ks.get("prefill_args", nil)
	if err != nil {
		return nil, err
	}
	ops = append(ops, g...)
	return append(ops, newOp(argsK, shaders.PrefillPush{N: uint32(m), MaxEntries: nu}, shaders.Groups((uint32(m)+63)/64),
		rd(u.count, 0, 0), rd(table, 0, 0), wr(args, 0, 0))), nil
}

// recordTopK records eval mode's selector: the router scores, top-k of
// them (k = TopKCount(n); a row whose score is not finite poisons its x)
// -> idx, each row's decision, count; the gather and positions; and with
// Options.Trace the rows' routing. It returns k.
func (r *Runner) recordTopK(rec *vk.Recorder, p pass, l, j int, u routedBufs) (int, error) {
	pf := r.pf
	a := &pf.a
	nu := uint32(p.n)
	ops, _, err := r.scoreOps(l, p.n, u)
	if err != nil {
		return 0, err
	}
	take := uint32(r.c.TopKCount(p.n))
	if take == 0 { // a floor(c·n) of 0 (mod.RoundingFloor): no row goes through
		r.dispatchAll(rec, ops)
		if buf, _ := r.traceBuf(p); buf != nil {
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
			binds = []vk.Bind{rd(u.score, 0, 0), wr(pf.sortKeys, 0, 0), rw(u.x, 0, 0)}
		case "topk_merge_global", "topk_merge_local":
			binds = []vk.Bind{rw(pf.sortKeys, 0, 0)}
		case "topk_select":
			binds = []vk.Bind{rd(pf.sortKeys, 0, 0), wr(u.selected, 0, 0)}
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
			rd(u.selected, 0, 0), wr(u.idx, 0, 0), wr(u.count, 0, 0), wr(a.args, 0, 0)))
	}
	g, err := r.gatherOps(l, p.n, take, u)
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

// recordTraceRows copies the j-th routed layer's scores and decisions of
// the pass's n rows to its trace buffer (Options.Trace): [nRouted][3][rows]
// of r f32, p f32, selected u32, rows 1 for the decode step and UBatch for
// a batch (readTrace).
func (r *Runner) recordTraceRows(rec *vk.Recorder, p pass, j int, u routedBufs) {
	buf, rows := r.traceBuf(p)
	if buf == nil {
		return
	}
	rB, off := 4*uint64(p.n), 12*uint64(rows)*uint64(j)
	rec.Copy(u.score, buf, 0, off, rB)
	if r.routing == mod.RoutingPredictor {
		rec.Copy(u.pred, buf, 0, off+4*uint64(rows), rB)
	}
	rec.Copy(u.selected, buf, 0, off+8*uint64(rows), rB)
	r.timestamp(rec, "copy")
}

// traceBuf is pass p's trace buffer and its rows (nil without Options.Trace).
func (r *Runner) traceBuf(p pass) (*vk.Buffer, int) {
	if p.step {
		return r.traceHost, 1
	}
	return r.pf.trace, r.pf.ub
}

// readTrace appends the routing of the n rows of the pass just run to
// r.trace (with Options.Trace; a no-op otherwise).
func (r *Runner) readTrace(p pass) error {
	buf, rows := r.traceBuf(p)
	if r.trace == nil || buf == nil {
		return nil
	}
	routed := r.c.RoutedLayers()
	raw := make([]byte, 12*rows*len(routed))
	if err := buf.Download(raw, 0); err != nil {
		return err
	}
	word := func(j, field, i int) uint32 {
		return binary.LittleEndian.Uint32(raw[4*((3*j+field)*rows+i):])
	}
	field := 0 // the score that decided
	if r.routing == mod.RoutingPredictor {
		field = 1
	}
	for i := 0; i < p.n; i++ {
		routes := make([]mod.Route, len(routed))
		for j, l := range routed {
			routes[j] = mod.Route{Layer: l, Score: math.Float32frombits(word(j, field, i)), Selected: word(j, 2, i) != 0}
		}
		r.trace = append(r.trace, routes)
	}
	return nil
}

// dispatch records o, then its timestamp when profiling.
func (r *Runner) dispatch(rec *vk.Recorder, o op) {
	o.record(rec)
	r.timestamp(rec, o.k.v.Name)
}

// dispatchAll dispatches ops in order.
func (r *Runner) dispatchAll(rec *vk.Recorder, ops []op) {
	for _, o := range ops {
		r.dispatch(rec, o)
	}
}
