package vulkan

import (
	"math"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// The Llama block (mod's block: h = x + Attn(norm1(x)), x = h +
// MLP(norm2(h))), for every pass of the forward recorder (forward.go). It
// is one builder in five stages; each stage picks its kernels for the
// pass's shape, the only place the shapes differ:
//
//	stage                 the decode step (one row: matvec)      a batch of rows (matmul)
//	attention input       norm+q|k|v (FuseNorm), or rmsnorm,     rmsnorm, matmul q, k, v
//	                      matvec q|k|v
//	attention             decode_attend (FuseAttention: RoPE,    rope q, rope k, the cache append
//	                      append, attention), or decode_kv and   (prefill_kv, prefill_count; none in
//	                      decode attention (flash-decoding       eval mode), attention in key tiles
//	                      when the profile splits it)            (batch_attention.go)
//	output + residual     matvec o with the add (FuseAdd)        matmul o, add
//	MLP input             norm+gate|up+SwiGLU (FuseNormSwiGLU)   rmsnorm, matmul gate, up, swiglu
//	                      or norm+gate|up, swiglu
//	down + residual       matvec down with the add (FuseAdd)     matmul down, add
//
// A GPU profile's dense decode block is thus 5 dispatches. A routed block
// of the public layouts' semantics (routedBlock) turns by compact
// positions, or leaves its MLP output apart for mod_residual's gate.

// blockRows is what a block runs on: n rows of x, updated in place (up to
// maxRows: n is then a bound of a GPU-side count, and the dispatches are
// sized for it), at the positions pos [n] u32; RoPE turns them by ropePos
// (pos, or their compact positions). A batch appends the first rows[0] of
// them to the layer's cache; the decode step appends its one row (counts).
type blockRows struct {
	x            *vk.Buffer
	n, maxRows   int
	pos, ropePos *vk.Buffer
	rows         *vk.Buffer
}

// routedBlock is how a routed block differs from a dense one in the public
// MoD layouts' semantics (mod.Config's GateTarget and Positions); the zero
// value is DESIGN.md §3's block.
type routedBlock struct {
	compactPos bool       // RoPE at the token's index among those that entered the layer (mod.PositionsCompact)
	mlpOut     *vk.Buffer // not nil: the down projection writes the MLP output here, unadded (mod.GateTargetMLP)
}

// compact is rb.compactPos as the decode kernels' push constant.
func (rb routedBlock) compact() uint32 {
	if rb.compactPos {
		return 1
	}
	return 0
}

// routedBlockOf is a routed layer's routedBlock in the runner's model, with
// mlpOut the buffer for a gated MLP's output.
func (r *Runner) routedBlockOf(mlpOut *vk.Buffer) routedBlock {
	rb := routedBlock{compactPos: r.c.Positions == mod.PositionsCompact}
	if r.c.GateTarget == mod.GateTargetMLP {
		rb.mlpOut = mlpOut
	}
	return rb
}

// blockOps are the dispatches of block l of pass p on br's rows.
func (r *Runner) blockOps(p pass, l int, br blockRows, rb routedBlock) ([]op, error) {
	var ops []op
	for _, stage := range []func(pass, int, blockRows, routedBlock) ([]op, error){
		r.attentionInput, r.attention, r.attentionOutput, r.mlpInput, r.mlpOutput,
	} {
		o, err := stage(p, l, br, rb)
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
	}
	return ops, nil
}

// rmsnormOp is rmsnorm of n rows of x with weight w into out.
func (r *Runner) rmsnormOp(x, w, out *vk.Buffer, n int) (op, error) {
	c := r.c
	norm, err := r.ks.row("rmsnorm", c.NEmbd)
	if err != nil {
		return op{}, err
	}
	return newOp(norm, shaders.RMSNormPush{Cols: uint32(c.NEmbd), N: uint32(n), Eps: c.RMSEps}, shaders.RowGroups(uint32(n), norm.spec),
		rd(x, 0, 0), rd(w, 0, 0), wr(out, 0, 0)), nil
}

// normedMatvec is the decode step's stack s on rmsnorm(x) with weight w,
// into y: the norm folded into each matvec (FuseNorm), or its own dispatch
// into act.xn.
func (r *Runner) normedMatvec(s stack, x, w, y *vk.Buffer) ([]op, error) {
	if !r.ks.prof.FuseNorm {
		norm, err := r.rmsnormOp(x, w, r.act.xn, 1)
		if err != nil {
			return nil, err
		}
		return append([]op{norm}, s.ops(r.act.xn, y)...), nil
	}
	var ops []op
	for i, m := range s.mvs {
		k, err := r.ks.matvec(m.typ, shaders.FuseNorm, int(m.cols))
		if err != nil {
			return nil, err
		}
		ops = append(ops, m.fusedOps(k, shaders.FuseNorm, x, y, s.mvOff[i], w, r.c.RMSEps)...)
	}
	return ops, nil
}

// attentionInput: q, k and v of the normed rows (act.qkv; a batch's a.q,
// a.k, a.v).
func (r *Runner) attentionInput(p pass, l int, br blockRows, _ routedBlock) ([]op, error) {
	b := &r.w.blocks[l]
	if p.step {
		return r.normedMatvec(b.qkv, br.x, b.attnNorm, r.act.qkv)
	}
	a, eb := &r.pf.a, &r.pf.blocks[l]
	norm, err := r.rmsnormOp(br.x, b.attnNorm, a.xn, br.n)
	if err != nil {
		return nil, err
	}
	ops := append([]op{norm}, eb.q.ops(a.xn, a.q, br.n)...)
	ops = append(ops, eb.k.ops(a.xn, a.k, br.n)...)
	return append(ops, eb.v.ops(a.xn, a.v, br.n)...), nil
}

// attention: RoPE, the cache append and attention, into act.att (a
// batch's a.att).
func (r *Runner) attention(p pass, l int, br blockRows, rb routedBlock) ([]op, error) {
	if p.step {
		return r.decodeAttention(l, rb)
	}
	c := r.c
	a := &r.pf.a
	nu := uint32(br.n)
	rope, err := r.ks.get("rope", nil)
	if err != nil {
		return nil, err
	}
	ropeOp := func(x, out *vk.Buffer, heads int) op {
		return newOp(rope, shaders.RopePush{HeadDim: uint32(c.HeadDim), NHead: uint32(heads), N: nu}, shaders.Groups(nu),
			rd(x, 0, 0), rd(br.ropePos, 0, 0), rd(r.w.ropeFreq, 0, 0), wr(out, 0, 0))
	}
	ops := []op{ropeOp(a.q, a.qr, c.NHead), ropeOp(a.k, a.kr, c.NKVHead)}
	att := attentionArgs{n: nu, maxRows: uint32(br.maxRows), q: a.qr, qPos: br.pos, partO: a.partO, partML: a.partML, out: a.att}
	if r.evalMode { // no cache: attention among the n rows, causal by position
		att.entries, att.kv, att.k, att.v, att.kPos = nu, shaders.KVF32, a.kr, a.v, br.pos
	} else {
		kc := r.cache[l]
		kv, err := r.ks.get(shaders.PrefillKVName(r.kv), nil)
		if err != nil {
			return nil, err
		}
		count, err := r.ks.get("prefill_count", nil)
		if err != nil {
			return nil, err
		}
		push := shaders.PrefillPush{N: nu, KVDim: uint32(c.KVDim()), Layer: uint32(l), MaxEntries: uint32(r.ctx)}
		ops = append(ops,
			newOp(kv, push, shaders.Groups(nu),
				rd(a.kr, 0, 0), rd(a.v, 0, 0), rd(br.pos, 0, 0), rd(br.rows, 0, 0), rd(r.counts, 0, 0),
				wr(kc.k, 0, 0), wr(kc.v, 0, 0), wr(kc.pos, 0, 0)),
			newOp(count, push, [3]uint32{1, 1, 1}, rd(br.rows, 0, 0), rw(r.counts, 0, 0)))
		att.entries, att.layer, att.counts, att.kv, att.k, att.v, att.kPos = uint32(r.ctx), uint32(l), r.counts, r.kv, kc.k, kc.v, kc.pos
	}
	attOps, err := r.batchAttentionOps(att)
	if err != nil {
		return nil, err
	}
	return append(ops, attOps...), nil
}

// decodeAttention is the decode step's attention stage: decode_attend in
// one dispatch (FuseAttention), or decode_kv (RoPE and the append) and
// attention over the cache, single-pass or, with a split profile,
// flash-decoding's two passes (the cache in r.attnSplits chunks, a
// workgroup each, then their merge). A routed block of compact positions
// turns by the layer's entry count (the Compact push constant).
func (r *Runner) decodeAttention(l int, rb routedBlock) ([]op, error) {
	c := r.c
	a := &r.act
	b := &r.w.blocks[l]
	kc := r.cache[l]
	scale := float32(1 / math.Sqrt(float64(c.HeadDim)))
	kOff, vOff := uint32(b.qkv.part[1]/4), uint32(b.qkv.part[2]/4)
	if r.ks.prof.FuseAttention {
		attend, err := r.ks.get(shaders.DecodeAttendName(r.kv), shaders.DecodeAttendSpec(r.attnSplits))
		if err != nil {
			return nil, err
		}
		return []op{newOp(attend, shaders.DecodeAttendPush{HeadDim: uint32(c.HeadDim), NHead: uint32(c.NHead), NKVHead: uint32(c.NKVHead),
			KOff: kOff, VOff: vOff, Layer: uint32(l), MaxEntries: uint32(r.ctx), Scale: scale, Compact: rb.compact()},
			shaders.DecodeAttendGroups(uint32(c.NHead), r.attnSplits),
			rd(a.qkv, 0, 0), rd(r.tokPos, 0, 0), rd(r.w.ropeFreq, 0, 0), rw(kc.k, 0, 0), rw(kc.v, 0, 0), rw(kc.pos, 0, 0), rw(r.counts, 0, 0),
			rw(a.part, 0, 0), rw(a.done, 0, 0), wr(a.att, 0, 4*uint64(c.NHead*c.HeadDim)))}, nil
	}
	kv, err := r.ks.get(shaders.DecodeKVName(r.kv), nil)
	if err != nil {
		return nil, err
	}
	attn, err := r.ks.get(shaders.DecodeAttentionName(r.kv), nil)
	if err != nil {
		return nil, err
	}
	ops := []op{newOp(kv, shaders.DecodeKVPush{HeadDim: uint32(c.HeadDim), NHead: uint32(c.NHead), NKVHead: uint32(c.NKVHead),
		KOff: kOff, VOff: vOff, Layer: uint32(l), MaxEntries: uint32(r.ctx), Compact: rb.compact()},
		[3]uint32{1, 1, 1},
		rw(a.qkv, 0, 0), rd(r.tokPos, 0, 0), rd(r.w.ropeFreq, 0, 0), wr(kc.k, 0, 0), wr(kc.v, 0, 0), wr(kc.pos, 0, 0), rw(r.counts, 0, 0))}
	qB := 4 * uint64(c.NHead*c.HeadDim)
	push := shaders.DecodeAttentionPush{N: 1, Layer: uint32(l), NHead: uint32(c.NHead), NKVHead: uint32(c.NKVHead),
		HeadDim: uint32(c.HeadDim), Scale: scale}
	inputs := []vk.Bind{rd(a.qkv, 0, qB), rd(kc.k, 0, 0), rd(kc.v, 0, 0), rd(kc.pos, 0, 0), rd(r.tokPos, 0, 0), rd(r.counts, 0, 0)}
	if r.attnSplits <= 1 {
		return append(ops, newOp(attn, push, shaders.AttentionGroups(1, uint32(c.NHead)), append(inputs, wr(a.att, 0, qB))...)), nil
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
	return append(ops,
		newOp(split, push, shaders.DecodeAttentionSplitGroups(1, nh, r.attnSplits), append(inputs, wr(a.part, 0, 0))...),
		newOp(combine, shaders.DecodeAttentionCombinePush{N: 1, NHead: nh, HeadDim: hd, Splits: r.attnSplits}, shaders.Groups(nh),
			rd(a.part, 0, 0), wr(a.att, 0, qB))), nil
}

// residual is x += W in: the decode step's matvec with the add folded in
// (FuseAdd), a batch's matmul into a.ob and add; with add false, only W in
// into out (a batch: a.ob), for mod_residual's gate to scale.
func (r *Runner) residual(p pass, m mat, bm batchMat, in *vk.Buffer, br blockRows, add bool, out *vk.Buffer) ([]op, error) {
	if p.step {
		if !add {
			return m.ops(in, out, 0), nil
		}
		k, err := r.ks.matvec(m.typ, shaders.FuseAdd, int(m.cols))
		if err != nil {
			return nil, err
		}
		return m.fusedOps(k, shaders.FuseAdd, in, br.x, 0, nil, 0), nil
	}
	a := &r.pf.a
	ops := bm.ops(in, a.ob, br.n)
	if !add {
		return ops, nil
	}
	k, err := r.ks.get("add", nil)
	if err != nil {
		return nil, err
	}
	nd := uint32(br.n * r.c.NEmbd)
	return append(ops, newOp(k, shaders.AddPush{N: nd}, shaders.Groups((nd+255)/256), rd(br.x, 0, 0), rd(a.ob, 0, 0), wr(br.x, 0, 0))), nil
}

// attentionOutput: x += Wo att.
func (r *Runner) attentionOutput(p pass, l int, br blockRows, _ routedBlock) ([]op, error) {
	var bm batchMat
	att := r.act.att
	if !p.step {
		bm, att = r.pf.blocks[l].o, r.pf.a.att
	}
	return r.residual(p, r.w.blocks[l].o, bm, att, br, true, nil)
}

// mlpInput: SwiGLU(Wg xn, Wu xn) of the normed rows, into act.h (a
// batch's a.h).
func (r *Runner) mlpInput(p pass, l int, br blockRows, _ routedBlock) ([]op, error) {
	c := r.c
	b := &r.w.blocks[l]
	swiglu, err := r.ks.get("swiglu", nil)
	if err != nil {
		return nil, err
	}
	if !p.step {
		a, eb := &r.pf.a, &r.pf.blocks[l]
		norm, err := r.rmsnormOp(br.x, b.ffnNorm, a.xn, br.n)
		if err != nil {
			return nil, err
		}
		ops := append([]op{norm}, eb.gate.ops(a.xn, a.gate, br.n)...)
		ops = append(ops, eb.up.ops(a.xn, a.up, br.n)...)
		nf := uint32(br.n * c.NFF)
		return append(ops, newOp(swiglu, shaders.SwiGLUPush{N: nf}, shaders.ElementGroups(nf), rd(a.gate, 0, 0), rd(a.up, 0, 0), wr(a.h, 0, 0))), nil
	}
	a := &r.act
	ffB := 4 * uint64(c.NFF)
	if gu := b.gateUp; r.ks.prof.FuseNorm && len(gu.mvs) == 1 && len(gu.mvs[0].pieces) == 1 && gu.part[1] == ffB {
		// gate and up are one matrix [2*nFF][nEmbd]: norm, both matvecs and
		// SwiGLU in one dispatch.
		m := gu.mvs[0]
		k, err := r.ks.matvec(m.typ, shaders.FuseNormSwiGLU, int(m.cols))
		if err != nil {
			return nil, err
		}
		return m.fusedOps(k, shaders.FuseNormSwiGLU, br.x, a.h, 0, b.ffnNorm, c.RMSEps), nil
	}
	ops, err := r.normedMatvec(b.gateUp, br.x, b.ffnNorm, a.gu)
	if err != nil {
		return nil, err
	}
	return append(ops, newOp(swiglu, shaders.SwiGLUPush{N: uint32(c.NFF)}, shaders.ElementGroups(uint32(c.NFF)),
		rd(a.gu, b.gateUp.part[0], ffB), rd(a.gu, b.gateUp.part[1], ffB), wr(a.h, 0, ffB))), nil
}

// mlpOutput: x += Wd h, or with a gated MLP (rb.mlpOut) Wd h alone into
// rb.mlpOut, which mod_residual scales and adds.
func (r *Runner) mlpOutput(p pass, l int, br blockRows, rb routedBlock) ([]op, error) {
	var bm batchMat
	h := r.act.h
	if !p.step {
		bm, h = r.pf.blocks[l].down, r.pf.a.h
	}
	return r.residual(p, r.w.blocks[l].down, bm, h, br, rb.mlpOut == nil, rb.mlpOut)
}
