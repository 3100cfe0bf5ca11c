package vulkan

import (
	"fmt"

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
//	routed layer: router_score [predictor_score] x -> r [p]; compact_positive
//	              (r > 0 or p > 0) -> idx, count, args; gather x[idx] -> xs;
//	              prefill_pos -> the selected rows' positions; the block on
//	              xs; scatter x[idx] += g(r) (xs - x[idx])
//	copy the last row of x to the decode step's x; rmsnorm, matvec output,
//	argmax, copy                               -> logits, best (as the step)
//
// The block on the rows of a chunk: rmsnorm, matmul q, k, v (the eval-mode
// matmul kernels), rope at each row's position, prefill_kv appends the rows'
// k and v to the layer's cache at counts[layer] and prefill_count adds them
// to the count, attention of the rows over the whole cache in key tiles
// (attention.go: the earlier entries plus the chunk's own, causal by
// original position), matmul
// o, add, rmsnorm, matmul gate and up, swiglu, matmul down, add.
//
// A routed layer's selected count lives on the GPU only: its block is
// recorded over all n rows (the rows past the count hold stale values and
// their results are never read: every kernel is row-independent, the KV
// append and the scatter stop at the count). The caches and counts are the
// decode step's, so decoding continues after a prefill exactly as after
// token-by-token feeding.

// DefaultUBatch is the chunk length of a batched prefill when
// Options.UBatch is 0.
const DefaultUBatch = 512

// prefill is the batched prefill's weights view, scratch and recordings.
type prefill struct {
	ub     int
	kvType string // the cache entries' type: the prefill_kv variant's suffix
	blocks []evalBlock
	a      evalActs             // [ub] rows; a.pos is the chunk's positions (host-visible)
	tok    *vk.Buffer           // [ub] u32 token ids, host-visible
	rows   *vk.Buffer           // [1] u32: n, filled by each recording (the dense layers' append count)
	pred   *vk.Buffer           // [ub] f32 predictor scores
	psel   *vk.Buffer           // [ub] u32 positions of a routed layer's selected rows
	recs   map[int]*vk.Recorder // by chunk length; -n: with every row's logits (Score)
	output evalMat              // the output matrix bound for matmul (every row's logits)
	logits *vk.Buffer           // [ub][nVocab] every row's logits, made at the first Score
	host   *vk.Buffer           // [ub][nVocab] their host-visible copy
	tables map[int]*vk.Buffer   // by chunk length n: a routed block's dispatch sizes for each count 0..n
	args   map[int]*vk.Buffer   // by layer: a routed block's indirect arguments
}

// buildPrefill binds the weights for matmul and makes the chunk scratch.
func (r *Runner) buildPrefill(m *mod.Model, ub int) error {
	c := r.c
	if ub <= 0 {
		ub = DefaultUBatch
	}
	ub = min(ub, r.ctx)
	pf := &prefill{ub: ub, kvType: "f32", recs: map[int]*vk.Recorder{}, tables: map[int]*vk.Buffer{}, args: map[int]*vk.Buffer{}}
	e := &Evaluator{w: r}
	pf.blocks = make([]evalBlock, len(r.w.blocks))
	for l := range r.w.blocks {
		b, mb := &r.w.blocks[l], &m.Weights.Blocks[l]
		eb := &pf.blocks[l]
		qkv, err := e.stackParts(b.qkv, &mb.Q, &mb.K, &mb.V)
		if err != nil {
			return err
		}
		gu, err := e.stackParts(b.gateUp, &mb.Gate, &mb.Up)
		if err != nil {
			return err
		}
		eb.q, eb.k, eb.v, eb.gate, eb.up = qkv[0], qkv[1], qkv[2], gu[0], gu[1]
		if eb.o, err = e.matOf(b.o); err != nil {
			return err
		}
		if eb.down, err = e.matOf(b.down); err != nil {
			return err
		}
	}
	var err error
	if pf.output, err = e.matOf(r.w.output); err != nil {
		return err
	}
	f32 := func(n int) uint64 { return 4 * uint64(n) }
	kvd, qd := c.KVDim(), c.NHead*c.HeadDim
	must := func(size uint64, kind vk.BufferKind) *vk.Buffer {
		if err != nil {
			return nil
		}
		var b *vk.Buffer
		b, err = r.buffer(size, kind)
		return b
	}
	dev := vk.DeviceLocal
	a := &pf.a
	a.x, a.xs, a.xn, a.ob = must(f32(ub*c.NEmbd), dev), must(f32(ub*c.NEmbd), dev), must(f32(ub*c.NEmbd), dev), must(f32(ub*c.NEmbd), dev)
	a.q, a.qr, a.att = must(f32(ub*qd), dev), must(f32(ub*qd), dev), must(f32(ub*qd), dev)
	a.k, a.kr, a.v = must(f32(ub*kvd), dev), must(f32(ub*kvd), dev), must(f32(ub*kvd), dev)
	a.gate, a.up, a.h = must(f32(ub*c.NFF), dev), must(f32(ub*c.NFF), dev), must(f32(ub*c.NFF), dev)
	a.pos, pf.tok = must(f32(ub), vk.HostVisible), must(f32(ub), vk.HostVisible)
	a.r, a.mask, a.count, a.args = must(f32(ub), dev), must(f32(ub), dev), must(4, dev), must(12, dev)
	a.keys = must(f32(ub), dev) // the selected rows of the chunk (compact_positive's idx)
	pf.rows, pf.pred, pf.psel = must(4, dev), must(f32(ub), dev), must(f32(ub), dev)
	a.partO, a.partML = r.batchAttentionParts(must, ub, r.ctx)
	if err != nil {
		return err
	}
	r.pf = pf
	return nil
}

// runPrefill feeds tokens (already checked) in chunks of up to ub. With
// all, each chunk's logits of every row are passed to each in turn.
func (r *Runner) runPrefill(tokens []int32, each func(logits []float32) error) error {
	pf := r.pf
	for len(tokens) > 0 {
		n := min(len(tokens), pf.ub)
		key := n
		if each != nil {
			key = -n
		}
		rec, ok := pf.recs[key]
		if !ok {
			var err error
			if rec, err = r.recordPrefill(n, each != nil); err != nil {
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
		if err := r.dev.Run(rec); err != nil {
			return fmt.Errorf("vulkan: prefill of %d tokens at position %d: %w", n, r.pos, err)
		}
		r.addTimings(rec)
		r.pos += n
		tokens = tokens[n:]
		if each != nil {
			logits, err := downloadF32(pf.host, n*r.c.NVocab)
			if err != nil {
				return err
			}
			if err := each(logits); err != nil {
				return err
			}
		}
	}
	return nil
}

// recordPrefill records a chunk of n tokens; with all, every row's logits
// are computed too (into pf.host).
func (r *Runner) recordPrefill(n int, all bool) (*vk.Recorder, error) {
	c := r.c
	pf := r.pf
	a := &pf.a
	d := uint32(c.NEmbd)
	dB := 4 * uint64(d)
	rec := r.dev.NewRecorder()
	rec.Fill(pf.rows, 0, 4, uint32(n))
	embed, err := r.ks.get("embed_"+r.w.tokenEmbd.typ, nil)
	if err != nil {
		return rec, err
	}
	r.dispatch(rec, newOp(embed, shaders.EmbedPush{Cols: d, N: uint32(n), RowBase: 0, Rows: uint32(c.NVocab)}, shaders.Groups(uint32(n)),
		rd(r.w.tokenEmbd.buf, 0, 0), rd(pf.tok, 0, 0), wr(a.x, 0, 0)))
	for l := range r.w.blocks {
		if r.w.blocks[l].router != nil {
			err = r.recordPrefillRouted(rec, l, n)
		} else {
			err = r.recordPrefillBlock(rec, l, a.x, n, a.pos, pf.rows)
		}
		if err != nil {
			return rec, fmt.Errorf("layer %d: %w", l, err)
		}
	}
	// The last row's logits, as the decode step computes them.
	rec.Copy(a.x, r.act.x, uint64(n-1)*dB, 0, dB)
	r.timestamp(rec, "copy")
	norm, err := r.ks.row("rmsnorm", c.NEmbd)
	if err != nil {
		return rec, err
	}
	argmax, err := r.ks.row("argmax", c.NVocab)
	if err != nil {
		return rec, err
	}
	vB := 4 * uint64(c.NVocab)
	ra := &r.act
	r.dispatch(rec, newOp(norm, shaders.RMSNormPush{Cols: d, N: 1, Eps: c.RMSEps}, shaders.RowGroups(1, norm.spec),
		rd(ra.x, 0, dB), rd(r.w.outputNorm, 0, 0), wr(ra.xn, 0, dB)))
	r.dispatch(rec, r.w.output.op(ra.xn, ra.logits, 0))
	r.dispatch(rec, newOp(argmax, shaders.ArgmaxPush{Cols: uint32(c.NVocab), N: 1}, shaders.RowGroups(1, argmax.spec),
		rd(ra.logits, 0, vB), wr(r.bestHost, 0, 0)))
	rec.Copy(ra.logits, r.logitsHost, 0, 0, vB)
	r.timestamp(rec, "copy")
	if all {
		r.dispatch(rec, newOp(norm, shaders.RMSNormPush{Cols: d, N: uint32(n), Eps: c.RMSEps}, shaders.RowGroups(uint32(n), norm.spec),
			rd(a.x, 0, 0), rd(r.w.outputNorm, 0, 0), wr(a.xn, 0, 0)))
		for _, o := range pf.output.opsInPieces(r.dev.Info().Limits, a.xn, pf.logits, n) {
			r.dispatch(rec, o)
		}
		rec.Copy(pf.logits, pf.host, 0, 0, uint64(n)*vB)
		r.timestamp(rec, "copy")
	}
	return rec, rec.Err()
}

// recordPrefillRouted records routed layer l on a chunk of n tokens: causal
// routing (r > 0, or p > 0 with the predictor) selects rows on the GPU, the
// block runs on them, scatter adds g(r) times its output.
func (r *Runner) recordPrefillRouted(rec *vk.Recorder, l, n int) error {
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
	gate := shaders.ScatterGateSigmoid
	if c.Gate == mod.GateIdentity {
		gate = shaders.ScatterGateIdentity
	}
	hasBias := uint32(0)
	if rt.hasBias {
		hasBias = 1
	}
	idx := a.keys
	ops := []op{newOp(get("router_score", nil), shaders.RouterPush{N: nu, NEmbd: d, HasBias: hasBias}, shaders.Groups((nu+63)/64),
		rd(rt.w, 0, 0), rd(rt.bias, 0, 0), rd(a.x, 0, 0), wr(a.r, 0, 0))}
	decide := a.r
	if r.routing == mod.RoutingPredictor {
		ops = append(ops, newOp(get("predictor_score", nil), shaders.PredictorPush{N: nu, NEmbd: d, PredHidden: rt.predHidden},
			shaders.Groups((nu+63)/64), rd(rt.predUp, 0, 0), rd(rt.predDown, 0, 0), rd(a.x, 0, 0), wr(pf.pred, 0, 0)))
		decide = pf.pred // p > 0; the multiplier is still g(r)
	}
	ops = append(ops,
		newOp(get("compact_positive", nil), shaders.CompactPush{N: nu, RowsPerGroup: shaders.RoutingRowsPerGroup}, [3]uint32{1, 1, 1},
			rd(decide, 0, 0), wr(idx, 0, 0), wr(a.count, 0, 0), wr(a.args, 0, 0), wr(a.mask, 0, 0)),
		newOp(get("gather", nil), shaders.GatherPush{NEmbd: d}, shaders.Groups(nu),
			rd(idx, 0, 0), rd(a.count, 0, 0), rd(a.x, 0, 0), wr(a.xs, 0, 0)),
		newOp(get("prefill_pos", nil), shaders.PrefillPush{N: nu}, shaders.Groups((nu+63)/64),
			rd(idx, 0, 0), rd(a.count, 0, 0), rd(a.pos, 0, 0), wr(pf.psel, 0, 0)),
	)
	scatter := get("scatter", gate)
	if kerr != nil {
		return kerr
	}
	for _, o := range ops {
		r.dispatch(rec, o)
	}
	if err := r.recordPrefillRoutedBlock(rec, l, n); err != nil {
		return err
	}
	rec.DispatchIndirect(scatter.k, vk.MustPackPush(shaders.ScatterPush{NEmbd: d}), a.args, 0,
		rd(idx, 0, 0), rd(a.count, 0, 0), rd(a.r, 0, 0), rd(a.xs, 0, 0), rw(a.x, 0, 0))
	r.timestamp(rec, scatter.v.Name)
	return nil
}

// recordPrefillBlock records Llama block l on the first n rows of xb, in
// place, at the positions in pos [n] u32; the first rows[0] of them are
// real (the rest are computed and ignored), and those are appended to the
// layer's cache before attention reads it.
func (r *Runner) recordPrefillBlock(rec *vk.Recorder, l int, xb *vk.Buffer, n int, pos, rows *vk.Buffer) error {
	ops, err := r.prefillBlockOps(l, xb, n, pos, rows)
	if err != nil {
		return err
	}
	for _, o := range ops {
		r.dispatch(rec, o)
	}
	return nil
}

// prefillBlockOps are recordPrefillBlock's dispatches.
func (r *Runner) prefillBlockOps(l int, xb *vk.Buffer, n int, pos, rows *vk.Buffer) ([]op, error) {
	c := r.c
	pf := r.pf
	a := &pf.a
	b := &r.w.blocks[l]
	eb := &pf.blocks[l]
	kc := r.cache[l]
	nu, d := uint32(n), uint32(c.NEmbd)
	norm, err := r.ks.row("rmsnorm", c.NEmbd)
	if err != nil {
		return nil, err
	}
	var kern [5]*kernel
	for i, name := range []string{"rope", "add", "swiglu", shaders.PrefillKVVariant(pf.kvType), "prefill_count"} {
		if kern[i], err = r.ks.get(name, nil); err != nil {
			return nil, err
		}
	}
	rope, add, swiglu, kv, count := kern[0], kern[1], kern[2], kern[3], kern[4]
	normOp := func(wt *vk.Buffer) op {
		return newOp(norm, shaders.RMSNormPush{Cols: d, N: nu, Eps: c.RMSEps}, shaders.RowGroups(nu, norm.spec),
			rd(xb, 0, 0), rd(wt, 0, 0), wr(a.xn, 0, 0))
	}
	addOp := newOp(add, shaders.AddPush{N: nu * d}, shaders.Groups((nu*d+255)/256), rd(xb, 0, 0), rd(a.ob, 0, 0), wr(xb, 0, 0))
	ropeOp := func(x, out *vk.Buffer, heads int) op {
		return newOp(rope, shaders.RopePush{HeadDim: uint32(c.HeadDim), NHead: uint32(heads), N: nu}, shaders.Groups(nu),
			rd(x, 0, 0), rd(pos, 0, 0), rd(r.w.ropeFreq, 0, 0), wr(out, 0, 0))
	}
	push := shaders.PrefillPush{N: nu, KVDim: uint32(c.KVDim()), Layer: uint32(l), MaxEntries: uint32(r.ctx)}
	ops := []op{
		normOp(b.attnNorm),
		eb.q.op(a.xn, a.q, n), eb.k.op(a.xn, a.k, n), eb.v.op(a.xn, a.v, n),
		ropeOp(a.q, a.qr, c.NHead), ropeOp(a.k, a.kr, c.NKVHead),
		newOp(kv, push, shaders.Groups(nu),
			rd(a.kr, 0, 0), rd(a.v, 0, 0), rd(pos, 0, 0), rd(rows, 0, 0), rd(r.counts, 0, 0),
			wr(kc.k, 0, 0), wr(kc.v, 0, 0), wr(kc.pos, 0, 0)),
		newOp(count, push, [3]uint32{1, 1, 1}, rd(rows, 0, 0), rw(r.counts, 0, 0)),
	}
	att, err := r.batchAttentionOps(attentionArgs{n: nu, entries: uint32(r.ctx), layer: uint32(l), counts: r.counts,
		q: a.qr, k: kc.k, v: kc.v, kPos: kc.pos, qPos: pos, partO: a.partO, partML: a.partML, out: a.att})
	if err != nil {
		return nil, err
	}
	ops = append(ops, att...)
	ops = append(ops,
		eb.o.op(a.att, a.ob, n),
		addOp,
		normOp(b.ffnNorm),
		eb.gate.op(a.xn, a.gate, n), eb.up.op(a.xn, a.up, n),
		newOp(swiglu, shaders.SwiGLUPush{N: nu * uint32(c.NFF)}, shaders.ElementGroups(nu*uint32(c.NFF)),
			rd(a.gate, 0, 0), rd(a.up, 0, 0), wr(a.h, 0, 0)),
		eb.down.op(a.h, a.ob, n),
		addOp,
	)
	return ops, nil
}

// recordPrefillRoutedBlock records routed layer l's block on the selected
// rows of a chunk of n (gathered into xs; their count in a.count on the
// GPU) as indirect dispatches: prefill_args picks each dispatch's size for
// the count from a table of the sizes for every count 0..n, made here (the
// block's dispatches for k rows, k = 0..n), so the block costs what its
// selected rows cost, not the chunk's.
func (r *Runner) recordPrefillRoutedBlock(rec *vk.Recorder, l, n int) error {
	pf := r.pf
	a := &pf.a
	ops, err := r.prefillBlockOps(l, a.xs, n, pf.psel, a.count)
	if err != nil {
		return err
	}
	m := len(ops)
	table, ok := pf.tables[n]
	if !ok {
		sizes := make([]uint32, 0, 3*m*(n+1))
		for k := 0; k <= n; k++ {
			opsK, err := r.prefillBlockOps(l, a.xs, k, pf.psel, a.count)
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
