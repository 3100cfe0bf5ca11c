package shaders

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Matmul tolerances, relative to sum_j |W[r][j] * x[s][j]| (what fp32
// rounding of the sum can lose). The oracle is mod.MatMul, which sums in
// float32 too, so the bound covers two float32 sums of the same exact
// products in different orders (the reference: 4 partial sums for F32, one
// running sum for F16, per-block sums for Q8_0; the kernel: one running sum
// over the tiles). Both are within a few ulps of the scale on these sizes
// (cols <= 300); the decoded weights are exact on both sides (a Q8_0 weight
// d*q has at most 19 significant bits). The sub-block types decode each
// weight as (d*sc)*(q-zero) - dmin*m, as ggml does; a GPU compiler may fuse
// the multiply and the subtraction (one rounding fewer than ggml), an ulp
// of a weight, well inside the same bound (measured: 2e-7 of the scale).
var matmulTolerance = map[gguf.TensorType]float64{
	gguf.TypeF32:  1e-5,
	gguf.TypeF16:  1e-5,
	gguf.TypeBF16: 1e-5,
	gguf.TypeQ8_0: 1e-5,
	gguf.TypeQ4_0: 1e-5,
	gguf.TypeQ4_1: 1e-5,
	gguf.TypeQ5_0: 1e-5,
	gguf.TypeQ5_1: 1e-5,
	gguf.TypeQ2_K: 1e-5,
	gguf.TypeQ3_K: 1e-5,
	gguf.TypeQ4_K: 1e-5,
	gguf.TypeQ5_K: 1e-5,
	gguf.TypeQ6_K: 1e-5,
}

// matmulVariantOf is matmul's variant for each weight type, as the engine
// names it.
func matmulVariantOf(typ gguf.TensorType) string { return MatmulName(matvecTypeOf[typ]) }

// matmulTypes are the weight types matmul takes: every type gguf decodes.
var matmulTypes = gguf.SupportedTypes

// matmulLayout is ggml bytes of rows x cols in matmul's layout for typ
// (MatvecBytes: the quantized types split, as the engine uploads them).
func matmulLayout(t testing.TB, typ gguf.TensorType, ggml []byte, rows, cols int) []byte {
	t.Helper()
	b, err := MatvecBytes(matvecTypeOf[typ], ggml, rows, cols)
	require.NoError(t, err)
	return b
}

// matmulCase is one problem: W [rows][cols] of type typ, x [n][cols].
type matmulCase struct {
	typ           gguf.TensorType
	rows, cols, n int
	w             []byte    // ggml bytes
	x             []float32 // [n][cols]
	want, scale   []float64 // [n][rows]: mod.MatMul, and sum |w*x|
	// xprep, when set, is a pass over x (split_halves) whose output the
	// kernel reads as its x: a word per element.
	xprep *vk.Kernel
}

func newMatmulCase(t testing.TB, typ gguf.TensorType, rows, cols, n int, seed int64) *matmulCase {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	src := make([]float32, rows*cols)
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	w, err := gguf.Quantize(typ, src)
	require.NoError(t, err)
	wf := make([]float32, rows*cols) // what the reference multiplies by
	require.NoError(t, gguf.Dequantize(typ, w, wf))
	m, err := mod.NewMat("w", typ, []uint64{uint64(cols), uint64(rows)}, w)
	require.NoError(t, err)
	c := &matmulCase{typ: typ, rows: rows, cols: cols, n: n, w: w, x: make([]float32, n*cols)}
	for i := range c.x {
		c.x[i] = float32(rng.NormFloat64())
	}
	out := make([]float32, n*rows)
	mod.MatMul(out, c.x, &m, n)
	c.want, c.scale = make([]float64, n*rows), make([]float64, n*rows)
	for s := 0; s < n; s++ {
		for r := 0; r < rows; r++ {
			var abs float64
			for j := 0; j < cols; j++ {
				abs += math.Abs(float64(wf[r*cols+j]) * float64(c.x[s*cols+j]))
			}
			c.want[s*rows+r], c.scale[s*rows+r] = float64(out[s*rows+r]), abs
		}
	}
	return c
}

// run computes the case on the GPU with kernel k made from spec, the
// matrix bound whole.
func (c *matmulCase) run(t testing.TB, dev *vk.Device, k *vk.Kernel, spec MatmulSpec) []float32 {
	return c.runParts(t, dev, k, matmulGroupsOf(spec), nil, false)
}

// matmulGroupsOf is matmul's dispatch size for spec, as runParts takes it.
func matmulGroupsOf(spec MatmulSpec) func(rows, n uint32) [3]uint32 {
	return func(rows, n uint32) [3]uint32 { return MatmulGroups(rows, n, spec) }
}

// runParts computes the case in parts of rows: the rows from cuts[i] to
// cuts[i+1] (0 and rows at the ends) by a dispatch each, all writing one y.
// With pieces each part is a matrix of its own in its own buffer (a matrix
// bound in pieces), else each reads its rows of the whole matrix's binding
// from WRow0 (a stack's parts).
// groups is the dispatch size of rows and n tokens (matmul's or
// matmul_coop's, for k's spec).
func (c *matmulCase) runParts(t testing.TB, dev *vk.Device, k *vk.Kernel, groups func(rows, n uint32) [3]uint32, cuts []int, pieces bool) []float32 {
	return c.runPartsSplit(t, dev, k, groups, cuts, pieces, nil)
}

// matmulSplitK is how a split run cuts K (runSplit): into slices of
// kSplit columns (MatmulPush.KSplit), each slice's partial sums written to
// a scratch buffer and summed into y by reduce (splitk_reduce); spec is
// the matmul kernel's constants.
type matmulSplitK struct {
	reduce *vk.Kernel
	spec   []uint32
	kSplit int
}

// runPartsSplit is runParts, each part split along K by split when it is
// not nil: the part's split dispatch, then its reduce into its columns of y.
func (c *matmulCase) runPartsSplit(t testing.TB, dev *vk.Device, k *vk.Kernel, groups func(rows, n uint32) [3]uint32, cuts []int, pieces bool, split *matmulSplitK) []float32 {
	t.Helper()
	xb := newBuffer(t, dev, f32bytes(c.x))
	defer xb.Close()
	yb, err := dev.NewBuffer(uint64(4*c.n*c.rows), vk.DeviceLocal)
	require.NoError(t, err)
	defer yb.Close()
	rec := dev.NewRecorder()
	defer rec.Close()
	rec.Fill(yb, 0, yb.Size(), 0x7fc00000) // NaN: an output the kernel skips shows
	if c.xprep != nil {
		words, err := dev.NewBuffer(uint64(4*len(c.x)), vk.DeviceLocal)
		require.NoError(t, err)
		defer words.Close()
		recordSplitHalves(rec, c.xprep, xb, words, uint32(len(c.x)))
		xb = words
	}
	var scratch *vk.Buffer
	splits := 0
	if split != nil {
		splits = (c.cols + split.kSplit - 1) / split.kSplit
		scratch, err = dev.NewBuffer(uint64(4*splits*c.n*c.rows), vk.DeviceLocal)
		require.NoError(t, err)
		defer scratch.Close()
		rec.Fill(scratch, 0, scratch.Size(), 0x7fc00000) // and a partial nobody writes
	}
	bounds := append(append([]int{0}, cuts...), c.rows)
	rowBytes := len(c.w) / c.rows
	whole := newBuffer(t, dev, matmulLayout(t, c.typ, c.w, c.rows, c.cols))
	defer whole.Close()
	for i := 0; i+1 < len(bounds); i++ {
		r0, r1 := bounds[i], bounds[i+1]
		push := MatmulPush{Rows: uint32(r1 - r0), Cols: uint32(c.cols), N: uint32(c.n), WRow0: uint32(r0), WRows: uint32(c.rows),
			LdY: uint32(c.rows), YOff: uint32(r0)}
		wb := whole
		if pieces {
			wb = newBuffer(t, dev, matmulLayout(t, c.typ, c.w[r0*rowBytes:r1*rowBytes], r1-r0, c.cols))
			defer wb.Close()
			push.WRow0, push.WRows = 0, uint32(r1-r0)
		}
		w, x, y := vk.Bind{Buf: wb, Access: vk.Read}, vk.Bind{Buf: xb, Access: vk.Read}, vk.Bind{Buf: yb, Access: vk.Write}
		if split == nil {
			rec.Dispatch(k, vk.MustPackPush(push), groups(push.Rows, push.N), w, x, y)
			continue
		}
		push.KSplit = uint32(split.kSplit)
		rec.Dispatch(k, vk.MustPackPush(push), MatmulSplitGroups(push.Rows, push.N, split.spec, uint32(splits)), w, x, vk.Bind{Buf: scratch, Access: vk.Write})
		rec.Dispatch(split.reduce, vk.MustPackPush(MatmulReducePush{Rows: push.Rows, N: push.N, Splits: uint32(splits), LdY: push.LdY, YOff: push.YOff}),
			MatmulReduceGroups(push.Rows, push.N), vk.Bind{Buf: scratch, Access: vk.Read}, y)
	}
	require.NoError(t, dev.Run(rec))
	return download(t, yb, c.n*c.rows)
}

// errStats is the max abs error and the max error relative to scale, for
// the log: a passing test still says how close it came.
type errStats struct{ abs, rel float64 }

func (e *errStats) add(got []float32, want, scale []float64) {
	for i := range got {
		d := math.Abs(float64(got[i]) - want[i])
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		e.abs = math.Max(e.abs, d)
		if scale[i] > 0 {
			e.rel = math.Max(e.rel, d/scale[i])
		}
	}
}

func (e errStats) String() string {
	return fmt.Sprintf("max abs err %.3g, max err/scale %.3g", e.abs, e.rel)
}

// matmulSpecs are the presets and tiles that exercise the index arithmetic:
// non-square, TM != TN, a 4-wide step, one output per invocation, and a tile
// whose sides are not powers of two.
var matmulSpecs = []MatmulSpec{
	MatmulSpecGPU,
	MatmulSpecCPU,
	{BM: 8, BN: 24, BK: 4, TM: 2, TN: 3},
	{BM: 16, BN: 16, BK: 8, TM: 1, TN: 1},
	{BM: 12, BN: 40, BK: 12, TM: 3, TN: 5},
}

func TestMatmul(t *testing.T) {
	dev := openDevice(t)
	rowsList := []int{1, 13, 67, 130}
	nList := []int{1, 5, 33, 70} // 70: more than one token tile of every spec
	for _, typ := range matmulTypes {
		v, err := Lookup(matmulVariantOf(typ))
		require.NoError(t, err)
		var stats errStats
		for si, spec := range matmulSpecs {
			require.NoError(t, spec.Check())
			k := newKernel(t, dev, v, spec.Constants()...)
			for ci, cols := range testCols(typ) {
				for ri, rows := range testRows(typ, rowsList) {
					// Every cols and rows with every spec, the n rotating.
					n := nList[(si+ci+ri)%len(nList)]
					name := fmt.Sprintf("%s/%+v/%dx%d/n%d", typ, spec, rows, cols, n)
					c := newMatmulCase(t, typ, rows, cols, n, int64(rows*1000+cols*10+n))
					got := c.run(t, dev, k, spec)
					stats.add(got, c.want, c.scale)
					if err := closeness(got, c.want, c.scale, matmulTolerance[typ]); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			}
		}
		t.Logf("%s: %v (tolerance %g)", typ, stats, matmulTolerance[typ])
	}
}

// pipeSpecs are the pipelined tile (double-buffered, staged along the
// rows) and tiles that exercise its index arithmetic the way matmulSpecs do
// the plain kernel's, with and without Along.
var pipeSpecs = []MatmulSpec{
	MatmulSpecPipe,
	{BM: 8, BN: 24, BK: 4, TM: 2, TN: 3, Along: true, Pipe: true},
	{BM: 16, BN: 16, BK: 8, TM: 1, TN: 1, Pipe: true},
	{BM: 12, BN: 40, BK: 12, TM: 3, TN: 5, Along: true, Pipe: true},
	{BM: 64, BN: 64, BK: 16, TM: 8, TN: 4, Along: true, Pipe: true},
}

// TestMatmulPrefetch is TestMatmul's check of the prefetching variants
// (MATMUL_PREFETCH), every weight type and spec, single and double
// buffered (pipeSpecs), ragged shapes.
func TestMatmulPrefetch(t *testing.T) {
	dev := openDevice(t)
	for _, typ := range matmulTypes {
		v, err := Lookup(MatmulPrefetchName(matvecTypeOf[typ]))
		require.NoError(t, err)
		for si, spec := range append(append([]MatmulSpec(nil), matmulSpecs...), pipeSpecs...) {
			k := newKernel(t, dev, v, spec.Constants()...)
			cols := testCols(typ)[si%len(testCols(typ))]
			for _, sh := range []struct{ rows, n int }{{13, 5}, {130, 70}} {
				c := newMatmulCase(t, typ, sh.rows, cols, sh.n, int64(sh.rows*1000+cols*10+sh.n))
				if err := closeness(c.run(t, dev, k, spec), c.want, c.scale, matmulTolerance[typ]); err != nil {
					t.Errorf("%s/%+v/%dx%d/n%d: %v", typ, spec, sh.rows, cols, sh.n, err)
				}
			}
		}
	}
}

// TestMatmulLongRows runs rows of 16384 columns (Llama-3-8B's nFF is 14336)
// with every spec: lavapipe silently ends an invocation's loops after 65535
// iterations in all (llvmpipe's loop limiter), which a kernel looping too
// often per column would hit here, with wrong sums and no error.
func TestMatmulLongRows(t *testing.T) {
	dev := openDevice(t)
	for _, typ := range matmulTypes {
		v, err := Lookup(matmulVariantOf(typ))
		require.NoError(t, err)
		pf, err := Lookup(MatmulPrefetchName(matvecTypeOf[typ]))
		require.NoError(t, err)
		c := newMatmulCase(t, typ, 5, 16384, 3, 16384)
		var stats errStats
		for _, spec := range append(append([]MatmulSpec(nil), matmulSpecs...), MatmulSpecPipe) {
			kv := v
			if spec.Pipe {
				kv = pf
			}
			got := c.run(t, dev, newKernel(t, dev, kv, spec.Constants()...), spec)
			stats.add(got, c.want, c.scale)
			if err := closeness(got, c.want, c.scale, matmulTolerance[typ]); err != nil {
				t.Errorf("%s/%+v/5x16384/n3: %v", typ, spec, err)
			}
		}
		t.Logf("%s: %v (tolerance %g)", typ, stats, matmulTolerance[typ])
	}
}

// TestMatmulParts: a matrix computed in row ranges, each from its rows of
// one binding (WRow0: a stack's parts) or from a buffer of its own (a
// matrix bound in pieces), each writing its columns of one y (LdY, YOff),
// equals the whole; the cuts are uneven and not tile multiples.
func TestMatmulParts(t *testing.T) {
	dev := openDevice(t)
	spec := MatmulSpec{BM: 8, BN: 24, BK: 4, TM: 2, TN: 3}
	for _, typ := range matmulTypes {
		v, err := Lookup(matmulVariantOf(typ))
		require.NoError(t, err)
		k := newKernel(t, dev, v, spec.Constants()...)
		c := newMatmulCase(t, typ, 77, testCols(typ)[1], 9, 7796)
		for _, pieces := range []bool{false, true} {
			got := c.runParts(t, dev, k, matmulGroupsOf(spec), []int{5, 40, 41}, pieces)
			if err := closeness(got, c.want, c.scale, matmulTolerance[typ]); err != nil {
				t.Errorf("%s pieces=%v: %v", typ, pieces, err)
			}
		}
	}
}

func TestMatmulSpec(t *testing.T) {
	for _, s := range []MatmulSpec{MatmulSpecGPU, MatmulSpecCPU} {
		require.NoError(t, s.Check())
		assert.LessOrEqual(t, s.SharedBytes(), uint32(16<<10), "%+v: shared memory (every device has 16 KiB)", s)
		assert.LessOrEqual(t, s.Invocations(), uint32(128), "%+v: workgroup size (every device has 128)", s)
	}
	assert.Equal(t, []uint32{128, 64, 64, 16, 8, 4, 0, 0}, MatmulSpecGPU.Constants())
	// The pipelined tile: 256 invocations (every desktop GPU's limit is
	// 1024) in lavapipe's 32 KiB, so CI runs it under the GPU profile.
	require.NoError(t, MatmulSpecPipe.Check())
	assert.Equal(t, []uint32{256, 128, 64, 16, 8, 4, 1, 1}, MatmulSpecPipe.Constants())
	assert.Equal(t, uint32(2*4*16*(128+64+2*2)), MatmulSpecPipe.SharedBytes(), "two copies, both tiles' columns padded by 2 quads")
	assert.LessOrEqual(t, MatmulSpecPipe.SharedBytes(), uint32(32<<10))
	assert.Equal(t, "matmul_pf_q8_0", MatmulSpecPipe.Kernel("q8_0"))
	assert.Equal(t, "matmul_q8_0", MatmulSpecGPU.Kernel("q8_0"))
	assert.Error(t, MatmulSpec{BM: 8, BN: 8, BK: 6, TM: 2, TN: 2}.Check(), "BK not a multiple of 4")
	assert.Error(t, MatmulSpec{BM: 8, BN: 8, BK: 8, TM: 3, TN: 2}.Check(), "TM does not divide BM")
	assert.Error(t, MatmulSpec{BM: 8, BN: 8, BK: 8, TM: 2, TN: 0}.Check())
	assert.Equal(t, [3]uint32{3, 2, 1}, MatmulGroups(130, 33, MatmulSpec{BM: 32, BN: 64}))
}

// Attention tolerance, relative to sum_e p_e |v_e[d]| (the size of the terms
// averaged into an output). The oracle, mod.Attend, computes in float32 too;
// the kernel differs in three roundings: its exp (Vulkan allows 3 + 2|x|
// ulp, Go's is correctly rounded from float64), the order it sums the
// probabilities and outputs in (WG strided online partials, then a merge),
// and the rescaling of partial sums when the running max grows. Scores here
// reach +-120 (the max-subtraction case), where a score's own rounding is
// ~1e-5 absolute and moves its probability by that relative amount.
const attentionTolerance = 1e-5

// attentionCase is one problem: q [n][nHead*hd], a cache of entries rows
// with positions kPos, and query rows at positions qPos.
type attentionCase struct {
	n, entries, nHead, nKVHead, hd int
	q, k, v                        []float32
	kPos, qPos                     []uint32
}

// newAttentionCase makes random q, k, v (q times qScale, to sharpen the
// softmax) and a compact cache: positions ascending with random gaps, as a
// routed layer keeps its selected tokens. The queries are the last n
// entries, as in a prefill or decode step.
func newAttentionCase(n, entries, nHead, nKVHead, hd int, qScale float64, seed int64) *attentionCase {
	rng := rand.New(rand.NewSource(seed))
	c := &attentionCase{n: n, entries: entries, nHead: nHead, nKVHead: nKVHead, hd: hd}
	normal := func(count int, s float64) []float32 {
		x := make([]float32, count)
		for i := range x {
			x[i] = float32(s * rng.NormFloat64())
		}
		return x
	}
	c.q = normal(n*nHead*hd, qScale)
	c.k = normal(entries*nKVHead*hd, 1)
	c.v = normal(entries*nKVHead*hd, 1)
	c.kPos = make([]uint32, entries)
	pos := uint32(rng.Intn(3))
	for e := range c.kPos {
		c.kPos[e] = pos
		pos += 1 + uint32(rng.Intn(4))
	}
	c.qPos = slices.Clone(c.kPos[entries-n:])
	return c
}

// reference is mod.Attend row by row over the entries each row may see (in
// cache order), with the float64 scale sum_e p_e |v_e[d]| beside it. A row
// that sees no entry wants zeros.
func (c *attentionCase) reference() (want, scale []float64) {
	qd, kvd := c.nHead*c.hd, c.nKVHead*c.hd
	want, scale = make([]float64, c.n*qd), make([]float64, c.n*qd)
	out := make([]float32, qd)
	for i := 0; i < c.n; i++ {
		var k, v []float32 // [m][kvd]: the visible entries
		var visible []int
		for e, p := range c.kPos {
			if p <= c.qPos[i] {
				k = append(k, c.k[e*kvd:(e+1)*kvd]...)
				v = append(v, c.v[e*kvd:(e+1)*kvd]...)
				visible = append(visible, e)
			}
		}
		m := len(visible)
		if m == 0 {
			for j := 0; j < qd; j++ {
				scale[i*qd+j] = 1
			}
			continue
		}
		// The row is the last of m entries: it attends to all of them.
		mod.Attend(out, c.q[i*qd:(i+1)*qd], k, v, m-1, 1, c.nHead, c.nKVHead, c.hd)
		for h := 0; h < c.nHead; h++ {
			kvh := h / (c.nHead / c.nKVHead)
			p := make([]float64, m)
			mx := math.Inf(-1)
			for e := range p {
				for d := 0; d < c.hd; d++ {
					p[e] += float64(c.q[i*qd+h*c.hd+d]) * float64(k[e*kvd+kvh*c.hd+d])
				}
				p[e] /= math.Sqrt(float64(c.hd))
				mx = math.Max(mx, p[e])
			}
			var sum float64
			for e := range p {
				p[e] = math.Exp(p[e] - mx)
				sum += p[e]
			}
			for d := 0; d < c.hd; d++ {
				j := i*qd + h*c.hd + d
				want[j] = float64(out[h*c.hd+d])
				for e := range p {
					scale[j] += p[e] / sum * math.Abs(float64(v[e*kvd+kvh*c.hd+d]))
				}
			}
		}
	}
	return want, scale
}

func u32bytes(x []uint32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// attentionBuffers holds a case's inputs and output on the device.
type attentionBuffers struct {
	q, k, v, kPos, qPos, out *vk.Buffer
}

func (c *attentionCase) upload(t testing.TB, dev *vk.Device) *attentionBuffers {
	t.Helper()
	out, err := dev.NewBuffer(uint64(4*c.n*c.nHead*c.hd), vk.DeviceLocal)
	require.NoError(t, err)
	t.Cleanup(out.Close)
	return &attentionBuffers{q: newBuffer(t, dev, f32bytes(c.q)), k: newBuffer(t, dev, f32bytes(c.k)),
		v: newBuffer(t, dev, f32bytes(c.v)), kPos: newBuffer(t, dev, u32bytes(c.kPos)),
		qPos: newBuffer(t, dev, u32bytes(c.qPos)), out: out}
}

func (b *attentionBuffers) close() {
	for _, x := range []*vk.Buffer{b.q, b.k, b.v, b.kPos, b.qPos, b.out} {
		x.Close()
	}
}

// runTiled computes c with attention_split (for c's head dimension) and
// attention_merge in key tiles of splitLen.
func (c *attentionCase) runTiled(t testing.TB, dev *vk.Device, splitLen, sorted uint32) []float32 {
	t.Helper()
	split := newKernel(t, dev, lookup(t, "attention_split"), AttentionSplitSpec(uint32(c.hd))...)
	merge := newKernel(t, dev, lookup(t, "attention_merge"))
	return c.runSplit(t, dev, split, merge, splitLen, false, false, sorted, nil)
}

// TestAttention checks attention_split and attention_merge against
// mod.Attend on caches in position order whose last n entries are the
// queries: decode (n = 1) and prefill, ragged head counts and GQA groups,
// head sizes 8, 16, 64 and 128, 1 to 2048 entries, and a sharp softmax
// whose exponentials overflow float32 unless the max is subtracted; in
// tiles of the CPU device's length and of 7, Sorted and not.
func TestAttention(t *testing.T) {
	dev := openDevice(t)
	cases := []struct {
		n, entries, nHead, nKVHead, hd int
		qScale                         float64
	}{
		{1, 1, 1, 1, 8, 1},
		{1, 2, 4, 2, 8, 1},
		{1, 37, 6, 2, 16, 1},
		{1, 600, 4, 1, 64, 1},
		{1, 513, 3, 3, 16, 8},
		{5, 5, 2, 1, 8, 1},
		{7, 100, 6, 3, 16, 1},
		{33, 33, 5, 1, 64, 1},
		{40, 300, 4, 2, 8, 8},
		{17, 600, 2, 2, 64, 1},
		{9, 64, 3, 1, 16, 40}, // scores up to ~+-120: exp overflows without the max
		{1, 250, 8, 8, 64, 40},
		{2, 2048, 2, 1, 128, 1}, // a long cache and the largest head: lavapipe's loop limiter
	}
	var stats errStats
	for i, tc := range cases {
		c := newAttentionCase(tc.n, tc.entries, tc.nHead, tc.nKVHead, tc.hd, tc.qScale, int64(i))
		want, scale := c.reference()
		for _, splitLen := range []uint32{AttentionSplitLen(uint32(tc.hd), true), 7} {
			for _, sorted := range []uint32{0, 1} {
				name := fmt.Sprintf("n%d/entries%d/heads%d:%d/hd%d/qscale%g/tile%d/sorted%d", tc.n, tc.entries, tc.nHead, tc.nKVHead, tc.hd, tc.qScale, splitLen, sorted)
				got := c.runTiled(t, dev, splitLen, sorted)
				stats.add(got, want, scale)
				if err := closeness(got, want, scale, attentionTolerance); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		}
	}
	t.Logf("%v (tolerance %g)", stats, attentionTolerance)
}

// TestAttentionMasked gives the queries positions that are not the cache's
// last: some cache entries are later than some queries (masked), a query may
// sit between entries, before every entry (it sees none: zeros) or after
// all; and a cache out of position order, which the kernel must not assume
// unless told the cache is Sorted (these ascend unless shuffled).
func TestAttentionMasked(t *testing.T) {
	dev := openDevice(t)
	var stats errStats
	var sawNone, sawSome bool // a row that sees no entry; one that sees some, not all
	for i, tc := range []struct {
		n, entries, nHead, nKVHead, hd int
		shuffle                        bool
	}{
		{1, 200, 4, 2, 16, false},
		{9, 200, 6, 2, 8, false},
		{12, 517, 4, 4, 64, false},
		{9, 200, 6, 3, 16, true},
		{1, 1, 2, 1, 8, false},
	} {
		c := newAttentionCase(tc.n, tc.entries, tc.nHead, tc.nKVHead, tc.hd, 1, int64(100+i))
		rng := rand.New(rand.NewSource(int64(i)))
		last := int(c.kPos[tc.entries-1])
		for j := range c.qPos {
			c.qPos[j] = uint32(rng.Intn(last + 10))
		}
		c.qPos[0] = c.kPos[0] + 1 // between the first two entries (or after the only one)
		if tc.n > 2 {
			c.qPos[1] = c.kPos[0] - min(c.kPos[0], 1) // before every entry when kPos[0] > 0
			c.kPos[0] = max(c.kPos[0], 1)             // ... which this makes so
		}
		if tc.shuffle {
			kvd := tc.nKVHead * tc.hd
			for e := range c.kPos {
				f := rng.Intn(e + 1)
				c.kPos[e], c.kPos[f] = c.kPos[f], c.kPos[e]
				for j := 0; j < kvd; j++ {
					c.k[e*kvd+j], c.k[f*kvd+j] = c.k[f*kvd+j], c.k[e*kvd+j]
					c.v[e*kvd+j], c.v[f*kvd+j] = c.v[f*kvd+j], c.v[e*kvd+j]
				}
			}
		}
		for _, qp := range c.qPos {
			seen := 0
			for _, kp := range c.kPos {
				if kp <= qp {
					seen++
				}
			}
			sawNone = sawNone || seen == 0
			sawSome = sawSome || seen > 0 && seen < tc.entries
		}
		want, scale := c.reference()
		sorted := uint32(1)
		if tc.shuffle {
			sorted = 0
		}
		for _, splitLen := range []uint32{AttentionSplitLen(uint32(tc.hd), true), 50} {
			got := c.runTiled(t, dev, splitLen, sorted)
			stats.add(got, want, scale)
			name := fmt.Sprintf("n%d/entries%d/heads%d:%d/hd%d/shuffled=%v/tile%d", tc.n, tc.entries, tc.nHead, tc.nKVHead, tc.hd, tc.shuffle, splitLen)
			if err := closeness(got, want, scale, attentionTolerance); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	assert.True(t, sawNone, "some row sees no entry")
	assert.True(t, sawSome, "some row sees some entries, not all")
	t.Logf("%v (tolerance %g)", stats, attentionTolerance)
}

// recordSplitHalves records split_halves (kernel k) over n values of x
// into words, a packHalf2x16(hi, lo) each: the COOP_XSPLIT matmuls' x.
func recordSplitHalves(rec *vk.Recorder, k *vk.Kernel, x, words *vk.Buffer, n uint32) {
	rec.Dispatch(k, vk.MustPackPush(AddPush{N: n}), ElementGroups(n), vk.Bind{Buf: x, Access: vk.Read}, vk.Bind{Buf: words, Access: vk.Write})
}
