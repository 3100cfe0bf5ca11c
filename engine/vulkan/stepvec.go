package vulkan

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// A step of a few rows (stepper.go) runs its products as matvecs over
// several vectors instead of matmuls: matvec reads each weight row once
// for up to its NB vectors (constant 2), while matmul stages and
// dequantizes a whole weight tile per workgroup whatever the rows, so
// that on lavapipe a matmul over 1 to 64 rows costs about what 64 do (a
// stories15M Q8_0 step of one row: ~200 ms of matmuls, against ~15 ms of
// the decode step's matvecs). The block's stages (block.go) take these
// when the frame's vec is set: q, k and v by the decode weights'
// stack (one matrix: into the frame's vqkv, then paged_split, or in a
// paged step paged_qkv, which also turns and writes to the pages), o and down with
// the residual add fused (FuseAdd), gate and up with the norm and SwiGLU
// fused when the stack allows (FuseNormSwiGLU).

// vecRows is the most rows a step runs as matvecs on this runner's
// device: one pass of NB vectors over each weight row (the profile's
// VecRows, or fewer by MODRUN_VEC_ROWS).
func (r *Runner) vecRows() int {
	if r.vecRowsEnv > 0 {
		return r.vecRowsEnv
	}
	return r.ks.prof.VecRows()
}

// vecRowsEnv is MODRUN_VEC_ROWS: unset, 0 (the profile's VecRows); else
// the most rows a batched step runs as matvecs, from 1 to the profile's
// VecRows, the wider steps taking the matmul (its narrow, split tiles on
// a GPU). A measuring knob: the GPU bundle's quick mode runs `bench
// --parallel` with it beside the default, since whether 8 or 16 rows are
// cheaper as one matvec pass or as split tiles is a GPU's to say
// (docs/matvec-cost.md, docs/matmul-cost.md).
func vecRowsEnv(prof shaders.Profile, k Knobs) (int, error) {
	return parseVecRows(k.get("MODRUN_VEC_ROWS"), prof.VecRows())
}

// parseVecRows is MODRUN_VEC_ROWS's value v on a device whose profile
// runs at most most rows as matvecs.
func parseVecRows(v string, most int) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > most {
		return 0, fmt.Errorf("vulkan: MODRUN_VEC_ROWS=%q: want a number of rows from 1 to %d (this device's most), or 0 for that default", v, most)
	}
	return n, nil
}

// vecQKV makes a pass's buffer of stacked q|k|v for vecRows rows run as
// matvecs (frame.vqkv), or nil where the weights' layout does not allow
// the matvec path (vecFits).
func (r *Runner) vecQKV(must func(uint64, vk.BufferKind) *vk.Buffer) *vk.Buffer {
	if !r.vecFits() {
		return nil
	}
	rows := uint32(0)
	for _, b := range r.w.blocks {
		rows = max(rows, b.qkv.mvs[0].rows)
	}
	return must(4*uint64(r.vecRows())*uint64(rows), vk.DeviceLocal)
}

// vecXQ makes a pass's buffer of x quantized by dot_x for vecRows rows
// (frame.vxq: matvec_dot's PREQ variants, Profile.MatvecBatch), as wide as
// the widest matrix's columns, or nil where the profile takes no
// matvec_dot (MODRUN_MATVEC_DOT unset) or the matvec path does not fit.
func (r *Runner) vecXQ(must func(uint64, vk.BufferKind) *vk.Buffer) *vk.Buffer {
	if !r.ks.prof.MatvecDot || !r.vecFits() {
		return nil
	}
	cols := r.w.output.cols
	for _, b := range r.w.blocks {
		for _, m := range append(append([]mat{b.o, b.down}, b.qkv.mvs...), b.gateUp.mvs...) {
			cols = max(cols, m.cols)
		}
	}
	return must(shaders.DotXBytes(uint32(r.vecRows()), cols), vk.DeviceLocal)
}

// vecFits says whether every matrix of the blocks and the head is one
// piece with a stack layout the matvec path takes.
func (r *Runner) vecFits() bool {
	one := func(m mat) bool { return len(m.pieces) == 1 }
	ffB := 4 * uint64(r.c.NFF)
	for l := range r.w.blocks {
		b := &r.w.blocks[l]
		qkv, gu := b.qkv, b.gateUp
		switch {
		case !one(b.o) || !one(b.down):
			return false
		case len(qkv.mvs) == 1 && one(qkv.mvs[0]), len(qkv.mvs) == 3 && one(qkv.mvs[0]) && one(qkv.mvs[1]) && one(qkv.mvs[2]):
		default:
			return false
		}
		switch {
		case len(gu.mvs) == 1 && one(gu.mvs[0]) && gu.part[1] == ffB, len(gu.mvs) == 2 && one(gu.mvs[0]) && one(gu.mvs[1]):
		default:
			return false
		}
	}
	return one(r.w.output)
}

// vecOp is matvec m with fusion fuse over n vectors of x into y [n][rows]
// (FuseNormSwiGLU: [n][rows/2]; FuseAdd: y += W x), with NB up to n
// where the device's loop cap allows: one dispatch, or where the profile
// takes matvec_dot's PREQ variant two, dot_x quantizing the n vectors of x
// into p.vxq first. At n 0 (a routed block no row entered) it dispatches
// nothing. The kernels and the matvec's workgroups are maxRows's, whatever
// n: a routed block's dispatches are the ones recorded for all the pass's
// rows, sized from a table made by count (routedTable), so each count's
// entry must be the same kernels' (dot_x's workgroups are a row a vector:
// none at 0).
func (r *Runner) vecOp(p *frame, m mat, fuse string, x, y, normw *vk.Buffer, n, maxRows int) ([]op, error) {
	name, spec := r.ks.prof.MatvecBatch(m.typ, fuse, uint32(maxRows), uint32(r.vecRows()), m.cols)
	k, err := r.ks.get(name, spec)
	if err != nil {
		return nil, err
	}
	pc := m.pieces[0]
	rows := pc.rows
	if fuse == shaders.FuseNormSwiGLU {
		rows /= 2
	}
	out := wr(y, 0, 0)
	if fuse == shaders.FuseAdd {
		out.Access = vk.ReadWrite
	}
	push := shaders.MatvecPush{Rows: rows, Cols: m.cols, N: uint32(n), Eps: r.c.RMSEps}
	norm := fuse == shaders.FuseNorm || fuse == shaders.FuseNormSwiGLU
	var ops []op
	binds := []vk.Bind{rd(pc.buf, 0, 0), rd(x, 0, 0), out}
	if dotx, pre := shaders.MatvecDotPreX(name); pre {
		if p.vxq == nil {
			return nil, fmt.Errorf("vulkan: %s reads x quantized by %s, and the pass has no buffer for it", name, dotx)
		}
		dk, err := r.ks.get(dotx, nil)
		if err != nil {
			return nil, err
		}
		dxBinds := []vk.Bind{rd(x, 0, 0), wr(p.vxq, 0, 0)}
		if norm {
			dxBinds = append(dxBinds, rd(normw, 0, 0))
		}
		dxPush := push
		dxPush.Rows = 0 // not dot_x's: left out, so that matrices of other rows over the same x quantize it alike (quantizedOnce)
		ops = append(ops, newOp(dk, dxPush, shaders.DotXGroups(uint32(n), m.cols), dxBinds...))
		binds[1] = rd(p.vxq, 0, 0)
	} else if norm {
		binds = append(binds, rd(normw, 0, 0))
	}
	groups := shaders.MatvecGroups(rows, k.spec)
	if n == 0 {
		groups = [3]uint32{0, 1, 1}
	}
	return append(ops, newOp(k, push, groups, binds...)), nil
}

// vecAttentionInput is attentionInput by matvecs: the norm, then q, k, v;
// a stack of one matrix on a profile that fuses norms (FuseNorm: GPUs)
// takes the norm into its matvec, one dispatch and barrier fewer a block,
// and so do three matrices that read x quantized alike by one dot_x with
// the norm's weight (normedOnce).
func (r *Runner) vecAttentionInput(p *frame, l int, br blockRows) ([]op, error) {
	lf := &p.layers[l]
	s := lf.w.qkv
	var ops []op
	in, fuse := br.x, shaders.FuseNorm
	normed := len(s.mvs) == 3 && r.normedOnce(s.mvs, br.maxRows)
	if (len(s.mvs) != 1 || !r.ks.prof.FuseNorm) && !normed {
		norm, err := r.rmsnormOp(br.x, lf.w.attnNorm, p.xn, br.n)
		if err != nil {
			return nil, err
		}
		ops, in, fuse = []op{norm}, p.xn, shaders.FuseNone
	}
	if len(s.mvs) == 3 { // three matrices: each straight into its buffer
		var nw *vk.Buffer
		if normed {
			nw = lf.w.attnNorm
		}
		var last []op // the last matvec's ops that quantized x into p.vxq
		for i, y := range []*vk.Buffer{p.q, p.k, p.v} {
			o, err := r.vecOp(p, s.mvs[i], fuse, in, y, nw, br.n, br.maxRows)
			if err != nil {
				return nil, err
			}
			if q := quantizedOnce(last, o); len(q) == len(o) {
				if len(o) == 2 {
					last = o
				}
			} else {
				o = q
			}
			ops = append(ops, o...)
		}
		return ops, nil
	}
	o, err := r.vecOp(p, s.mvs[0], fuse, in, p.vqkv, lf.w.attnNorm, br.n, br.maxRows)
	if err != nil {
		return nil, err
	}
	ops = append(ops, o...)
	if r.stackedQKV(p, l) { // left stacked: paged_qkv splits it (pagedQKVOps)
		return ops, nil
	}
	split, err := r.ks.get("paged_split", nil)
	if err != nil {
		return nil, err
	}
	nu, c := uint32(br.n), r.c
	push := shaders.PagedPush{N: nu, NHead: uint32(c.NHead), HeadDim: uint32(c.HeadDim), KVDim: uint32(c.KVDim()),
		Stride: s.mvs[0].rows, KOff: uint32(s.part[1] / 4), VOff: uint32(s.part[2] / 4)}
	return append(ops, newOp(split, push, shaders.Groups(nu), rd(p.vqkv, 0, 0), wr(p.q, 0, 0), wr(p.k, 0, 0), wr(p.v, 0, 0))), nil
}

// normedOnce says whether matrices mvs (q, k and v; gate and up), each
// taken with the norm fused over maxRows rows, all take matvec_dot's PREQ
// variants reading the same dot_x over as many columns: then one dot_x
// with the norm's weight serves them all (quantizedOnce), each applying
// the 1/rms to its sums, and the norm's own dispatch goes.
func (r *Runner) normedOnce(mvs []mat, maxRows int) bool {
	if !r.ks.prof.FuseNorm {
		return false
	}
	var first string
	for i, m := range mvs {
		name, _ := r.ks.prof.MatvecBatch(m.typ, shaders.FuseNorm, uint32(maxRows), uint32(r.vecRows()), m.cols)
		dx, ok := shaders.MatvecDotPreX(name)
		if !ok || i > 0 && (dx != first || m.cols != mvs[0].cols) {
			return false
		}
		first = dx
	}
	return true
}

// quantizedOnce is a matvec's ops (vecOp's) without its dot_x where the
// last dot_x before it, last's (the ops of the last matvec that quantized
// into p.vxq, nil for none), quantized the same x alike (the same kernel,
// push constants and buffers): q, k and v, or gate and up, of types that
// quantize x in the same blocks (a llama.cpp mix's Q4_K and Q6_K) read
// the one copy. Only the last one: a dot_x of other blocks between the
// two overwrote it.
func quantizedOnce(last, ops []op) []op {
	if len(last) != 2 || len(ops) != 2 {
		return ops
	}
	a, b := last[0], ops[0]
	if a.k != b.k || a.k.v.Op != shaders.OpDotX || !bytes.Equal(a.push, b.push) || a.groups != b.groups || !slices.Equal(a.binds, b.binds) {
		return ops
	}
	return ops[1:]
}

// vecResidual is residual by a matvec: x += W in (FuseAdd), or W in alone
// into out.
func (r *Runner) vecResidual(p *frame, m mat, in *vk.Buffer, br blockRows, add bool, out *vk.Buffer) ([]op, error) {
	fuse, y := shaders.FuseAdd, br.x
	if !add {
		fuse, y = shaders.FuseNone, out
	}
	return r.vecOp(p, m, fuse, in, y, nil, br.n, br.maxRows)
}

// vecMLPInput is mlpInput by matvecs: norm, gate, up and SwiGLU in one
// (a stack of one matrix), or the norm, gate, up and swiglu.
func (r *Runner) vecMLPInput(p *frame, l int, br blockRows) ([]op, error) {
	b := p.layers[l].w
	gu := b.gateUp
	if len(gu.mvs) == 1 {
		return r.vecOp(p, gu.mvs[0], shaders.FuseNormSwiGLU, br.x, p.h, b.ffnNorm, br.n, br.maxRows)
	}
	var ops []op
	in, fuse, nw := br.x, shaders.FuseNorm, b.ffnNorm
	if !r.normedOnce(gu.mvs, br.maxRows) {
		norm, err := r.rmsnormOp(br.x, b.ffnNorm, p.xn, br.n)
		if err != nil {
			return nil, err
		}
		ops, in, fuse, nw = []op{norm}, p.xn, shaders.FuseNone, nil
	}
	gate, err := r.vecOp(p, gu.mvs[0], fuse, in, p.gate, nw, br.n, br.maxRows)
	if err != nil {
		return nil, err
	}
	up, err := r.vecOp(p, gu.mvs[1], fuse, in, p.up, nw, br.n, br.maxRows)
	if err != nil {
		return nil, err
	}
	up = quantizedOnce(gate, up)
	swiglu, err := r.ks.get("swiglu", nil)
	if err != nil {
		return nil, err
	}
	nf := uint32(br.n * r.c.NFF)
	groups := shaders.ElementGroups(nf)
	if nf == 0 {
		groups = [3]uint32{0, 1, 1}
	}
	ops = append(append(ops, gate...), up...)
	return append(ops, newOp(swiglu, shaders.SwiGLUPush{N: nf}, groups, rd(p.gate, 0, 0), rd(p.up, 0, 0), wr(p.h, 0, 0))), nil
}
