package vulkan

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// Generate-mode batched prefill (DESIGN.md §6, "Prefill and eval are one
// batched graph"): a Feed of more than one token goes through in chunks of
// up to UBatch tokens, each chunk one submit of a recording made once per
// chunk length. Per chunk of n tokens at positions pos..pos+n-1:
//
//	embed                                      tok -> x [n]
//	dense layer: the block on x, n rows at the chunk's positions
//	routed layer: router_score x -> r (with the predictor, router_score's
//	              SiLU hidden layer and score -> p); compact_positive
//	              (r > 0 or p > 0, on the bits as mod.Selects) -> idx,
//	              count, args; gather x[idx] -> xs; prefill_pos -> the
//	              selected rows' positions (and compact ones, for RoPE,
//	              with mod.PositionsCompact); prefill_args -> the block's
//	              indirect arguments for the count; the block on xs;
//	              mod_residual x[idx] += g(r) (xs - x[idx]) (or the file's
//	              gate target)
//	copy the last row of x to the decode step's x; the decode step's
//	output (recordLogits)                      -> logits, best
//
// The block on the rows of a chunk (batchBlockOps, shared with eval mode):
// rmsnorm, matmul q, k, v (reading the decode step's upload), rope at each
// row's position, prefill_kv appends the rows' k and v to the layer's cache
// at counts[layer] and prefill_count adds them to the count, attention of
// the rows over the whole cache in key tiles (batch_attention.go: the
// earlier entries plus the chunk's own, causal by original position),
// matmul o, add, rmsnorm, matmul gate and up, swiglu, matmul down, add.
//
// A routed layer's selected count lives on the GPU only: its block is
// recorded as indirect dispatches whose sizes prefill_args picks for the
// count from a table made at recording (recordPrefillRoutedBlock), so the
// block costs what its selected rows cost. With Options.Trace each row's
// scores and decision are copied back (readPrefillTrace). The caches and
// counts are the decode step's, so decoding continues after a prefill
// exactly as after token-by-token feeding.

// DefaultUBatch is the chunk length of a batched prefill when
// Options.UBatch is 0.
const DefaultUBatch = 512

// prefill is the batched prefill's weights view, scratch and recordings.
type prefill struct {
	ub     int
	blocks []batchBlock
	a      batchActs  // [ub] rows; a.pos is the chunk's positions (host-visible)
	tok    *vk.Buffer // [ub] u32 token ids, host-visible
	rows   *vk.Buffer // [1] u32: n, filled by each recording (the dense layers' append count)
	pred   *vk.Buffer // [ub] f32 predictor scores
	psel   *vk.Buffer // [ub] u32 positions of a routed layer's selected rows
	prope  *vk.Buffer // [ub] u32 their compact positions (mod.PositionsCompact), at which RoPE turns them
	// sortKeys are top-k's sort keys in eval mode over more rows than one
	// workgroup sorts (TopkPasses); nil otherwise.
	sortKeys *vk.Buffer
	hidden   *vk.Buffer // [ub][predHidden] f32 the predictor's hidden layer (predictor routing)
	trace    *vk.Buffer // [nRouted][3][ub]: r f32, p f32, selected u32 of each row (Options.Trace)
	recs     map[prefillKey]*vk.Recorder
	output   batchMat              // the output matrix bound for matmul (every row's logits)
	heads    map[rowsHead]headBufs // every row's head (Score, Losses), made at its first use
	tables   map[int]*vk.Buffer    // by chunk length n: a routed block's dispatch sizes for each count 0..n
	args     map[int]*vk.Buffer    // by layer: a routed block's indirect arguments
}

// buildPrefill binds the weights for matmul and makes the chunk scratch.
func (r *Runner) buildPrefill(m *mod.Model, ub int) error {
	c := r.c
	if ub <= 0 {
		ub = DefaultUBatch
	}
	ub = min(ub, r.ctx)
	pf := &prefill{ub: ub, recs: map[prefillKey]*vk.Recorder{}, heads: map[rowsHead]headBufs{}, tables: map[int]*vk.Buffer{}, args: map[int]*vk.Buffer{}}
	ks := r.ks
	pf.blocks = make([]batchBlock, len(r.w.blocks))
	for l := range r.w.blocks {
		b, mb := &r.w.blocks[l], &m.Weights.Blocks[l]
		eb := &pf.blocks[l]
		qkv, err := stackParts(ks, b.qkv, &mb.Q, &mb.K, &mb.V)
		if err != nil {
			return err
		}
		gu, err := stackParts(ks, b.gateUp, &mb.Gate, &mb.Up)
		if err != nil {
			return err
		}
		eb.q, eb.k, eb.v, eb.gate, eb.up = qkv[0], qkv[1], qkv[2], gu[0], gu[1]
		if eb.o, err = matRows(ks, b.o, 0, b.o.rows); err != nil {
			return err
		}
		if eb.down, err = matRows(ks, b.down, 0, b.down.rows); err != nil {
			return err
		}
	}
	var err error
	if pf.output, err = matRows(ks, r.w.output, 0, r.w.output.rows); err != nil {
		return err
	}
	f32 := func(n int) uint64 { return 4 * uint64(n) }
	al := &allocator{r: r}
	must := al.buf
	dev := vk.DeviceLocal
	pf.a = r.newBatchActs(must, ub)
	a := &pf.a
	a.pos, pf.tok = must(f32(ub), vk.HostVisible), must(f32(ub), vk.HostVisible)
	a.r, a.mask, a.count, a.args = must(f32(ub), dev), must(f32(ub), dev), must(4, dev), must(12, dev)
	a.keys = must(f32(ub), dev) // the selected rows of the chunk (compact_positive's or topk's idx)
	if r.evalMode && ub > shaders.TopkLocal {
		pf.sortKeys = must(8*uint64(shaders.TopkKeys(uint32(ub))), dev) // top-k's multi-pass sort
	}
	pf.rows, pf.pred, pf.psel, pf.prope = must(4, dev), must(f32(ub), dev), must(f32(ub), dev), must(f32(ub), dev)
	if r.routing == mod.RoutingPredictor && c.PredictorHidden > 0 {
		pf.hidden = must(f32(ub*c.PredictorHidden), dev)
	}
	if r.trace != nil {
		pf.trace = must(12*uint64(ub*len(c.RoutedLayers())), vk.HostVisible)
	}
	a.partO, a.partML = r.batchAttentionParts(must, ub, r.ctx)
	if al.err != nil {
		return al.err
	}
	r.pf = pf
	return nil
}

// prefillKey is a chunk recording's length and head.
type prefillKey struct {
	n    int
	head rowsHead
}

// runPrefill feeds tokens (already checked) in chunks of up to ub, each
// ending with head. For headLogits and headLoss each chunk's rows' logits
// or losses (of the token after each row, the first of the next chunk for
// the last row) are passed to each in turn.
func (r *Runner) runPrefill(tokens []int32, head rowsHead, each func(out []float32) error) error {
	pf := r.pf
	hb := pf.heads[head]
	for len(tokens) > 0 {
		n := min(len(tokens), pf.ub)
		key := prefillKey{n, head}
		rec, ok := pf.recs[key]
		if !ok {
			var err error
			if rec, err = r.recordPrefill(n, head); err != nil {
				if rec != nil {
					rec.Close()
				}
				return fmt.Errorf("vulkan: prefill of %d tokens: %w", n, err)
			}
			pf.recs[key] = rec
		}
		ids, pos := make([]uint32, n), make([]uint32, n)
		for i, t := range tokens[:n] {
			ids[i], pos[i] = uint32(t), uint32(r.pos+i)
		}
		if err := pf.tok.Upload(u32Bytes(ids), 0); err != nil {
			return err
		}
		if err := pf.a.pos.Upload(u32Bytes(pos), 0); err != nil {
			return err
		}
		if head == headLoss {
			next := int32(0)
			if n < len(tokens) {
				next = tokens[n]
			}
			if err := hb.uploadTargets(tokens[:n], next); err != nil {
				return err
			}
		}
		if err := r.dev.Run(rec); err != nil {
			return fmt.Errorf("vulkan: prefill of %d tokens at position %d: %w", n, r.pos, err)
		}
		r.addTimings(rec)
		if err := r.readPrefillTrace(n); err != nil {
			return fmt.Errorf("vulkan: routing of positions %d..%d: %w", r.pos, r.pos+n-1, err)
		}
		r.pos += n
		tokens = tokens[n:]
		var out []float32
		var err error
		switch head {
		case headLogits:
			out, err = downloadF32(hb.host, n*r.c.NVocab)
		case headLoss:
			out, err = downloadF32(hb.loss, n)
		default:
			continue
		}
		if err != nil {
			return err
		}
		if err := each(out); err != nil {
			return err
		}
	}
	return nil
}

// recordPrefill records a chunk of n tokens, ending with head: the last
// row's logits (as a decode step), or every row's logits or losses
// (pf.heads[head]).
func (r *Runner) recordPrefill(n int, head rowsHead) (*vk.Recorder, error) {
	c := r.c
	pf := r.pf
	a := &pf.a
	d := uint32(c.NEmbd)
	dB := 4 * uint64(d)
	rec := r.dev.NewRecorder()
	rec.Fill(pf.rows, 0, 4, uint32(n))
	embed, err := r.ks.get(r.w.tokenEmbd.embedKernel(), nil)
	if err != nil {
		return rec, err
	}
	for _, o := range r.w.tokenEmbd.embedOps(embed, pf.tok, a.x, n) {
		r.dispatch(rec, o)
	}
	routed := 0 // routed layers so far: the trace's index
	for l := range r.w.blocks {
		if r.w.blocks[l].router != nil {
			err = r.recordPrefillRouted(rec, l, n, routed)
			routed++
		} else {
			err = r.recordPrefillBlock(rec, l, a.x, n, a.pos, pf.rows)
		}
		if err != nil {
			return rec, fmt.Errorf("layer %d: %w", l, err)
		}
	}
	if head != headLast {
		return rec, r.recordRowsHead(rec, head, pf.output, a.x, a.xn, n, pf.heads[head])
	}
	// The last row's logits, as the decode step computes them.
	rec.Copy(a.x, r.act.x, uint64(n-1)*dB, 0, dB)
	r.timestamp(rec, "copy")
	if err := r.recordLogits(rec); err != nil {
		return rec, err
	}
	return rec, rec.Err()
}

// recordPrefillRouted records routed layer l, the j-th routed one, on a
// chunk of n tokens: causal routing (r > 0, or p > 0 with the predictor, on
// the scores' bits as mod.Selects) selects rows on the GPU, the block runs
// on them, mod_residual adds g(r) times its output (or applies the file's
// gate target). With Options.Trace each row's r, p and selection are copied
// to the trace buffer.
func (r *Runner) recordPrefillRouted(rec *vk.Recorder, l, n, j int) error {
	c := r.c
	pf := r.pf
	a := &pf.a
	rt := r.w.blocks[l].router
	nu, d := uint32(n), uint32(c.NEmbd)
	var kerr error
	get := func(name string, spec []uint32) *kernel {
		k, err := r.ks.get(name, spec)
		if err != nil && kerr == nil {
			kerr = err
		}
		return k
	}
	hasBias := uint32(0)
	if rt.hasBias {
		hasBias = 1
	}
	sd := r.ks.scoreDevice()
	score := func(n, rows, cols uint32) (*kernel, [3]uint32) {
		plan := shaders.PlanScore(sd, n, rows, cols, !sd.CPU)
		return get(plan.Variant, plan.Spec), plan.Groups
	}
	idx := a.keys
	k, groups := score(nu, 1, d)
	ops := []op{newOp(k, shaders.RouterPush{N: nu, Rows: 1, Cols: d, HasBias: hasBias}, groups,
		rd(rt.w, 0, 0), rd(rt.bias, 0, 0), rd(a.x, 0, 0), wr(a.r, 0, 0))}
	decide := a.r
	switch {
	case r.routing == mod.RoutingPredictor && rt.pred != nil:
		// A linear predictor: p = w . x + b, a score as the router's.
		ops = append(ops, newOp(k, shaders.RouterPush{N: nu, Rows: 1, Cols: d, HasBias: 1}, groups,
			rd(rt.pred, 0, 0), rd(rt.predBias, 0, 0), rd(a.x, 0, 0), wr(pf.pred, 0, 0)))
		decide = pf.pred // p > 0; the multiplier is still g(r)
	case r.routing == mod.RoutingPredictor:
		// p = w2 . SiLU(W1 x), no bias: the hidden layer, then the score.
		k, groups := score(nu, rt.predHidden, d)
		ops = append(ops, newOp(k, shaders.RouterPush{N: nu, Rows: rt.predHidden, Cols: d, Act: shaders.RouterActSiLU}, groups,
			rd(rt.predUp, 0, 0), rd(rt.predDown, 0, 0), rd(a.x, 0, 0), wr(pf.hidden, 0, 0)))
		k, groups = score(nu, 1, rt.predHidden)
		ops = append(ops, newOp(k, shaders.RouterPush{N: nu, Rows: 1, Cols: rt.predHidden}, groups,
			rd(rt.predDown, 0, 0), rd(rt.predDown, 0, 0), rd(pf.hidden, 0, 0), wr(pf.pred, 0, 0)))
		decide = pf.pred
	}
	// The selection: causal routing's compact_positive (r > 0 or p > 0),
	// or in eval mode top-k of r (k fixed by the chunk's length).
	topk := r.routing == mod.RoutingTopK
	take := nu // the rows that go through: at most n
	if topk {
		if take = uint32(c.TopKCount(n)); take == 0 { // a floor(c·n) of 0 (mod.RoundingFloor): no row goes through
			if kerr != nil {
				return kerr
			}
			for _, o := range ops {
				r.dispatch(rec, o)
			}
			if pf.trace != nil {
				rec.Fill(a.mask, 0, 4*uint64(n), 0)
				r.recordPrefillTrace(rec, n, j)
			}
			return nil
		}
		for _, pass := range shaders.TopkPasses(nu, take) {
			var binds []vk.Bind
			pass.Push.Cols = d // the kernel reading r poisons x's row of a non-finite one (mod.PoisonRows)
			switch pass.Variant {
			case "topk":
				binds = []vk.Bind{rd(a.r, 0, 0), wr(a.mask, 0, 0), wr(idx, 0, 0), rw(a.x, 0, 0)}
			case "topk_sort":
				binds = []vk.Bind{rd(a.r, 0, 0), wr(pf.sortKeys, 0, 0), rw(a.x, 0, 0)}
			case "topk_merge_global", "topk_merge_local":
				binds = []vk.Bind{rw(pf.sortKeys, 0, 0)}
			case "topk_select":
				binds = []vk.Bind{rd(pf.sortKeys, 0, 0), wr(a.mask, 0, 0)}
			}
			ops = append(ops, newOp(get(pass.Variant, nil), pass.Push, pass.Groups, binds...))
		}
		if nu > shaders.TopkLocal { // the multi-pass plan leaves a mask: compact it
			ops = append(ops, newOp(get("compact_mask", nil), shaders.CompactPush{N: nu, RowsPerGroup: shaders.RoutingRowsPerGroup}, [3]uint32{1, 1, 1},
				rd(a.mask, 0, 0), wr(idx, 0, 0), wr(a.count, 0, 0), wr(a.args, 0, 0)))
		}
	} else {
		ops = append(ops, newOp(get("compact_positive", nil), shaders.CompactPush{N: nu, RowsPerGroup: shaders.RoutingRowsPerGroup, Cols: d}, [3]uint32{1, 1, 1},
			rd(decide, 0, 0), wr(idx, 0, 0), wr(a.count, 0, 0), wr(a.args, 0, 0), wr(a.mask, 0, 0), rw(a.x, 0, 0)))
	}
	rb := r.routedBlockOf(a.ob)
	posOp := newOp(get("prefill_pos", nil), shaders.PrefillPush{N: nu}, shaders.Groups((nu+63)/64),
		rd(idx, 0, 0), rd(a.count, 0, 0), rd(a.pos, 0, 0), wr(pf.psel, 0, 0))
	if rb.compactPos { // and the compact positions, from the layer's count before the chunk
		posOp = newOp(get("prefill_pos_compact", nil), shaders.PrefillPush{N: nu, Layer: uint32(l)}, shaders.Groups((nu+63)/64),
			rd(idx, 0, 0), rd(a.count, 0, 0), rd(a.pos, 0, 0), wr(pf.psel, 0, 0), rd(r.counts, 0, 0), wr(pf.prope, 0, 0))
	}
	gather := newOp(get("gather", nil), shaders.GatherPush{NEmbd: d}, shaders.Groups(take),
		rd(idx, 0, 0), rd(a.count, 0, 0), rd(a.x, 0, 0), wr(a.xs, 0, 0))
	residual := get(shaders.ModResidualVariant(c.Gate, c.GateTarget), nil)
	if kerr != nil {
		return kerr
	}
	for _, o := range ops {
		r.dispatch(rec, o)
	}
	if topk && nu <= shaders.TopkLocal { // topk wrote idx and mask; the count and arguments are k
		rec.Fill(a.count, 0, 4, take)
		rec.Fill(a.args, 0, 4, take)
		rec.Fill(a.args, 4, 8, 1)
	}
	r.dispatch(rec, gather)
	r.dispatch(rec, posOp)
	if pf.trace != nil {
		r.recordPrefillTrace(rec, n, j)
	}
	binds := []vk.Bind{rw(a.x, 0, 0), rd(a.xs, 0, 0), rd(idx, 0, 0), rd(a.r, 0, 0)}
	if rb.mlpOut != nil {
		binds = append(binds, rd(rb.mlpOut, 0, 0))
	}
	if topk { // take rows, known now: the block and the residual dispatched directly
		blockOps, err := r.prefillBlockOps(l, a.xs, int(take), int(take), pf.psel, a.count, rb)
		if err != nil {
			return err
		}
		for _, o := range blockOps {
			r.dispatch(rec, o)
		}
		r.dispatch(rec, newOp(residual, shaders.ModResidualPush{Cols: d, N: nu, K: take}, shaders.Groups(take), binds...))
		return nil
	}
	if err := r.recordPrefillRoutedBlock(rec, l, n, rb); err != nil {
		return err
	}
	// One workgroup per selected row: compact_positive's arguments.
	rec.DispatchIndirect(residual.k, vk.MustPackPush(shaders.ModResidualPush{Cols: d, N: nu, K: nu}), a.args, 0, binds...)
	r.timestamp(rec, residual.v.Name)
	return nil
}

// recordPrefillTrace copies the j-th routed layer's scores and decisions
// of the chunk's n rows to the trace buffer (Options.Trace).
func (r *Runner) recordPrefillTrace(rec *vk.Recorder, n, j int) {
	pf := r.pf
	a := &pf.a
	rB, off := 4*uint64(n), 12*uint64(pf.ub)*uint64(j)
	rec.Copy(a.r, pf.trace, 0, off, rB)
	if r.routing == mod.RoutingPredictor {
		rec.Copy(pf.pred, pf.trace, 0, off+4*uint64(pf.ub), rB)
	}
	rec.Copy(a.mask, pf.trace, 0, off+8*uint64(pf.ub), rB)
	r.timestamp(rec, "copy")
}

// readPrefillTrace appends the routing of the n rows of the chunk just run
// to r.trace (with Options.Trace; a no-op otherwise).
func (r *Runner) readPrefillTrace(n int) error {
	if r.trace == nil {
		return nil
	}
	ub := r.pf.ub
	routed := r.c.RoutedLayers()
	raw := make([]byte, 12*ub*len(routed))
	if err := r.pf.trace.Download(raw, 0); err != nil {
		return err
	}
	word := func(j, field, i int) uint32 {
		return binary.LittleEndian.Uint32(raw[4*((3*j+field)*ub+i):])
	}
	for i := 0; i < n; i++ {
		routes := make([]mod.Route, len(routed))
		for j, l := range routed {
			field := 0 // the score that decided
			if r.routing == mod.RoutingPredictor {
				field = 1
			}
			routes[j] = mod.Route{Layer: l, Score: math.Float32frombits(word(j, field, i)), Selected: word(j, 2, i) != 0}
		}
		r.trace = append(r.trace, routes)
	}
	return nil
}

// recordPrefillBlock records Llama block l on the first n rows of xb, in
// place, at the positions in pos [n] u32; the first rows[0] of them are
// real (the rest are computed and ignored), and those are appended to the
// layer's cache before attention reads it.
func (r *Runner) recordPrefillBlock(rec *vk.Recorder, l int, xb *vk.Buffer, n int, pos, rows *vk.Buffer) error {
	ops, err := r.prefillBlockOps(l, xb, n, n, pos, rows, routedBlock{})
	if err != nil {
		return err
	}
	for _, o := range ops {
		r.dispatch(rec, o)
	}
	return nil
}

// prefillBlockOps are recordPrefillBlock's dispatches: the batched block,
// its k and v appended to the layer's cache (the first rows[0] of the n
// rows) before attention reads the cache. A routed block of the public
// layouts (rb) turns its rows at compact positions (pf.prope) and leaves
// its MLP output apart in a.ob for mod_residual.
func (r *Runner) prefillBlockOps(l int, xb *vk.Buffer, n, maxRows int, pos, rows *vk.Buffer, rb routedBlock) ([]op, error) {
	c := r.c
	a := &r.pf.a
	nu := uint32(n)
	ropePos := pos
	if rb.compactPos {
		ropePos = r.pf.prope
	}
	if r.evalMode { // no cache: attention among the n rows, causal by position
		return r.batchBlockOps(l, &r.pf.blocks[l], a, xb, n, pos, ropePos, nil, rb.mlpOut == nil, attentionArgs{n: nu, entries: nu, kv: shaders.KVF32,
			q: a.qr, k: a.kr, v: a.v, kPos: pos, qPos: pos, partO: a.partO, partML: a.partML, out: a.att})
	}
	kc := r.cache[l]
	kv, err := r.ks.get(shaders.PrefillKVVariant(shaders.KVTypeName(r.kv)), nil)
	if err != nil {
		return nil, err
	}
	count, err := r.ks.get("prefill_count", nil)
	if err != nil {
		return nil, err
	}
	push := shaders.PrefillPush{N: nu, KVDim: uint32(c.KVDim()), Layer: uint32(l), MaxEntries: uint32(r.ctx)}
	appendKV := []op{
		newOp(kv, push, shaders.Groups(nu),
			rd(a.kr, 0, 0), rd(a.v, 0, 0), rd(pos, 0, 0), rd(rows, 0, 0), rd(r.counts, 0, 0),
			wr(kc.k, 0, 0), wr(kc.v, 0, 0), wr(kc.pos, 0, 0)),
		newOp(count, push, [3]uint32{1, 1, 1}, rd(rows, 0, 0), rw(r.counts, 0, 0)),
	}
	return r.batchBlockOps(l, &r.pf.blocks[l], a, xb, n, pos, ropePos, appendKV, rb.mlpOut == nil, attentionArgs{n: nu, maxRows: uint32(maxRows), entries: uint32(r.ctx), layer: uint32(l),
		counts: r.counts, kv: r.kv, q: a.qr, k: kc.k, v: kc.v, kPos: kc.pos, qPos: pos, partO: a.partO, partML: a.partML, out: a.att})
}

// recordPrefillRoutedBlock records routed layer l's block on the selected
// rows of a chunk of n (gathered into xs; their count in a.count on the
// GPU) as indirect dispatches: prefill_args picks each dispatch's size for
// the count from a table of the sizes for every count 0..n, made here (the
// block's dispatches for k rows, k = 0..n), so the block costs what its
// selected rows cost, not the chunk's.
func (r *Runner) recordPrefillRoutedBlock(rec *vk.Recorder, l, n int, rb routedBlock) error {
	pf := r.pf
	a := &pf.a
	ops, err := r.prefillBlockOps(l, a.xs, n, n, pf.psel, a.count, rb)
	if err != nil {
		return err
	}
	m := len(ops)
	table, ok := pf.tables[n]
	if !ok {
		sizes := make([]uint32, 0, 3*m*(n+1))
		for k := 0; k <= n; k++ {
			opsK, err := r.prefillBlockOps(l, a.xs, k, n, pf.psel, a.count, rb)
			if err != nil {
				return err
			}
			if len(opsK) != m {
				return fmt.Errorf("vulkan: a routed block of %d rows has %d dispatches, of %d rows %d", k, len(opsK), n, m)
			}
			for _, o := range opsK {
				sizes = append(sizes, o.groups[:]...)
			}
		}
		if table, err = r.upload(fmt.Sprintf("prefill dispatch sizes of %d rows", n), u32Bytes(sizes)); err != nil {
			return err
		}
		pf.tables[n] = table
	}
	args := pf.args[l]
	if args == nil || args.Size() < 12*uint64(m) {
		if args, err = r.buffer(12*uint64(m), vk.DeviceLocal); err != nil {
			return err
		}
		pf.args[l] = args
	}
	argsK, err := r.ks.get("prefill_args", nil)
	if err != nil {
		return err
	}
	r.dispatch(rec, newOp(argsK, shaders.PrefillPush{N: uint32(m), MaxEntries: uint32(n)}, shaders.Groups((uint32(m)+63)/64),
		rd(a.count, 0, 0), rd(table, 0, 0), wr(args, 0, 0)))
	for i, o := range ops {
		rec.DispatchIndirect(o.k.k, o.push, args, 12*uint64(i), o.binds...)
		r.timestamp(rec, o.k.v.Name)
	}
	return nil
}
