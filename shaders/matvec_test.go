package shaders

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tolerances, relative to sum_j |W[r][j] * x[j]| (what fp32 rounding of the
// sum can lose). The reference dequantizes W exactly as the CPU model does
// (gguf.Dequantize) and sums in float64, so what is left is the kernel's
// float32 accumulation in a different order than the reference:
//   - F32, F16, BF16: the decoded weights are exactly the reference's; only
//     the summation order differs (4-wide dots, strided partial sums, then a
//     tree or subgroupAdd): a few ulps.
//   - Q8_0, Q4_0: the kernel sums q*x within a block and multiplies by the
//     scale once, where the reference multiplies each element: one more
//     rounding.
//   - the sub-block types (Q4_1, Q5_0, Q5_1, K-quants): as Q8_0 per
//     sub-block, and with a min (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) the kernel
//     subtracts dmin*m*sum(x) from d*sc*sum(q*x), two sums each up to about
//     the size of the row's terms (q*d*sc and dmin*m are of the same
//     magnitude as the weights they make), so their roundings cancel less:
//     a few times Q8_0's bound.
var matvecTolerance = map[gguf.TensorType]float64{
	gguf.TypeF32:  1e-5,
	gguf.TypeF16:  1e-5,
	gguf.TypeBF16: 1e-5,
	gguf.TypeQ8_0: 2e-5,
	gguf.TypeQ4_0: 2e-5,
	gguf.TypeQ4_1: 5e-5,
	gguf.TypeQ5_0: 2e-5,
	gguf.TypeQ5_1: 5e-5,
	gguf.TypeQ2_K: 5e-5,
	gguf.TypeQ3_K: 2e-5,
	gguf.TypeQ4_K: 5e-5,
	gguf.TypeQ5_K: 5e-5,
	gguf.TypeQ6_K: 2e-5,
}

// matvecTypeOf is matvec's name for each weight type: the GPU weight table's
// row of its ggml name, as the engine finds it.
var matvecTypeOf = func() map[gguf.TensorType]string {
	m := map[gguf.TensorType]string{}
	for _, typ := range gguf.SupportedTypes {
		if wt, ok := WeightForGGML(typ.String()); ok {
			m[typ] = wt.Name
		}
	}
	return m
}()

// matvecWeightTypes are every type gguf decodes: the GPU must read them all.
var matvecWeightTypes = gguf.SupportedTypes

// testRows keeps the K-quants' cases (rows of 256 values and more) to
// ragged row counts under 100, for the suite's time on lavapipe.
func testRows(typ gguf.TensorType, rows []int) []int {
	if typ.BlockSize() < 256 {
		return rows
	}
	return slices.DeleteFunc(slices.Clone(rows), func(r int) bool { return r > 100 })
}

// testCols are the row lengths the kernel tests take for each type: ragged
// for the plain types (scalar paths), odd counts of blocks (scales that do
// not fill a word) for the quantized ones.
func testCols(typ gguf.TensorType) []int {
	switch {
	case typ == gguf.TypeF32:
		return []int{32, 96, 172, 7, 30} // 7, 30: not a multiple of 4, the scalar path
	case typ.BlockSize() == 1:
		return []int{32, 96, 172, 7} // 172, 7: not a multiple of 8, the scalar path
	case typ.BlockSize() == 32:
		return []int{32, 96, 160} // 160: 5 blocks, an odd count of scales a row
	}
	return []int{256, 768} // 3 super-blocks
}

// matvecCase is one problem: W [rows][cols] of type typ, x [n][cols].
type matvecCase struct {
	typ           gguf.TensorType
	rows, cols, n int
	w             []byte    // ggml bytes
	gpu           []byte    // w as matvec reads it (MatvecBytes)
	wf            []float32 // W dequantized: the reference's weights
	x             []float32
	want, scale   []float64 // [n][rows]
}

func newMatvecCase(typ gguf.TensorType, rows, cols, n int, seed int64) (*matvecCase, error) {
	rng := rand.New(rand.NewSource(seed))
	src := make([]float32, rows*cols)
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	w, err := gguf.Quantize(typ, src)
	if err != nil {
		return nil, err
	}
	c := &matvecCase{typ: typ, rows: rows, cols: cols, n: n, w: w, wf: make([]float32, rows*cols)}
	if err := gguf.Dequantize(typ, w, c.wf); err != nil {
		return nil, err
	}
	if c.gpu, err = MatvecBytes(matvecTypeOf[typ], w, rows, cols); err != nil {
		return nil, err
	}
	c.x = make([]float32, n*cols)
	for i := range c.x {
		c.x[i] = float32(rng.NormFloat64())
	}
	c.want, c.scale = make([]float64, n*rows), make([]float64, n*rows)
	for s := 0; s < n; s++ {
		for r := 0; r < rows; r++ {
			var sum, abs float64
			for j := 0; j < cols; j++ {
				p := float64(c.wf[r*cols+j]) * float64(c.x[s*cols+j])
				sum += p
				abs += math.Abs(p)
			}
			c.want[s*rows+r], c.scale[s*rows+r] = sum, abs
		}
	}
	return c, nil
}

// run computes the case on the GPU with kernel k.
func (c *matvecCase) run(t testing.TB, dev *vk.Device, k *vk.Kernel) []float32 {
	spec := k.Spec().Specialization
	t.Helper()
	wb := newBuffer(t, dev, c.gpu)
	xb := newBuffer(t, dev, f32bytes(c.x))
	yb, err := dev.NewBuffer(uint64(4*c.n*c.rows), vk.DeviceLocal)
	require.NoError(t, err)
	defer yb.Close()
	rec := dev.NewRecorder()
	defer rec.Close()
	rec.Fill(yb, 0, yb.Size(), 0x7fc00000) // NaN: a row the kernel skips shows
	rec.Dispatch(k, vk.MustPackPush(MatvecPush{Rows: uint32(c.rows), Cols: uint32(c.cols), N: uint32(c.n)}),
		MatvecGroups(uint32(c.rows), spec),
		vk.Bind{Buf: wb, Access: vk.Read}, vk.Bind{Buf: xb, Access: vk.Read}, vk.Bind{Buf: yb, Access: vk.Write})
	require.NoError(t, dev.Run(rec))
	got := download(t, yb, c.n*c.rows)
	wb.Close()
	xb.Close()
	return got
}

// deviceOf is the Profile facts of dev (the engine makes them the same way).
func deviceOf(dev *vk.Device) Device {
	info := dev.Info()
	l := info.Limits
	return Device{CPU: info.Type == vk.CPU, Vendor: info.VendorID, SubgroupSize: DispatchSubgroupSize(info.VendorID, l.SubgroupSize, l.MinSubgroupSize, l.MaxSubgroupSize),
		SubgroupArithmetic: info.Features.SubgroupArithmetic, SubgroupBallot: info.Features.SubgroupBallot, SubgroupShuffle: info.Features.SubgroupShuffle,
		SharedMemory:            info.Limits.MaxComputeSharedMemorySize,
		MaxWorkGroupInvocations: info.Limits.MaxComputeWorkGroupInvocations, MaxStorageBufferRange: info.Limits.MaxStorageBufferRange,
		IntegerDotProduct: info.Features.IntegerDotProduct, IntegerDotProductAccelerated: info.Features.IntegerDotProductAccelerated}
}

// matvecSpecs are the (reduction, spec) pairs every matvec test runs on this
// device: the profiles a CPU device, a GPU with subgroup arithmetic and one
// without would choose, forced onto this device (so lavapipe runs the GPU
// variants, at its subgroup size 8), and other specs: several vectors per
// pass, several rows per invocation, and subgroup workgroups of one and of
// many rows.
func matvecSpecs(t testing.TB, dev *vk.Device) []matvecSpec {
	d := deviceOf(dev)
	var out []matvecSpec
	for _, p := range []Profile{NewProfile(Device{CPU: true, SubgroupSize: d.SubgroupSize}), gpuProfileOn(d, false)} {
		out = append(out, matvecSpec{p.MatvecReduce, p.MatvecSpec})
	}
	// Several rows an invocation: the CPU profile's sub-block specs, and
	// vectors in passes of 4 with 5 rows an invocation in workgroups of 3
	// (rows that fill neither).
	out = append(out, matvecSpec{ReduceShared, MatvecSubblockSpecCPU}, matvecSpec{ReduceShared, MatvecLowBitSpecCPU},
		matvecSpec{ReduceShared, []uint32{3, 1, 4, 5}})
	out = append(out, matvecSpec{ReduceShared, []uint32{64, 64, 4}}, matvecSpec{ReduceShared, []uint32{64, 1, 4}})
	if !d.SubgroupArithmetic {
		t.Logf("the device has no subgroup arithmetic: the subgroup variants are not tested here")
		return out
	}
	sg := d.SubgroupSize
	gpu := gpuProfileOn(d, true)
	require.Equal(t, ReduceSubgroup, gpu.MatvecReduce)
	return append(out, matvecSpec{gpu.MatvecReduce, gpu.MatvecSpec},
		matvecSpec{ReduceSubgroup, []uint32{sg, sg, 1}}, matvecSpec{ReduceSubgroup, []uint32{8 * sg, sg, 4}})
}

type matvecSpec struct {
	reduce string
	spec   []uint32
}

func (s matvecSpec) String() string {
	if s.reduce == ReduceSubgroup {
		return fmt.Sprint("subgroup", s.spec)
	}
	return fmt.Sprint("shared", s.spec)
}

func TestMatvec(t *testing.T) {
	dev := openDevice(t)
	rowsList := []int{1, 7, 67, 172, 513}
	for _, typ := range matvecWeightTypes {
		for _, sp := range matvecSpecs(t, dev) {
			v, err := Lookup(MatvecName(matvecTypeOf[typ], sp.reduce))
			require.NoError(t, err)
			k := newKernel(t, dev, v, sp.spec...)
			for _, rows := range testRows(typ, rowsList) {
				for _, cols := range testCols(typ) {
					for _, n := range []int{1, 3, 6} { // 6: two passes of 4 vectors
						name := fmt.Sprintf("%s/%v/%dx%d/n%d", typ, sp, rows, cols, n)
						c, err := newMatvecCase(typ, rows, cols, n, int64(rows*1000+cols*10+n))
						require.NoError(t, err, name)
						got := c.run(t, dev, k)
						if err := closeness(got, c.want, c.scale, matvecTolerance[typ]); err != nil {
							t.Errorf("%s: %v", name, err)
						}
					}
				}
			}
		}
	}
}

// TestMatvecWorkgroupSizes runs the shared-memory reduction with other
// workgroup sizes and invocations per row (specialization constants 0 and
// 1), including sizes that are not powers of two and rows that do not fill
// the last workgroup.
func TestMatvecWorkgroupSizes(t *testing.T) {
	dev := openDevice(t)
	for _, typ := range matvecWeightTypes {
		v, err := Lookup(MatvecName(matvecTypeOf[typ], ReduceShared))
		require.NoError(t, err)
		for _, spec := range [][]uint32{{1, 1, 1}, {32, 32, 2}, {48, 48, 3}, {100, 25, 4}, {256, 32, 1}, {96, 3, 5}, {64, 8, 2}, {64, 1, 3}} {
			k := newKernel(t, dev, v, spec...)
			cols := 320 // 10 blocks of 32
			if typ.BlockSize() == 256 {
				cols = 512
			}
			c, err := newMatvecCase(typ, 67, cols, 5, int64(spec[0]*100+spec[1]))
			require.NoError(t, err)
			if err := closeness(c.run(t, dev, k), c.want, c.scale, matvecTolerance[typ]); err != nil {
				t.Errorf("%s spec %v: %v", typ, spec, err)
			}
		}
	}
}

// TestMatvecLongLoops: lavapipe stops an invocation's loops after 65535
// iterations in all and returns garbage without an error. With an invocation
// per row, n=64 vectors of 1024 columns need ~130000; the profile of a
// device with the cap shares each row among enough invocations to stay
// under it, and a GPU profile has no cap.
func TestMatvecLongLoops(t *testing.T) {
	lp := lavapipeProfile
	assert.Greater(t, MatvecLoopIterations(64, 1024, lp.MatvecSpec), lp.LoopCap, "the shape crosses the limit with the profile's spec")
	name, spec := lp.Matvec(MatvecF16, FuseNone, 1, 4096)
	assert.Equal(t, lp.MatvecSpec, spec, "decode keeps the profile's spec")
	assert.Equal(t, MatvecName(MatvecF16, lp.MatvecReduce), name)
	gpu := NewProfile(Device{SubgroupSize: 32, SubgroupArithmetic: true, MaxWorkGroupInvocations: 1024})
	assert.Zero(t, gpu.LoopCap, "lavapipe's loop cap shapes lavapipe's variants only")
	gname, gspec := gpu.Matvec(MatvecQ8_0, FuseNone, 64, 1<<20)
	assert.Equal(t, MatvecName(MatvecQ8_0, ReduceSubgroupRows), gname)
	assert.Equal(t, MatvecRowsSpec(32), gspec)
	gpu.MatvecRows = false
	_, gspec = gpu.Matvec(MatvecQ8_0, FuseNone, 64, 1<<20)
	assert.Equal(t, []uint32{128, 32, 1}, gspec)

	for _, typ := range []string{MatvecQ8_0, MatvecQ4_1, MatvecQ4_K, MatvecQ6_K, MatvecQ2_K, MatvecQ3_K} {
		for _, fuse := range MatvecFusions {
			_, spec := lp.Matvec(typ, fuse, 1, 5632)
			want := MatvecSubblockSpecCPU
			if typ == MatvecQ2_K || typ == MatvecQ3_K {
				want = MatvecLowBitSpecCPU
			}
			if fuse == FuseNone || fuse == FuseAdd || typ == MatvecQ8_0 {
				assert.Equal(t, want, spec, "%s%s: Q8_0's and the sub-block types' decode walks rows together", typ, fuse)
			} else {
				assert.Equal(t, lp.MatvecSpec, spec, "%s%s: a fused norm walks a row at a time", typ, fuse)
			}
		}
	}

	dev := openDevice(t)
	for _, typ := range matvecWeightTypes {
		name, spec := lp.Matvec(matvecTypeOf[typ], FuseNone, 64, 1024)
		require.LessOrEqual(t, MatvecLoopIterations(64, 1024, spec), lp.LoopCap)
		v, err := Lookup(name)
		require.NoError(t, err)
		c, err := newMatvecCase(typ, 37, 1024, 64, 11)
		require.NoError(t, err)
		if err := closeness(c.run(t, dev, newKernel(t, dev, v, spec...)), c.want, c.scale, matvecTolerance[typ]); err != nil {
			t.Errorf("%s n=64 cols=1024 spec %v: %v", typ, spec, err)
		}
	}
}

// TestMatvecManyRows crosses 65535 workgroups, so the grid is 2D, with both
// reductions. One type is enough (the grid is the same code for all) and
// keeps lavapipe's 65537 workgroups to about a second.
func TestMatvecManyRows(t *testing.T) {
	dev := openDevice(t)
	c, err := newMatvecCase(gguf.TypeQ8_0, 65537, 32, 1, 7)
	require.NoError(t, err)
	sg := deviceOf(dev).SubgroupSize
	for _, sp := range []matvecSpec{{ReduceShared, []uint32{8, 8, 1}}, {ReduceSubgroup, []uint32{sg, sg, 1}}} {
		if sp.reduce == ReduceSubgroup && (!dev.Info().Features.SubgroupArithmetic || sg == 0) {
			continue
		}
		v, err := Lookup(MatvecName(MatvecQ8_0, sp.reduce))
		require.NoError(t, err)
		// One row per workgroup: 65537 workgroups, a 2D grid.
		require.Equal(t, uint32(2), MatvecGroups(65537, sp.spec)[1])
		if err := closeness(c.run(t, dev, newKernel(t, dev, v, sp.spec...)), c.want, c.scale, matvecTolerance[c.typ]); err != nil {
			t.Errorf("%v 65537 rows: %v", sp, err)
		}
	}
}

// TestRepack checks the split layouts against the ggml blocks they come
// from: quants in block order, then scales.
func TestRepack(t *testing.T) {
	src := make([]float32, 3*64)
	for i := range src {
		src[i] = float32(i%37) - 18
	}
	for _, tc := range []struct {
		typ    gguf.TensorType
		repack func([]byte, int, int) ([]byte, error)
		qBytes int
	}{{gguf.TypeQ8_0, RepackQ8_0, 32}, {gguf.TypeQ4_0, RepackQ4_0, 16}} {
		g, err := gguf.Quantize(tc.typ, src)
		require.NoError(t, err)
		out, err := tc.repack(g, 3, 64)
		require.NoError(t, err)
		require.Len(t, out, len(g))
		blocks := 6
		for b := 0; b < blocks; b++ {
			blk := g[b*(2+tc.qBytes) : (b+1)*(2+tc.qBytes)]
			assert.Equal(t, blk[2:], out[b*tc.qBytes:(b+1)*tc.qBytes], "%s block %d quants", tc.typ, b)
			assert.Equal(t, blk[:2], out[blocks*tc.qBytes+2*b:blocks*tc.qBytes+2*b+2], "%s block %d scale", tc.typ, b)
		}
		_, err = tc.repack(g, 3, 48)
		assert.Error(t, err, "columns not a multiple of 32")
		_, err = tc.repack(g[:len(g)-1], 3, 64)
		assert.Error(t, err, "short data")
	}
}

func TestAdd(t *testing.T) {
	dev := openDevice(t)
	v, err := Lookup("add")
	require.NoError(t, err)
	k := newKernel(t, dev, v)
	rng := rand.New(rand.NewSource(1))
	for _, n := range []int{1, 255, 256, 257, 100003} {
		a, b := make([]float32, n), make([]float32, n)
		want, scale := make([]float64, n), make([]float64, n)
		for i := range a {
			a[i], b[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			want[i] = float64(a[i] + b[i]) // one float32 rounding, as the kernel
			scale[i] = 1
		}
		ab, bb := newBuffer(t, dev, f32bytes(a)), newBuffer(t, dev, f32bytes(b))
		push := vk.MustPackPush(AddPush{N: uint32(n)})
		groups := Groups(uint32((n + 255) / 256))
		rec := dev.NewRecorder()
		// out = a + b, then in place: a = a + b.
		out, err := dev.NewBuffer(uint64(4*n), vk.DeviceLocal)
		require.NoError(t, err)
		rec.Dispatch(k, push, groups, vk.Bind{Buf: ab, Access: vk.Read}, vk.Bind{Buf: bb, Access: vk.Read}, vk.Bind{Buf: out, Access: vk.Write})
		rec.Dispatch(k, push, groups, vk.Bind{Buf: ab, Access: vk.Read}, vk.Bind{Buf: bb, Access: vk.Read}, vk.Bind{Buf: ab, Access: vk.Write})
		require.NoError(t, dev.Run(rec))
		// Exact: one float32 addition per element, as in Go.
		if err := closeness(download(t, out, n), want, scale, 0); err != nil {
			t.Errorf("add n=%d: %v", n, err)
		}
		if err := closeness(download(t, ab, n), want, scale, 0); err != nil {
			t.Errorf("add in place n=%d: %v", n, err)
		}
		rec.Close()
		out.Close()
	}
}

// TestMatvecFused checks the fused variants (FuseAdd, FuseNorm,
// FuseNormSwiGLU) against float64 references built from the same weights,
// for every weight type and every spec of matvecSpecs. Tolerances: the
// type's matvecTolerance relative to the size of the summed terms, as
// unfused, with each fusion's own terms added to the scale:
//   - add: |y0| (one more float32 addition);
//   - norm: the terms are W x inv normw; inv is computed in float32 from a
//     float32 sum of squares (mod.RMSNorm does the same), a few ulps;
//   - swiglu: silu(g) u moves by |silu'(g)| |u| (<= 1.1 |u|) per unit of
//     error in g, and by |silu(g)| per unit of error in u.
//
// fusedFullTypes get TestMatvecFused's full grid of shapes; the other types,
// whose fused variants differ from these only in the weight reader that
// TestMatvec covers, get a few shapes.
var fusedFullTypes = []gguf.TensorType{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_0}

func TestMatvecFused(t *testing.T) {
	dev := openDevice(t)
	const eps = 1e-5
	for _, typ := range matvecWeightTypes {
		for _, sp := range matvecSpecs(t, dev) {
			for _, fuse := range []string{FuseAdd, FuseNorm, FuseNormSwiGLU} {
				v, err := Lookup(MatvecFusedName(matvecTypeOf[typ], sp.reduce, fuse))
				require.NoError(t, err)
				k := newKernel(t, dev, v, sp.spec...)
				rowsList, colsList, ns := []int{1, 7, 67, 172}, testCols(typ)[1:], []int{1, 3, 6}
				if !slices.Contains(fusedFullTypes, typ) { // the fusions' code is the same for every type
					rowsList, colsList, ns = []int{7, 67}, colsList[len(colsList)-1:], []int{1, 6}
				}
				for _, rows := range rowsList {
					for _, cols := range colsList {
						for _, n := range ns {
							name := fmt.Sprintf("%s/%v%s/%dx%d/n%d", typ, sp, fuse, rows, cols, n)
							wRows := rows
							if fuse == FuseNormSwiGLU {
								wRows = 2 * rows
							}
							c, err := newMatvecCase(typ, wRows, cols, n, int64(rows*1000+cols*10+n))
							require.NoError(t, err, name)
							got, want, scale := runFused(t, dev, k, c, fuse, rows, eps)
							if err := closeness(got, want, scale, matvecTolerance[typ]); err != nil {
								t.Errorf("%s: %v", name, err)
							}
						}
					}
				}
			}
		}
	}
}

// runFused runs fused matvec k on case c (W of c.rows rows: rows outputs,
// twice that for swiglu) and returns its output with the reference and
// its scale.
func runFused(t *testing.T, dev *vk.Device, k *vk.Kernel, c *matvecCase, fuse string, rows int, eps float32) (got []float32, want, scale []float64) {
	t.Helper()
	rng := rand.New(rand.NewSource(int64(rows + c.cols)))
	y0 := make([]float32, c.n*rows)
	for i := range y0 {
		y0[i] = float32(rng.NormFloat64())
	}
	nw := make([]float32, c.cols)
	for i := range nw {
		nw[i] = float32(0.5 + rng.Float64())
	}
	want, scale = make([]float64, c.n*rows), make([]float64, c.n*rows)
	dot := func(r int, xs []float64) (sum, abs float64) {
		for j, xv := range xs {
			p := float64(c.wf[r*c.cols+j]) * xv
			sum += p
			abs += math.Abs(p)
		}
		return sum, abs
	}
	for s := 0; s < c.n; s++ {
		x := c.x[s*c.cols : (s+1)*c.cols]
		xs := make([]float64, c.cols)
		for j := range xs {
			xs[j] = float64(x[j])
		}
		if fuse != FuseAdd {
			var ss float32
			for _, v := range x {
				ss += v * v
			}
			inv := 1 / math.Sqrt(float64(ss/float32(c.cols)+eps))
			for j := range xs {
				xs[j] *= inv * float64(nw[j])
			}
		}
		for r := 0; r < rows; r++ {
			g, ga := dot(r, xs)
			i := s*rows + r
			switch fuse {
			case FuseAdd:
				want[i], scale[i] = float64(y0[i])+g, math.Abs(float64(y0[i]))+ga
			case FuseNorm:
				want[i], scale[i] = g, ga
			case FuseNormSwiGLU:
				u, ua := dot(rows+r, xs)
				silu := g / (1 + math.Exp(-g))
				want[i], scale[i] = silu*u, 1.1*ga*math.Abs(u)+math.Abs(silu)*ua
			}
		}
	}
	wb := newBuffer(t, dev, c.gpu)
	xb := newBuffer(t, dev, f32bytes(c.x))
	yb := newBuffer(t, dev, f32bytes(y0))
	binds := []vk.Bind{{Buf: wb, Access: vk.Read}, {Buf: xb, Access: vk.Read}, {Buf: yb, Access: vk.Write}}
	if fuse == FuseAdd {
		binds[2].Access = vk.ReadWrite
	} else {
		binds = append(binds, vk.Bind{Buf: newBuffer(t, dev, f32bytes(nw)), Access: vk.Read})
	}
	rec := dev.NewRecorder()
	defer rec.Close()
	groups := MatvecGroups(uint32(rows), k.Spec().Specialization)
	push, binds := withHandoff(t, dev, k, vk.MustPackPush(MatvecPush{Rows: uint32(rows), Cols: uint32(c.cols), N: uint32(c.n), Eps: eps}), groups, binds)
	rec.Dispatch(k, push, groups, binds...)
	require.NoError(t, dev.Run(rec))
	return download(t, yb, c.n*rows), want, scale
}
