package vulkan

import (
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
)

// A pass's frame (forward.go): every buffer one pass of the forward
// recorder reads and writes, and each layer's weights as its kernels bind
// them, chosen once as the pass is recorded: for the decode step from the
// runner's step buffers (step.go), for a batch from its prefill scratch
// (prefill.go). The block's stages (block.go) and the routed layers'
// selectors (select.go) name the frame's buffers, and branch on p.step
// only where the kernel differs (matvec or matmul, decode or batch
// attention, route_decode or compact_positive and top-k).

// frame is pass p's buffers and weights.
type frame struct {
	pass
	// blockStats are what recording each layer added to the recorder's
	// counts (recordFrame; the decode step's StepCounts).
	blockStats []vk.Stats
	tok        *vk.Buffer // [n] u32 the rows' token ids
	rows       blockRows  // the dense layers' block rows: all n of x
	// appendCount, when not nil, is set to n before the blocks run: a
	// batch's dense layers append that many rows to their caches (the
	// decode step's one row is counted by decode_kv).
	appendCount *vk.Buffer

	// The block's activations, [n] rows of each.
	x   *vk.Buffer // [nEmbd] the residual stream
	xs  *vk.Buffer // [nEmbd] a routed layer's selected rows, gathered
	xn  *vk.Buffer // [nEmbd] a norm's output
	att *vk.Buffer // [qDim] attention's output
	h   *vk.Buffer // [nFF] SwiGLU's output
	ob  *vk.Buffer // [nEmbd] a batch's matmul output before its residual add
	// last is where the head's matvec reads the last row: x itself in the
	// decode step, the step's x in a batch (recordHead copies the row
	// there); logits [nVocab] are that row's.
	last, logits *vk.Buffer
	// The decode step's: the stacked matvecs' outputs, flash-decoding's
	// partial results and decode_attend's counters.
	qkv, gu, part, done *vk.Buffer
	// A batch's: q, k, v and their RoPE'd copies, gate and up, and key-tiled
	// attention's partial results.
	q, qr, k, kr, v, gate, up *vk.Buffer
	partO, partML             *vk.Buffer

	layers []layerFrame // [nLayer]
	// trace is where the routed layers' scores and decisions of the rows
	// go ([nRouted][3][traceRows], recordTraceRows); nil without
	// Options.Trace.
	trace     *vk.Buffer
	traceRows int
	// paged, in a step of many sequences (stepper.go), is where their keys
	// and values live and how each row finds its own; nil otherwise.
	paged *pagedFrame
	// vec: a batch of a few rows (a step of a few sequences, a short
	// prompt's chunk) runs its products as matvecs over its rows
	// (stepvec.go), whose stacked q|k|v go to vqkv first
	// ([vecRows][the stack's rows]).
	vec  bool
	vqkv *vk.Buffer
	// vxq is where dot_x quantizes x for matvec_dot's PREQ variants on the
	// matvec path (DotXBytes of [vecRows][the widest matrix's columns]);
	// nil where the profile takes no matvec_dot.
	vxq *vk.Buffer
	// draw, when its buffer is set, is where the head's argmax reads its
	// draw parameters (a chained step's slot); else the runner's drawHost.
	draw vk.Bind
}

// layerFrame is layer l of a pass: its weights, bound for the pass's
// kernels, and a routed layer's buffers.
type layerFrame struct {
	w      *block     // norms and the decode step's matvec views (weights.go)
	mm     batchBlock // a batch's matmul views (batch.go); zero in the decode step
	routed routedBufs // zero for a dense layer
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
	// A batch's: every row's position (the gather's source), compact_mask's
	// indirect arguments and top-k's sort keys over many rows.
	rowPos, args, sortKeys *vk.Buffer
	// A step's (pagedFrame): the selected rows' entries in the layer's
	// tables and their tables' offsets.
	ent, toff *vk.Buffer
}

// frameOf is pass p's frame.
func (r *Runner) frameOf(p pass) *frame {
	var f *frame
	if p.step {
		f = r.stepFrame(p)
	} else {
		f = r.batchFrame(p)
	}
	for l := range f.layers {
		f.layers[l].w = &r.w.blocks[l]
	}
	return f
}

// stepFrame is the decode step's frame: one row in the runner's step
// buffers.
func (r *Runner) stepFrame(p pass) *frame {
	a := &r.act
	f := &frame{pass: p, tok: r.tok, rows: blockRows{x: a.x, n: 1, maxRows: 1, pos: r.tokPos, ropePos: r.tokPos},
		x: a.x, xs: a.xs, xn: a.xn, att: a.att, h: a.h, last: a.x, logits: a.logits, qkv: a.qkv, gu: a.gu, part: a.part, done: a.done,
		trace: r.traceHost, traceRows: 1}
	f.layers = make([]layerFrame, len(r.w.blocks))
	for l := range r.routes {
		if ro := &r.routes[l]; ro.count != nil {
			// One row: its decision is the count.
			f.layers[l].routed = routedBufs{x: a.x, xs: a.xs, score: ro.score, pred: ro.pred, hidden: ro.hidden, idx: ro.idx,
				count: ro.count, selected: ro.count, pos: r.tokPos, ropePos: r.tokPos, mlpOut: a.mo}
		}
	}
	return f
}

// batchFrame is a batch's frame: n rows in the prefill scratch.
func (r *Runner) batchFrame(p pass) *frame {
	pf := r.pf
	a := &pf.a
	f := &frame{pass: p, tok: pf.tok, rows: blockRows{x: a.x, n: p.n, maxRows: p.n, pos: a.pos, ropePos: a.pos, rows: pf.rows},
		appendCount: pf.rows, x: a.x, xs: a.xs, xn: a.xn, att: a.att, h: a.h, ob: a.ob, last: r.act.x, logits: r.act.logits,
		q: a.q, qr: a.qr, k: a.k, kr: a.kr, v: a.v, gate: a.gate, up: a.up, partO: a.partO, partML: a.partML,
		trace: pf.trace, traceRows: pf.ub}
	f.layers = make([]layerFrame, len(r.w.blocks))
	ropePos := pf.psel
	if r.c.Positions == mod.PositionsCompact {
		ropePos = pf.prope
	}
	for l := range f.layers {
		f.layers[l].mm = pf.blocks[l]
		if r.w.blocks[l].router != nil {
			f.layers[l].routed = routedBufs{x: a.x, xs: a.xs, score: a.r, pred: pf.pred, hidden: pf.hidden, idx: a.keys,
				count: a.count, selected: a.mask, pos: pf.psel, ropePos: ropePos, mlpOut: a.ob,
				rowPos: a.pos, args: a.args, sortKeys: pf.sortKeys}
		}
	}
	return f
}
