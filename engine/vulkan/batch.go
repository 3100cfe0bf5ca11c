package vulkan

import (
	"fmt"
	"slices"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// The batch pass's parts (forward.go): weights bound for matmul and the
// per-row scratch of a batch, which the block's stages (block.go) use when
// a pass runs more than the decode step's one row: a prefill chunk
// (causal routing, the KV cache) or an eval window (top-k routing,
// attention among the window's rows: the Evaluator).

// batchMat is a weight matrix, or one matrix of a stack, bound for matmul:
// its rows lie in one or more buffers (the mat's pieces), a dispatch each.
type batchMat struct {
	mm         *kernel
	rows, cols uint32 // outputs per token, columns
	block      uint32 // the weight type's block of columns (a K slice is whole blocks)
	parts      []matPart
	sk         *splitK // the runner's split-K matmul (nil: never split)
	// dm is the runner's direct matmul (nil: the profile has none), dw
	// the planes kernel of this matrix's weight type.
	dm   *directMM
	dw   *kernel
	dwLo bool // dw writes a lo plane too
	// halves: the weights are F16, rows of halves as a hi plane holds
	// them, so a part whose rows and padding lie in its binding is its own
	// plane (directOps binds it and skips W's planes pass).
	halves bool
}

// directMM is what a runner's direct matmuls share (shaders.Profile.
// MatmulDirect): X's planes kernel, the product, and the scratch planes of
// W and X, which every direct matmul of a pass writes and its product
// reads (one at a time: the derived barriers order each reuse after the
// last product's reads). A matmul whose planes would not fit them (the
// output head's vocabulary rows) keeps matmul_coop.
type directMM struct {
	prof         *shaders.Profile
	xPlanes, mul *kernel
	spec         shaders.MatmulDirectSpec
	hilo         bool
	w, x         *vk.Buffer // the scratch planes
	align        uint64     // minStorageBufferOffsetAlignment: an F16 part bound as its own plane starts at a multiple
}

// newDirectMM makes the runner's direct matmul when its profile has one
// (nil when not), with scratch planes for the largest of a block's
// matrices (rows x cols, each padded to the tiles) and X's of up to ub rows
// of up to xCols columns.
func (r *Runner) newDirectMM(must func(uint64, vk.BufferKind) *vk.Buffer, ub int, mats [][2]int, xCols int) (*directMM, error) {
	prof := &r.ks.prof
	if !prof.MatmulDirect {
		return nil, nil
	}
	dk := prof.MatmulDirectKernels(shaders.MatvecF32)
	xk, err := r.ks.get(dk.XPlanes, nil)
	if err != nil {
		return nil, err
	}
	mul, err := r.ks.get(dk.Product, dk.Spec.Constants())
	if err != nil {
		return nil, err
	}
	wBytes := uint64(4) // with resident planes (residentPlanes) no direct matmul makes W's
	if !prof.MatmulDirectResident {
		for _, rc := range mats {
			rowsP, _, colsP := dk.Spec.Pad(uint32(rc[0]), 1, uint32(rc[1]))
			wBytes = max(wBytes, shaders.PlanesBytes(rowsP, colsP, dk.Hilo))
		}
	}
	_, nP, colsP := dk.Spec.Pad(1, uint32(ub), uint32(xCols))
	return &directMM{prof: prof, xPlanes: xk, mul: mul, spec: dk.Spec, hilo: dk.Hilo, align: max(1, r.dev.Info().Limits.MinStorageBufferOffsetAlignment),
		w: must(wBytes, vk.DeviceLocal), x: must(shaders.PlanesBytes(nP, colsP, dk.Hilo), vk.DeviceLocal)}, nil
}

// bindLimit is the most bytes one binding of the planes may span: the
// device's maxStorageBufferRange (no limit where the profile has none).
func (dm *directMM) bindLimit() uint64 {
	if lim := dm.prof.MaxStorageBufferRange; lim != 0 {
		return lim
	}
	return ^uint64(0)
}

// directOps is the direct matmul of part pt of m for n rows of x, of at
// most maxRows (a routed block's bound), into y, or nil when it does not
// take it: fewer than the profile's MatmulDirectMin, or planes over the
// scratch or a binding's range, at maxRows (a routed block records the same dispatches for each
// of its counts, so the choice may not depend on the count).
//
// xReady says that the scratch already holds X's planes for these rows of
// x and m's columns (an earlier product of x's, sameXOps): the X planes
// pass is left out.
func (m batchMat) directOps(pt matPart, x, y vk.Bind, n, maxRows int, xReady bool) []op {
	dm := m.dm
	bound := uint32(max(n, maxRows))
	if dm == nil || bound < dm.prof.MatmulDirectMin {
		return nil
	}
	_, nMax, _ := dm.spec.Pad(pt.rows, bound, m.cols)
	rowsP, nP, colsP := dm.spec.Pad(pt.rows, uint32(n), m.cols)
	wBytes, xBytes := shaders.PlanesBytes(rowsP, colsP, m.dwLo), shaders.PlanesBytes(nP, colsP, dm.hilo)
	xMax := shaders.PlanesBytes(nMax, colsP, dm.hilo)
	lim := dm.bindLimit()
	// W's planes already made: the F16 weights themselves, or kept from load.
	wPlanes, made := m.ownPlane(pt, rowsP, colsP, lim)
	if !made && pt.planes != nil {
		wPlanes, made = rd(pt.planes, 0, wBytes), true
	}
	if (!made && wBytes > dm.w.Size()) || xMax > dm.x.Size() {
		return nil
	}
	if wBytes > lim || xMax > lim {
		return nil // a binding the device could not span: the staged kernel binds W as it is
	}
	xBytes = max(xBytes, 4) // a routed block's count of 0 binds a word
	xp := shaders.PlanesPush{Rows: uint32(n), Cols: m.cols, WRows: uint32(n), RowsP: nP, ColsP: colsP}
	push := shaders.MatmulDirectPush{Rows: pt.rows, N: uint32(n), ColsP: colsP, LdY: m.rows, YOff: pt.yOff}
	if m.dwLo {
		push.WLo = shaders.PlaneUnits(rowsP, colsP)
	}
	if dm.hilo {
		xp.LoOff = shaders.PlaneUnits(nP, colsP)
		push.XLo = xp.LoOff
	}
	var ops []op
	if !made {
		ops = append(ops, m.wPlanesOp(pt, dm.w, rowsP, colsP))
		wPlanes = rd(dm.w, 0, wBytes)
	}
	planes := []vk.Bind{wPlanes, rd(dm.x, 0, xBytes)}
	if !xReady {
		ops = append(ops, newOp(dm.xPlanes, xp, shaders.PlanesGroups(nP, colsP), x, wr(dm.x, 0, xBytes)))
	}
	splits, slice := m.directSplits(pt.rows, colsP, bound)
	if splits <= 1 {
		return append(ops, newOp(dm.mul, push, shaders.MatmulDirectGroups(pt.rows, uint32(n), dm.spec), append(planes, y)...))
	}
	push.KSplit = slice
	return append(ops,
		newOp(dm.mul, push, shaders.MatmulDirectSplitGroups(pt.rows, uint32(n), dm.spec, splits), append(planes, wr(m.sk.scratch, 0, 0))...),
		newOp(m.sk.reduce, shaders.MatmulReducePush{Rows: pt.rows, N: uint32(n), Splits: splits, LdY: m.rows, YOff: pt.yOff},
			shaders.MatmulReduceGroups(pt.rows, uint32(n)), rd(m.sk.scratch, 0, 0), y))
}

// wPlanesOp is W's planes pass over part pt of m into dst: rowsP x colsP
// halves, and the lo plane after them where m's type has one.
func (m batchMat) wPlanesOp(pt matPart, dst *vk.Buffer, rowsP, colsP uint32) op {
	wp := shaders.PlanesPush{Rows: pt.rows, Cols: m.cols, WRow0: pt.wRow0, WRows: pt.wRows, RowsP: rowsP, ColsP: colsP}
	if m.dwLo {
		wp.LoOff = shaders.PlaneUnits(rowsP, colsP)
	}
	return newOp(m.dw, wp, shaders.PlanesGroups(rowsP, colsP), rd(pt.buf, 0, 0), wr(dst, 0, shaders.PlanesBytes(rowsP, colsP, m.dwLo)))
}

// residentPlanes makes every block matrix's W planes once, in buffers of
// their own that its parts keep (matPart.planes), so that a prefill's
// direct matmuls make X's planes only (Profile.MatmulDirectResident). A
// part that is its own plane (F16: ownPlane) or whose planes a binding
// could not span gets none. It returns the bytes the planes take.
func (r *Runner) residentPlanes(blocks []batchBlock) (uint64, error) {
	rec := r.dev.NewRecorder()
	defer rec.Close()
	var ops []op
	var total uint64
	for l := range blocks {
		b := &blocks[l]
		for _, m := range []*batchMat{&b.q, &b.k, &b.v, &b.o, &b.gate, &b.up, &b.down} {
			if m.dm == nil {
				continue
			}
			lim := m.dm.bindLimit()
			for i := range m.parts {
				pt := &m.parts[i]
				rowsP, _, colsP := m.dm.spec.Pad(pt.rows, 1, m.cols)
				size := shaders.PlanesBytes(rowsP, colsP, m.dwLo)
				if _, own := m.ownPlane(*pt, rowsP, colsP, lim); own || size > lim {
					continue
				}
				buf, err := r.buffer(size, vk.DeviceLocal)
				if err != nil {
					return total, fmt.Errorf("vulkan: the resident planes of layer %d's weights (%d bytes so far; MODRUN_MATMUL_DIRECT=resident): %w", l, total, err)
				}
				pt.planes, total = buf, total+size
				ops = append(ops, m.wPlanesOp(*pt, buf, rowsP, colsP))
			}
		}
	}
	if len(ops) == 0 {
		return 0, nil
	}
	for _, o := range ops { // once, at load: not the profile's (no timestamps)
		o.record(rec)
	}
	if err := r.dev.Run(rec); err != nil {
		return total, fmt.Errorf("vulkan: making the weights' resident planes: %w", err)
	}
	return total, nil
}

// ownPlane is part pt of F16 weights bound as its own hi plane of rowsP x
// colsP halves (no lo plane: F16 weights are exact halves), where it can
// be: rows of colsP halves (the columns a multiple of the kernel's step),
// the padding rows past pt's readable in its binding (what the product
// computes from them goes to rows it does not write: an output row reads
// only its own row of W), the binding's start aligned and its span within
// lim. ok is false where W's planes pass must make the plane.
func (m batchMat) ownPlane(pt matPart, rowsP, colsP uint32, lim uint64) (b vk.Bind, ok bool) {
	if !m.halves || m.cols != colsP || pt.wRow0+rowsP > pt.wRows {
		return vk.Bind{}, false
	}
	off, size := 2*uint64(pt.wRow0)*uint64(m.cols), shaders.PlanesBytes(rowsP, colsP, false)
	if off%m.dm.align != 0 || size > lim {
		return vk.Bind{}, false
	}
	return rd(pt.buf, off, size), true
}

// directSplits is how the direct product of rows of m over colsP columns
// of planes is cut along K for at most bound rows of x
// (shaders.Profile.MatmulDirectSplit, planned for the bound as splits
// is), in no more slices than the split-K scratch holds.
func (m batchMat) directSplits(rows, colsP, bound uint32) (splits, slice uint32) {
	if m.sk == nil {
		return 1, colsP
	}
	per := 4 * uint64(bound) * uint64(rows) // one slice's partial sums
	most := uint32(min(m.sk.scratch.Size()/max(per, 1), shaders.MatmulMaxSplits))
	return m.dm.prof.MatmulDirectSplit(rows, bound, colsP, m.dm.spec, most)
}

// splitK is what a runner's split-K matmuls share: the profile that plans
// the slices (shaders.Profile.MatmulSplit), splitk_reduce, and the scratch
// of partial sums every split matmul of a pass writes and its reduce reads
// (one at a time: the derived barriers order each reuse after the last
// reduce's reads).
type splitK struct {
	prof    *shaders.Profile
	reduce  *kernel
	scratch *vk.Buffer
}

// newSplitK makes the runner's split-K state when its profile splits
// (nil when it does not: CPU devices), with a scratch for the most partial
// sums a split of the profile's tiles writes (MatmulSplitScratch of the
// widest tile it may take: the profile's matmul, or the tensor cores'), at
// most splitScratchMax: a wider split takes fewer slices (splits).
func (r *Runner) newSplitK(must func(uint64, vk.BufferKind) *vk.Buffer) (*splitK, error) {
	prof := &r.ks.prof
	if prof.MatmulSplitTarget == 0 {
		return nil, nil
	}
	reduce, err := r.ks.get(shaders.MatmulReduceName, nil)
	if err != nil {
		return nil, err
	}
	_, spec := prof.MatmulKernel(shaders.MatvecF32)
	mm := prof.Matmul()
	bytes := min(splitScratchMax, max(prof.MatmulSplitScratch(spec[1], spec[2]), prof.MatmulSplitScratch(mm.BM, mm.BN)))
	return &splitK{prof: prof, reduce: reduce, scratch: must(bytes, vk.DeviceLocal)}, nil
}

// splitScratchMax bounds the split-K scratch: the pipelined tile's plan
// (128 x 64) could write 64 MiB of partial sums (a 7B FFN's 11008 rows at
// 512 tokens in 3 slices: 68 MB), the tensor cores' 32 MiB.
const splitScratchMax = 32 << 20

// splits is how m's part of rows is cut along K for n of at most maxRows
// rows: the plan for maxRows (a routed block's dispatches are recorded for
// its bound, and each count's sizes come from a table, so the cut may not
// depend on the count), in no more slices than the scratch holds.
func (m batchMat) splits(rows uint32, n, maxRows int) (splits, slice uint32) {
	if m.sk == nil {
		return 1, m.cols
	}
	per := 4 * uint64(max(n, maxRows)) * uint64(rows) // one slice's partial sums
	most := uint32(min(m.sk.scratch.Size()/max(per, 1), shaders.MatmulMaxSplits))
	return m.sk.prof.MatmulSplitAtMost(rows, m.cols, uint32(max(n, maxRows)), m.mm.spec, m.block, most)
}

// matPart is the rows of an batchMat in one buffer: rows of them from row
// wRow0 of the buffer's wRows, whose outputs go to columns yOff.. of y.
type matPart struct {
	buf                      *vk.Buffer
	wRow0, wRows, rows, yOff uint32
	// planes are the part's W planes made at load and kept
	// (Profile.MatmulDirectResident: residentPlanes); nil where each
	// direct matmul makes them.
	planes *vk.Buffer
}

type batchBlock struct {
	q, k, v, o, gate, up, down batchMat
}

// batchActs are the scratch buffers of a batch of up to S rows.
type batchActs struct {
	x, xs, xn, ob        *vk.Buffer // [S][nEmbd]
	q, qr, att           *vk.Buffer // [S][qDim]
	k, kr, v             *vk.Buffer // [S][kvDim]
	gate, up, h          *vk.Buffer // [S][nFF]
	pos                  *vk.Buffer // [S] u32 the rows' positions
	r, mask, count, args *vk.Buffer // [S] f32, [S] u32, [1] u32, [3] u32
	keys                 *vk.Buffer // [S] u32 a routed layer's selected rows
	partO, partML        *vk.Buffer // attention's key-tile partial results (batchAttentionOps)
}

// matmulKernel is the matmul that reads matrix mx, the device's
// (shaders.Profile.MatmulKernel: tensor cores where it has them).
func matmulKernel(ks *kernels, mx shaders.Matrix) (*kernel, error) {
	return ks.get(ks.prof.MatmulKernel(mx.Type.Name))
}

// matRows is rows [r0, r1) of m bound for matmul: the part of each of m's
// pieces that holds some of them.
func matRows(ks *kernels, m mat, r0, r1 uint32) (batchMat, error) {
	mm, err := matmulKernel(ks, m.mx)
	if err != nil {
		return batchMat{}, err
	}
	em := batchMat{mm: mm, rows: r1 - r0, cols: m.cols, block: uint32(m.mx.Type.Block), sk: ks.split}
	if ks.direct != nil {
		dk := ks.prof.MatmulDirectKernels(m.mx.Type.Name)
		if em.dw, err = ks.get(dk.WPlanes, nil); err != nil {
			return batchMat{}, err
		}
		em.dm, em.dwLo, em.halves = ks.direct, dk.WLo, m.mx.Type.Name == shaders.MatvecF16
	}
	for _, pc := range m.pieces {
		a, b := max(r0, pc.row0), min(r1, pc.row0+pc.rows)
		if a < b {
			em.parts = append(em.parts, matPart{buf: pc.buf, wRow0: a - pc.row0, wRows: pc.rows, rows: b - a, yOff: a - r0})
		}
	}
	return em, nil
}

// stackParts is each matrix of a stack as its own batchMat (matmul writes
// [n][rows] per matrix): in a stack uploaded as one matrix, its rows of it.
func stackParts(ks *kernels, s stack, ms ...*mod.Mat) ([]batchMat, error) {
	out := make([]batchMat, len(ms))
	var err error
	if len(s.mvs) == len(ms) {
		for i, m := range s.mvs {
			if out[i], err = matRows(ks, m, 0, m.rows); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	for i, m := range ms {
		r0 := uint32(s.part[i] / 4) // the rows before matrix i
		if out[i], err = matRows(ks, s.mvs[0], r0, r0+uint32(m.Rows)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ops is Y = X W^T for n rows of x, of at most maxRows (a routed block's
// bound; else n): y is [n][m.rows]. A part the profile splits along K
// (splitK) is two dispatches: the matmul's slices into the scratch, and
// splitk_reduce into y.
func (m batchMat) ops(x, y *vk.Buffer, n, maxRows int) []op {
	return m.opsBound(rd(x, 0, 0), wr(y, 0, 0), n, maxRows)
}

// sameXOps is Y_i = X W_i^T for each (W_i, Y_i) of mys, in order, all
// over the same n rows of x (of at most maxRows), as ops would make them
// one by one, except that the direct matmul makes X's planes once for the
// products that follow (q, k and v; gate and up): the first product's
// planes are still in the scratch, since only X planes passes write it.
func sameXOps(x *vk.Buffer, n, maxRows int, mys ...matOut) []op {
	var ops []op
	ready := map[uint32]bool{} // columns whose planes of x the scratch holds
	for _, my := range mys {
		ops = append(ops, my.m.opsReady(rd(x, 0, 0), wr(my.y, 0, 0), n, maxRows, ready)...)
	}
	return ops
}

// matOut is a matrix and the buffer its products go to.
type matOut struct {
	m batchMat
	y *vk.Buffer
}

// opsBound is ops with x and y bound as given (opsInPieces binds ranges).
func (m batchMat) opsBound(x, y vk.Bind, n, maxRows int) []op {
	return m.opsReady(x, y, n, maxRows, map[uint32]bool{})
}

// opsReady is opsBound where ready names the columns for which the direct
// matmul's scratch already holds X's planes of these rows of x, and gets
// m's columns when a part of m writes them.
func (m batchMat) opsReady(x, y vk.Bind, n, maxRows int, ready map[uint32]bool) []op {
	var ops []op
	for _, pt := range m.parts {
		if d := m.directOps(pt, x, y, n, maxRows, ready[m.cols]); d != nil {
			ops = append(ops, d...)
			ready[m.cols] = true
			continue
		}
		push := shaders.MatmulPush{Rows: pt.rows, Cols: m.cols, N: uint32(n), WRow0: pt.wRow0, WRows: pt.wRows,
			LdY: m.rows, YOff: pt.yOff}
		splits, slice := m.splits(pt.rows, n, maxRows)
		if splits <= 1 {
			ops = append(ops, newOp(m.mm, push, shaders.MatmulGroupsOf(pt.rows, uint32(n), m.mm.spec), rd(pt.buf, 0, 0), x, y))
			continue
		}
		push.KSplit = slice
		ops = append(ops,
			newOp(m.mm, push, shaders.MatmulSplitGroups(pt.rows, uint32(n), m.mm.spec, splits), rd(pt.buf, 0, 0), x, wr(m.sk.scratch, 0, 0)),
			newOp(m.sk.reduce, shaders.MatmulReducePush{Rows: pt.rows, N: uint32(n), Splits: splits, LdY: m.rows, YOff: pt.yOff},
				shaders.MatmulReduceGroups(pt.rows, uint32(n)), rd(m.sk.scratch, 0, 0), y))
	}
	return ops
}

// opsInPieces is ops over n rows of x, cut into pieces of rows whose
// bindings of x and y stay within maxRange, the profile's
// maxStorageBufferRange (the logits of a long window pass it: 4096 tokens
// of a 32,000 vocabulary are 524 MB; 256 rows of Llama 3's 128,256 are 131
// MB). x and y are bound for the n rows only, never whole: a buffer sized
// for a longer chunk may itself be over the range. A piece is a multiple of
// the rows whose x and y both fill whole multiples of align
// (minStorageBufferOffsetAlignment), so each piece's offsets are aligned.
func (m batchMat) opsInPieces(maxRange, align uint64, x, y *vk.Buffer, n int) []op {
	xRow, yRow := 4*uint64(m.cols), 4*uint64(m.rows)
	per := rowsPerPiece(maxRange, align, n, xRow, yRow)
	var ops []op
	for i := 0; i < n; i += per {
		k := min(per, n-i)
		ops = append(ops, m.opsBound(rd(x, uint64(i)*xRow, uint64(k)*xRow), wr(y, uint64(i)*yRow, uint64(k)*yRow), k, k)...)
	}
	return ops
}

// splitRows is the one range splitter: how many of n rows of rowBytes
// each one binding takes when a binding must stay within maxRange (the
// profile's maxStorageBufferRange; 0: no limit), in a multiple of step
// rows. It is n when all fit; ok is false when not even step rows do.
// Weight pieces (pieceRows), row-wise matmuls and losses (rowsPerPiece)
// and attention's row groups (attentionGroupRows) all split by it.
func splitRows(maxRange uint64, n int, rowBytes uint64, step int) (per int, ok bool) {
	if maxRange == 0 || uint64(n)*rowBytes <= maxRange {
		return n, true
	}
	per = int(maxRange / rowBytes / uint64(step) * uint64(step))
	return per, per > 0
}

// alignedStep is the fewest rows after which a binding of rows of each of
// rowBytes starts at a multiple of align again.
func alignedStep(align uint64, rowBytes ...uint64) int {
	align = max(align, 1)
	step := uint64(1)
	for _, b := range rowBytes {
		step = lcm(step, align/gcd(align, b))
	}
	return int(step)
}

// rowsPerPiece is how many of n rows one piece binds when each binding of
// rows of rowBytes must stay within maxRange and start at a multiple of
// align (splitRows by the widest, in alignedStep rows). It is n too when
// not even one step fits: one piece, which the recorder then refuses by
// name.
func rowsPerPiece(maxRange, align uint64, n int, rowBytes ...uint64) int {
	per, ok := splitRows(maxRange, n, slices.Max(rowBytes), alignedStep(align, rowBytes...))
	if !ok {
		return n
	}
	return per
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func lcm(a, b uint64) uint64 { return a / gcd(a, b) * b }

// newBatchActs allocates, through must, the per-row scratch of a batch of
// up to rows rows (the block's activations); the routing and output
// buffers are the caller's.
func (r *Runner) newBatchActs(must func(uint64, vk.BufferKind) *vk.Buffer, rows int) batchActs {
	c := r.c
	f32 := func(n int) uint64 { return 4 * uint64(rows) * uint64(n) }
	dev := vk.DeviceLocal
	kvd, qd := c.KVDim(), c.NHead*c.HeadDim
	var a batchActs
	a.x, a.xs, a.xn, a.ob = must(f32(c.NEmbd), dev), must(f32(c.NEmbd), dev), must(f32(c.NEmbd), dev), must(f32(c.NEmbd), dev)
	a.q, a.qr, a.att = must(f32(qd), dev), must(f32(qd), dev), must(f32(qd), dev)
	a.k, a.kr, a.v = must(f32(kvd), dev), must(f32(kvd), dev), must(f32(kvd), dev)
	a.gate, a.up, a.h = must(f32(c.NFF), dev), must(f32(c.NFF), dev), must(f32(c.NFF), dev)
	return a
}
