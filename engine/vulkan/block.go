package vulkan

import (
	"fmt"
	"math"
	"slices"

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
	// In a step of many sequences (frame.paged): each row's entry in its
	// table of the layer and the table's offset (pagedFrame).
	ent, toff *vk.Buffer
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
func (r *Runner) blockOps(p *frame, l int, br blockRows, rb routedBlock) ([]op, error) {
	var ops []op
	for _, stage := range []func(*frame, int, blockRows, routedBlock) ([]op, error){
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

// normedOps are the decode step's plan steps (shaders.Profile's
// AttentionInput, GateUp, Head) on one row x with RMSNorm weight w: a norm
// into p.xn, stack s's matvecs into y (on p.xn after a norm, else on x
// with the step's fusion, which may norm it), and the other roles by
// other, the stage's own.
func (r *Runner) normedOps(p *frame, steps []shaders.Step, s stack, x, w, y *vk.Buffer, other func(shaders.Step) (op, error)) ([]op, error) {
	var ops []op
	in := x
	for _, st := range steps {
		switch st.Role {
		case shaders.RoleNorm:
			norm, err := r.rmsnormOp(x, w, p.xn, 1)
			if err != nil {
				return nil, err
			}
			ops, in = append(ops, norm), p.xn
		case shaders.RoleMatvec:
			for i, m := range s.mvs {
				k := m.mv // made with FuseNone at upload
				if st.Fusion != shaders.FuseNone {
					var err error
					if k, err = r.ks.matvec(m.typ, st.Fusion, int(m.cols)); err != nil {
						return nil, err
					}
				}
				ops = append(ops, m.fusedOps(k, st.Fusion, in, y, s.mvOff[i], w, r.c.RMSEps)...)
			}
		default:
			o, err := other(st)
			if err != nil {
				return nil, err
			}
			ops = append(ops, o)
		}
	}
	return ops, nil
}

// noOther is normedOps' other for a plan of norms and matvecs only.
func noOther(st shaders.Step) (op, error) {
	return op{}, fmt.Errorf("vulkan: no step %v here", st.Role)
}

// attentionInput: q, k and v of the normed rows (the decode step's stacked
// p.qkv; a batch's p.q, p.k, p.v).
func (r *Runner) attentionInput(p *frame, l int, br blockRows, _ routedBlock) ([]op, error) {
	lf := &p.layers[l]
	if p.step {
		return r.normedOps(p, r.ks.prof.AttentionInput(), lf.w.qkv, br.x, lf.w.attnNorm, p.qkv, noOther)
	}
	if p.vec { // a step of a few rows (stepvec.go)
		return r.vecAttentionInput(p, l, br)
	}
	norm, err := r.rmsnormOp(br.x, lf.w.attnNorm, p.xn, br.n)
	if err != nil {
		return nil, err
	}
	return append([]op{norm}, sameXOps(p.xn, br.n, br.maxRows, matOut{lf.mm.q, p.q}, matOut{lf.mm.k, p.k}, matOut{lf.mm.v, p.v})...), nil
}

// attention: RoPE, the cache append and attention, into p.att.
func (r *Runner) attention(p *frame, l int, br blockRows, rb routedBlock) ([]op, error) {
	if p.step {
		return r.decodeAttention(p, l, rb)
	}
	if r.stackedQKV(p, l) { // a step's few rows: split, RoPE and the KV write in one
		return r.pagedQKVOps(p, l, br)
	}
	c := r.c
	nu := uint32(br.n)
	rope, err := r.ks.get("rope", nil)
	if err != nil {
		return nil, err
	}
	ropeOp := func(x, out *vk.Buffer, heads int) op {
		return newOp(rope, shaders.RopePush{HeadDim: uint32(c.HeadDim), NHead: uint32(heads), N: nu}, shaders.Groups(nu),
			rd(x, 0, 0), rd(br.ropePos, 0, 0), rd(r.w.ropeFreq, 0, 0), wr(out, 0, 0))
	}
	ops := []op{ropeOp(p.q, p.qr, c.NHead), ropeOp(p.k, p.kr, c.NKVHead)}
	if p.paged != nil { // a step of many sequences: each row's own pages
		paged, err := r.pagedAttentionOps(p, l, br)
		return append(ops, paged...), err
	}
	att := attentionArgs{n: nu, maxRows: uint32(br.maxRows), q: p.qr, qPos: br.pos, partO: p.partO, partML: p.partML, out: p.att}
	if r.evalMode { // no cache: attention among the n rows, causal by position
		att.entries, att.kv, att.k, att.v, att.kPos = nu, shaders.KVF32, p.kr, p.v, br.pos
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
				rd(p.kr, 0, 0), rd(p.v, 0, 0), rd(br.pos, 0, 0), rd(br.rows, 0, 0), rd(r.counts, 0, 0),
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

// decodeAttention is the decode step's attention stage, the profile's
// plan (shaders.Profile.DecodeAttention): decode_attend in one dispatch,
// or decode_kv (RoPE and the append) and attention over the cache in one
// pass or flash-decoding's two (the cache in r.attnSplits chunks, a
// workgroup each, then their merge). A routed block of compact positions
// turns by the layer's entry count (the Compact push constant).
func (r *Runner) decodeAttention(p *frame, l int, rb routedBlock) ([]op, error) {
	c := r.c
	b := p.layers[l].w
	kc := r.cache[l]
	scale := float32(1 / math.Sqrt(float64(c.HeadDim)))
	kOff, vOff := uint32(b.qkv.part[1]/4), uint32(b.qkv.part[2]/4)
	nh, hd := uint32(c.NHead), uint32(c.HeadDim)
	qB := 4 * uint64(c.NHead*c.HeadDim)
	attnPush := shaders.DecodeAttentionPush{N: 1, Layer: uint32(l), NHead: nh, NKVHead: uint32(c.NKVHead), HeadDim: hd, Scale: scale}
	inputs := []vk.Bind{rd(p.qkv, 0, qB), rd(kc.k, 0, 0), rd(kc.v, 0, 0), rd(kc.pos, 0, 0), rd(r.tokPos, 0, 0), rd(r.counts, 0, 0)}
	inputs = inputs[:len(inputs):len(inputs)] // each append below copies
	var ops []op
	for _, st := range r.ks.prof.DecodeAttention(r.kv, r.ctx, hd) {
		k, err := r.ks.get(st.Variant, st.Spec)
		if err != nil {
			return nil, err
		}
		var o op
		switch st.Role {
		case shaders.RoleAttend:
			o = newOp(k, shaders.DecodeAttendPush{HeadDim: hd, NHead: nh, NKVHead: uint32(c.NKVHead),
				KOff: kOff, VOff: vOff, Layer: uint32(l), MaxEntries: uint32(r.ctx), Scale: scale, Compact: rb.compact()},
				shaders.DecodeAttendGroups(nh, r.attnSplits),
				rd(p.qkv, 0, 0), rd(r.tokPos, 0, 0), rd(r.w.ropeFreq, 0, 0), rw(kc.k, 0, 0), rw(kc.v, 0, 0), rw(kc.pos, 0, 0), rw(r.counts, 0, 0),
				rw(p.part, 0, 0), rw(p.done, 0, 0), wr(p.att, 0, qB))
		case shaders.RoleKV:
			o = newOp(k, shaders.DecodeKVPush{HeadDim: hd, NHead: nh, NKVHead: uint32(c.NKVHead),
				KOff: kOff, VOff: vOff, Layer: uint32(l), MaxEntries: uint32(r.ctx), Compact: rb.compact()},
				[3]uint32{1, 1, 1},
				rw(p.qkv, 0, 0), rd(r.tokPos, 0, 0), rd(r.w.ropeFreq, 0, 0), wr(kc.k, 0, 0), wr(kc.v, 0, 0), wr(kc.pos, 0, 0), rw(r.counts, 0, 0))
		case shaders.RoleAttention:
			o = newOp(k, attnPush, shaders.AttentionGroups(1, nh), append(inputs, wr(p.att, 0, qB))...)
		case shaders.RoleAttentionSplit:
			o = newOp(k, attnPush, shaders.DecodeAttentionSplitGroups(1, nh, r.attnSplits), append(inputs, wr(p.part, 0, 0))...)
		case shaders.RoleCombine:
			o = newOp(k, shaders.DecodeAttentionCombinePush{N: 1, NHead: nh, HeadDim: hd, Splits: r.attnSplits}, shaders.Groups(nh),
				rd(p.part, 0, 0), wr(p.att, 0, qB))
		default:
			return nil, fmt.Errorf("vulkan: decode attention: no step %v", st.Role)
		}
		ops = append(ops, o)
	}
	return ops, nil
}

// residual is x += W in: the decode step's matvec m with the add folded in
// (FuseAdd), a batch's matmul bm into p.ob and add; with add false, only
// W in into out (a batch: p.ob), for mod_residual's gate to scale.
func (r *Runner) residual(p *frame, m mat, bm batchMat, in *vk.Buffer, br blockRows, add bool, out *vk.Buffer) ([]op, error) {
	if p.vec { // a step of a few rows (stepvec.go)
		return r.vecResidual(p, m, in, br, add, out)
	}
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
	ops := bm.ops(in, p.ob, br.n, br.maxRows)
	if !add {
		return ops, nil
	}
	k, err := r.ks.get("add", nil)
	if err != nil {
		return nil, err
	}
	nd := uint32(br.n * r.c.NEmbd)
	return append(ops, newOp(k, shaders.AddPush{N: nd}, shaders.Groups((nd+255)/256), rd(br.x, 0, 0), rd(p.ob, 0, 0), wr(br.x, 0, 0))), nil
}

// attentionOutput: x += Wo att.
func (r *Runner) attentionOutput(p *frame, l int, br blockRows, _ routedBlock) ([]op, error) {
	lf := &p.layers[l]
	return r.residual(p, lf.w.o, lf.mm.o, p.att, br, true, nil)
}

// mlpInput: SwiGLU(Wg xn, Wu xn) of the normed rows, into p.h.
func (r *Runner) mlpInput(p *frame, l int, br blockRows, _ routedBlock) ([]op, error) {
	c := r.c
	b, eb := p.layers[l].w, &p.layers[l].mm
	if p.vec { // a step of a few rows (stepvec.go)
		return r.vecMLPInput(p, l, br)
	}
	if !p.step {
		swiglu, err := r.ks.get("swiglu", nil)
		if err != nil {
			return nil, err
		}
		norm, err := r.rmsnormOp(br.x, b.ffnNorm, p.xn, br.n)
		if err != nil {
			return nil, err
		}
		ops := append([]op{norm}, sameXOps(p.xn, br.n, br.maxRows, matOut{eb.gate, p.gate}, matOut{eb.up, p.up})...)
		nf := uint32(br.n * c.NFF)
		return append(ops, newOp(swiglu, shaders.SwiGLUPush{N: nf}, shaders.ElementGroups(nf), rd(p.gate, 0, 0), rd(p.up, 0, 0), wr(p.h, 0, 0))), nil
	}
	ffB := 4 * uint64(c.NFF)
	gu := b.gateUp
	// Gate and up one matrix [2*nFF][nEmbd] in one piece: the plan may
	// norm, multiply and gate in one dispatch, straight into h.
	stacked := len(gu.mvs) == 1 && len(gu.mvs[0].pieces) == 1 && gu.part[1] == ffB
	steps := r.ks.prof.GateUp(stacked)
	y := p.h
	swigluOp := func(st shaders.Step) (op, error) {
		if st.Role != shaders.RoleSwiGLU {
			return noOther(st)
		}
		swiglu, err := r.ks.get(st.Variant, st.Spec)
		if err != nil {
			return op{}, err
		}
		return newOp(swiglu, shaders.SwiGLUPush{N: uint32(c.NFF)}, shaders.ElementGroups(uint32(c.NFF)),
			rd(p.gu, gu.part[0], ffB), rd(p.gu, gu.part[1], ffB), wr(p.h, 0, ffB)), nil
	}
	if slices.ContainsFunc(steps, func(st shaders.Step) bool { return st.Role == shaders.RoleSwiGLU }) {
		y = p.gu
	}
	return r.normedOps(p, steps, gu, br.x, b.ffnNorm, y, swigluOp)
}

// mlpOutput: x += Wd h, or with a gated MLP (rb.mlpOut) Wd h alone into
// rb.mlpOut, which mod_residual scales and adds.
func (r *Runner) mlpOutput(p *frame, l int, br blockRows, rb routedBlock) ([]op, error) {
	lf := &p.layers[l]
	return r.residual(p, lf.w.down, lf.mm.down, p.h, br, rb.mlpOut == nil, rb.mlpOut)
}
