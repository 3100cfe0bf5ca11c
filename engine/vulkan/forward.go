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
func (r *Runner) recordForward(ps pass) (*vk.Recorder, error) {
	f, err := r.forwardFrame(ps)
	if err != nil {
		return nil, err
	}
	return r.recordFrame(f)
}

// forwardFrame is pass p's frame as recordForward records it.
func (r *Runner) forwardFrame(ps pass) (*frame, error) {
	f := r.frameOf(ps)
	if !ps.step && r.pf.vqkv != nil && ps.n <= r.vecRows() {
		// A short prompt's chunk: its products as matvecs over its rows,
		// one pass over the weights (stepvec.go), as a step of as many
		// sequences runs them.
		f.vec, f.vqkv, f.vxq = true, r.pf.vqkv, r.pf.vxq
		return f, nil
	}
	if !ps.step && !r.ks.prof.CPU {
		// A GPU's prefill chunk or eval window of a few rows takes the
		// narrow tiles a decode step of as many sequences takes
		// (narrowSpec): at 5 tokens a 64-token tile multiplies 59 rows of
		// padding. Lavapipe's profile keeps its one tile.
		bs, err := r.narrowBlocks(ps.n)
		if err != nil {
			return nil, err
		}
		for l := range f.layers {
			f.layers[l].mm = bs[l]
		}
	}
	return f, nil
}

// recordFrame records the pass of frame p.
func (r *Runner) recordFrame(p *frame) (*vk.Recorder, error) {
	rec := r.dev.NewRecorder()
	if err := r.recordFrameTo(rec, p); err != nil {
		return rec, err
	}
	return rec, rec.Err()
}

// recordFrameTo records the pass of frame p at the end of rec (the greedy
// chain records several decode steps in one recording: chain.go).
func (r *Runner) recordFrameTo(rec *vk.Recorder, p *frame) error {
	r.beginHandoff(rec, p)
	defer delete(r.handRecs, rec) // endHandoff's, on an error too
	if p.appendCount != nil {
		rec.Fill(p.appendCount, 0, 4, uint32(p.n))
	}
	embed, err := r.ks.get(r.w.tokenEmbd.embedKernel(), nil)
	if err != nil {
		return err
	}
	r.dispatchAll(rec, r.w.tokenEmbd.embedOps(embed, p.tok, p.x, p.n))
	routed := 0 // routed layers so far: the trace's index
	for l := range p.layers {
		before := rec.Stats()
		if p.layers[l].w.router != nil {
			err = r.recordRouted(rec, p, l, routed)
			routed++
		} else {
			var ops []op
			ops, err = r.blockOps(p, l, p.rows, routedBlock{})
			r.dispatchAll(rec, ops)
		}
		if err != nil {
			return fmt.Errorf("layer %d: %w", l, err)
		}
		after := rec.Stats()
		p.blockStats = append(p.blockStats, vk.Stats{Dispatches: after.Dispatches - before.Dispatches, Barriers: after.Barriers - before.Barriers})
	}
	if err := r.recordHead(rec, p); err != nil {
		return err
	}
	return r.endHandoff(rec)
}

// recordRouted records routed layer l, the j-th routed one, in pass p: the
// selector, then the block and mod_residual on the selected rows. With
// Options.Trace each row's r, p and decision are copied to the trace.
func (r *Runner) recordRouted(rec *vk.Recorder, p *frame, l, j int) error {
	c := r.c
	u := p.layers[l].routed
	rb := r.routedBlockOf(u.mlpOut)
	residual, err := r.ks.get(shaders.ModResidualVariant(c.Gate, c.GateTarget), nil)
	if err != nil {
		return err
	}
	if !p.step && !r.ks.prof.CPU {
		// The block's matmuls on a tile fit to the rows it takes
		// (narrowSpec): top-k's count, or the capacity's share of the rows
		// that causal routing expects. Only the speed rides on the guess:
		// a causal count over it takes more token tiles (the grid is the
		// table's, by count), under it less padding than the chunk's tile.
		bs, err := r.narrowBlocks(max(1, c.TopKCount(p.n)))
		if err != nil {
			return err
		}
		chunk := p.layers[l].mm
		p.layers[l].mm = bs[l]
		defer func() { p.layers[l].mm = chunk }()
	}
	d, nu := uint32(c.NEmbd), uint32(p.n)
	resBinds := []vk.Bind{rw(u.x, 0, 0), rd(u.xs, 0, 0), rd(u.idx, 0, 0), rd(u.score, 0, 0)}
	if rb.mlpOut != nil {
		resBinds = append(resBinds, rd(rb.mlpOut, 0, 0))
	}
	// blockOn is the block and the gated residual on k selected rows of
	// at most maxRows.
	blockOn := func(k, maxRows int) ([]op, error) {
		br := blockRows{x: u.xs, n: k, maxRows: maxRows, pos: u.pos, ropePos: u.ropePos, rows: u.count, ent: u.ent, toff: u.toff}
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
	if !routesRows(p) { // route_rows writes the trace itself
		r.recordTraceRows(rec, p, j, u)
	}
	if r.conditional { // count is the predicate: a block no row entered is discarded whole
		rec.BeginConditional(u.count, 0)
	}
	for i, o := range block {
		rec.DispatchIndirect(o.k.k, o.push, args, 12*uint64(i), o.binds...)
		r.timestampOp(rec, o, false)
	}
	if r.conditional {
		rec.EndConditional()
	}
	return nil
}

// tableKey names a routed block's dispatch-size table: the pass's shape
// and the sizes themselves, since two routed layers' blocks differ where
// their matrices' types do (a llama.cpp mix: Q6_K ffn_down in the last
// layers only, attn_v apart from attn_q and attn_k), and a layer read
// through another's table dispatches its kernels over the wrong
// workgroups.
type tableKey struct {
	step  bool
	n     int
	paged bool   // a step of many sequences (its attention differs)
	sizes string // the table's bytes
}

// routedTable is the dispatch sizes of a routed block (block: its m
// dispatches for the pass's n rows) for each count the selector may find:
// for the decode step, 1 (route_decode writes zero workgroups for 0); for
// a batch of n, 0..n (compact_positive_table picks). Routed layers whose blocks
// dispatch alike share one.
func (r *Runner) routedTable(p *frame, block []op, blockOn func(k, maxRows int) ([]op, error)) (*vk.Buffer, error) {
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
	raw := u32Bytes(sizes)
	key := tableKey{p.step, p.n, p.paged != nil, string(raw)}
	if t, ok := r.tables[key]; ok {
		return t, nil
	}
	t, err := r.upload(fmt.Sprintf("routed block dispatch sizes (%d rows)", p.n), raw)
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

// recordTraceRows copies the j-th routed layer's scores and decisions of
// the pass's n rows to its trace buffer (Options.Trace): [nRouted][3][rows]
// of r f32, p f32, selected u32, rows 1 for the decode step and UBatch for
// a batch (readTrace).
func (r *Runner) recordTraceRows(rec *vk.Recorder, p *frame, j int, u routedBufs) {
	buf, rows := p.trace, p.traceRows
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

// readTrace appends the routing of the n rows of the pass just run, in
// its trace buffer buf of rows (frame.trace), to r.trace (with
// Options.Trace; a no-op otherwise).
func (r *Runner) readTrace(buf *vk.Buffer, rows, n int) error {
	if r.trace == nil || buf == nil {
		return nil
	}
	raw := make([]byte, 12*rows*len(r.c.RoutedLayers()))
	if err := buf.Download(raw, 0); err != nil {
		return err
	}
	r.appendTrace(raw, rows, n)
	return nil
}

// appendTrace appends to r.trace the routing of the first n rows of raw,
// a trace buffer's bytes of rows ([nRouted][3][rows], frame.trace).
func (r *Runner) appendTrace(raw []byte, rows, n int) {
	routed := r.c.RoutedLayers()
	word := func(j, field, i int) uint32 {
		return binary.LittleEndian.Uint32(raw[4*((3*j+field)*rows+i):])
	}
	field := 0 // the score that decided
	if r.routing == mod.RoutingPredictor {
		field = 1
	}
	for i := 0; i < n; i++ {
		routes := make([]mod.Route, len(routed))
		for j, l := range routed {
			routes[j] = mod.Route{Layer: l, Score: math.Float32frombits(word(j, field, i)), Selected: word(j, 2, i) != 0}
		}
		r.trace = append(r.trace, routes)
	}
}

// dispatch records o, then its timestamp when profiling.
func (r *Runner) dispatch(rec *vk.Recorder, o op) {
	o = r.handoffOp(rec, o)
	o.record(rec)
	r.timestampOp(rec, o, true)
}

// dispatchAll dispatches ops in order.
func (r *Runner) dispatchAll(rec *vk.Recorder, ops []op) {
	for _, o := range ops {
		r.dispatch(rec, o)
	}
}
