package shaders

import (
	"fmt"
	"slices"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// matmulDirectSpecs are the preset and tiles that exercise the index
// arithmetic: one subgroup, subgroups across rows only, across tokens and
// rows, and several 16x16 tiles a subgroup.
var matmulDirectSpecs = []MatmulDirectSpec{
	MatmulDirectSpecGPU,
	{BM: 16, BN: 16, WM: 16, WN: 16},
	{BM: 16, BN: 48, WM: 16, WN: 16},
	{BM: 32, BN: 32, WM: 32, WN: 16},
}

// directKernels are the three passes of one direct matmul: W's planes (its
// weight type's planes variant), X's (planes_f32) and the product.
type directKernels struct {
	wPlanes, xPlanes, product *vk.Kernel
	reduce                    *vk.Kernel // splitk_reduce, for split products
	spec                      MatmulDirectSpec
	hilo                      bool // f32's precision: X's lo plane, and W's where it has one
	wLo                       bool // W has a lo plane (every type but F16 under hilo)
}

func newDirectKernels(t testing.TB, dev *vk.Device, typ gguf.TensorType, spec MatmulDirectSpec, hilo, emulate bool) *directKernels {
	t.Helper()
	require.NoError(t, spec.Check())
	wLo := hilo && typ != gguf.TypeF16 // an F16 weight is its own high half
	return &directKernels{
		wPlanes: newKernel(t, dev, lookup(t, PlanesName(matvecTypeOf[typ], wLo))),
		xPlanes: newKernel(t, dev, lookup(t, PlanesName(MatvecF32, hilo))),
		product: newKernel(t, dev, lookup(t, MatmulDirectName(hilo, emulate)), spec.Constants()...),
		reduce:  newKernel(t, dev, lookup(t, MatmulReduceName)),
		spec:    spec, hilo: hilo, wLo: wLo,
	}
}

// directPlanes are the scratch planes of one product, and its partial
// sums where it is split along K (splits slices of slice columns).
type directPlanes struct {
	w, x, part        *vk.Buffer
	rowsP, nP, colsP  uint32
	rows, n, cols, r0 uint32
	splits, slice     uint32
}

// split cuts pl's product into slices of slice columns (a multiple of
// 32), with a buffer for their partial sums.
func (pl *directPlanes) split(t testing.TB, dev *vk.Device, slice uint32) {
	t.Helper()
	pl.splits, pl.slice = (pl.colsP+slice-1)/slice, slice
	b, err := dev.NewBuffer(4*uint64(pl.splits)*uint64(pl.n)*uint64(pl.rows), vk.DeviceLocal)
	require.NoError(t, err)
	t.Cleanup(b.Close)
	pl.part = b
}

func (d *directKernels) newPlanes(t testing.TB, dev *vk.Device, r0, rows, n, cols int) *directPlanes {
	t.Helper()
	pl := &directPlanes{rows: uint32(rows), n: uint32(n), cols: uint32(cols), r0: uint32(r0)}
	pl.rowsP, pl.nP, pl.colsP = d.spec.Pad(pl.rows, pl.n, pl.cols)
	planes := func(rows uint32, lo bool) *vk.Buffer {
		b, err := dev.NewBuffer(PlanesBytes(rows, pl.colsP, lo), vk.DeviceLocal)
		require.NoError(t, err)
		t.Cleanup(b.Close)
		return b
	}
	pl.w, pl.x = planes(pl.rowsP, d.wLo), planes(pl.nP, d.hilo)
	return pl
}

// record records rows r0 .. r0+rows of w (a binding of wRows rows) times
// the n tokens of x into columns r0 .. of y (ldy a row): both planes
// passes, then the product.
func (d *directKernels) record(rec *vk.Recorder, pl *directPlanes, w *vk.Buffer, wRows int, x, y *vk.Buffer, ldy int) {
	d.recordPlanes(rec, pl, w, wRows, x)
	d.recordProduct(rec, pl, y, ldy)
}

// recordPlanes records W's and X's planes passes.
func (d *directKernels) recordPlanes(rec *vk.Recorder, pl *directPlanes, w *vk.Buffer, wRows int, x *vk.Buffer) {
	wp := PlanesPush{Rows: pl.rows, Cols: pl.cols, WRow0: pl.r0, WRows: uint32(wRows), RowsP: pl.rowsP, ColsP: pl.colsP}
	xp := PlanesPush{Rows: pl.n, Cols: pl.cols, WRows: pl.n, RowsP: pl.nP, ColsP: pl.colsP}
	if d.wLo {
		wp.LoOff = PlaneUnits(pl.rowsP, pl.colsP)
	}
	if d.hilo {
		xp.LoOff = PlaneUnits(pl.nP, pl.colsP)
	}
	rec.Dispatch(d.wPlanes, vk.MustPackPush(wp), PlanesGroups(pl.rowsP, pl.colsP), vk.Bind{Buf: w, Access: vk.Read}, vk.Bind{Buf: pl.w, Access: vk.Write})
	rec.Dispatch(d.xPlanes, vk.MustPackPush(xp), PlanesGroups(pl.nP, pl.colsP), vk.Bind{Buf: x, Access: vk.Read}, vk.Bind{Buf: pl.x, Access: vk.Write})
}

// recordProduct records the product of the planes into y (ldy a row).
func (d *directKernels) recordProduct(rec *vk.Recorder, pl *directPlanes, y *vk.Buffer, ldy int) {
	push := MatmulDirectPush{Rows: pl.rows, N: pl.n, ColsP: pl.colsP, LdY: uint32(ldy), YOff: pl.r0}
	if d.wLo {
		push.WLo = PlaneUnits(pl.rowsP, pl.colsP)
	}
	if d.hilo {
		push.XLo = PlaneUnits(pl.nP, pl.colsP)
	}
	w, x := vk.Bind{Buf: pl.w, Access: vk.Read}, vk.Bind{Buf: pl.x, Access: vk.Read}
	if pl.splits <= 1 {
		rec.Dispatch(d.product, vk.MustPackPush(push), MatmulDirectGroups(pl.rows, pl.n, d.spec), w, x, vk.Bind{Buf: y, Access: vk.Write})
		return
	}
	push.KSplit = pl.slice
	rec.Dispatch(d.product, vk.MustPackPush(push), MatmulDirectSplitGroups(pl.rows, pl.n, d.spec, pl.splits), w, x, vk.Bind{Buf: pl.part, Access: vk.Write})
	rec.Dispatch(d.reduce, vk.MustPackPush(MatmulReducePush{Rows: pl.rows, N: pl.n, Splits: pl.splits, LdY: uint32(ldy), YOff: pl.r0}),
		MatmulReduceGroups(pl.rows, pl.n), vk.Bind{Buf: pl.part, Access: vk.Read}, vk.Bind{Buf: y, Access: vk.Write})
}

// runDirect computes c by the direct kernels, its rows in parts cut at
// cuts (each part's planes read from the whole matrix's binding at WRow0,
// each writing its columns of one y), each part's product split along K
// into slices of slice columns where slice is set.
func (c *matmulCase) runDirect(t testing.TB, dev *vk.Device, d *directKernels, cuts []int, slice uint32) []float32 {
	t.Helper()
	xb := newBuffer(t, dev, f32bytes(c.x))
	defer xb.Close()
	wb := newBuffer(t, dev, matmulLayout(t, c.typ, c.w, c.rows, c.cols))
	defer wb.Close()
	yb, err := dev.NewBuffer(uint64(4*c.n*c.rows), vk.DeviceLocal)
	require.NoError(t, err)
	defer yb.Close()
	rec := dev.NewRecorder()
	defer rec.Close()
	rec.Fill(yb, 0, yb.Size(), 0x7fc00000) // NaN: an output the kernel skips shows
	bounds := append(append([]int{0}, cuts...), c.rows)
	for i := 0; i+1 < len(bounds); i++ {
		pl := d.newPlanes(t, dev, bounds[i], bounds[i+1]-bounds[i], c.n, c.cols)
		if slice != 0 && slice < pl.colsP {
			pl.split(t, dev, slice)
		}
		d.record(rec, pl, wb, c.rows, xb, yb, c.rows)
	}
	require.NoError(t, dev.Run(rec))
	return download(t, yb, c.n*c.rows)
}

// TestMatmulDirectEmulated runs the direct matmul with its tile product
// emulated (EMULATE_COOPMAT: the planes passes as they are, the product's
// tile indexing and edges, in plain arithmetic) against the CPU reference:
// every weight type, rows, columns and token counts that are not
// multiples of the tiles, the rows in parts of one binding too, K whole
// and split into slices (1, 2 or 3 steps of 32 columns, the last slice
// shorter where they do not divide), with the operands' high halves only
// (matmulCoopBound: both rounded to nearest) and with f32's precision
// (hilo: matmulCoopHiloBound, the same split as matmul_coop_hilo's). A
// split sum restarts at each slice: still within the bound, which holds
// for any order of the f32 sums.
func TestMatmulDirectEmulated(t *testing.T) {
	dev := openDevice(t)
	rowsList := []int{1, 13, 67, 130}
	nList := []int{1, 5, 33, 70}
	for _, typ := range matmulTypes {
		for _, hilo := range []bool{false, true} {
			var stats errStats
			split := 0 // the cases whose K was cut into slices
			bound := func(cols int) float64 {
				if hilo {
					return matmulCoopHiloBound(cols)
				}
				return matmulCoopBound(cols)
			}
			for si, spec := range matmulDirectSpecs {
				d := newDirectKernels(t, dev, typ, spec, hilo, true)
				for ci, cols := range testCols(typ) {
					for ri, rows := range testRows(typ, rowsList) {
						n := nList[(si+ci+ri)%len(nList)]
						slice := []uint32{0, 32, 64, 96}[(si+2*ci+ri)%4]
						name := fmt.Sprintf("%s/hilo=%v/%+v/%dx%d/n%d/slice%d", typ, hilo, spec, rows, cols, n, slice)
						c := newMatmulCase(t, typ, rows, cols, n, int64(rows*1000+cols*10+n))
						var cuts []int
						if si == 1 && rows > 13 {
							cuts = []int{13} // a part that starts at row 13 of the binding
						}
						got := c.runDirect(t, dev, d, cuts, slice)
						if slice != 0 && roundUp(uint32(cols), 32) > slice {
							split++
						}
						stats.add(got, c.want, c.scale)
						var err error
						if hilo {
							err = hiloClose(got, c.want, c.scale, c.hiloAbs(t), bound(cols))
						} else {
							err = closeness(got, c.want, c.scale, bound(cols))
						}
						if err != nil {
							t.Errorf("%s: %v", name, err)
						}
					}
				}
			}
			assert.Positive(t, split, "%s hilo=%v: no case split K", typ, hilo)
			t.Logf("%s hilo=%v: %v (bound %.4g at %d columns; %d cases split)", typ, hilo, stats, bound(slices.Max(testCols(typ))), slices.Max(testCols(typ)), split)
		}
	}
}

// TestPlanes checks planes.comp value for value: X's planes (planes_f32,
// with and without the lo plane) hold toHalf(x) and toHalf(x - hi) at
// [r][c], zeros in the padding, and an F16 weight's hi plane is the weight.
func TestPlanes(t *testing.T) {
	dev := openDevice(t)
	const rows, cols, rowsP, colsP = 5, 7, 16, 32
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(i)*0.3711 - 5.123 + float32(i%3)*1e-6
	}
	xb := newBuffer(t, dev, f32bytes(x))
	defer xb.Close()
	for _, hilo := range []bool{false, true} {
		k := newKernel(t, dev, lookup(t, PlanesName(MatvecF32, hilo)))
		out, err := dev.NewBuffer(PlanesBytes(rowsP, colsP, true), vk.DeviceLocal)
		require.NoError(t, err)
		defer out.Close()
		rec := dev.NewRecorder()
		rec.Fill(out, 0, out.Size(), 0x7fc07fc0) // NaN halves: a place nobody writes shows
		push := PlanesPush{Rows: rows, Cols: cols, WRows: rows, RowsP: rowsP, ColsP: colsP}
		if hilo {
			push.LoOff = PlaneUnits(rowsP, colsP)
		}
		rec.Dispatch(k, vk.MustPackPush(push), PlanesGroups(rowsP, colsP), vk.Bind{Buf: xb, Access: vk.Read}, vk.Bind{Buf: out, Access: vk.Write})
		require.NoError(t, dev.Run(rec))
		rec.Close()
		words := downloadU32(t, out, int(PlanesBytes(rowsP, colsP, true)/4))
		half := func(plane, r, c int) uint16 {
			h := plane*rowsP*colsP + r*colsP + c
			return uint16(words[h/2] >> (16 * (h % 2)))
		}
		for r := 0; r < rowsP; r++ {
			for c := 0; c < colsP; c++ {
				var v float32
				if r < rows && c < cols {
					v = x[r*cols+c]
				}
				hi := gguf.F32ToF16(v)
				require.Equal(t, hi, half(0, r, c), "hi[%d][%d] of %g", r, c, v)
				if hilo {
					lo := gguf.F32ToF16(v - gguf.F16ToF32(hi))
					require.Equal(t, lo, half(1, r, c), "lo[%d][%d] of %g", r, c, v)
				}
			}
		}
		if !hilo {
			assert.Equal(t, uint16(0x7fc0), half(1, 0, 0), "no lo plane without hilo")
		}
	}
}

// TestMatmulDirectSplit checks the direct product's cut along K on a GPU
// profile at the shapes it is for: the 1.1B model's matrices at 512
// tokens (2048-row grids of 128 cut in 2, 256-row K and V in 8, the FFN's
// 5632 rows whole), a routed block's 64 rows, the 7B's (whole), the
// scratch's and the slice's limits, GPUs that say how many SMs they have
// (132: the same as the default; 28: fewer slices; 114: the 2048-row grids
// of 128 fill its 228 slots better whole than in 2 waves), and no cut on
// a CPU device.
func TestMatmulDirectSplit(t *testing.T) {
	gpu := NewProfile(Device{SubgroupSize: 32, SubgroupArithmetic: true, CooperativeMatrixNV: true, TensorCores: true, MatmulDirect: true})
	require.True(t, gpu.MatmulDirect, "the GPU profile takes the direct matmul")
	require.Equal(t, uint32(MatmulDirectMinSlice), gpu.MatmulDirectSlice)
	cpu := NewProfile(Device{CPU: true, SubgroupSize: 8})
	gpuSMs := func(sms uint32) Profile {
		p := NewProfile(Device{SubgroupSize: 32, SubgroupArithmetic: true, CooperativeMatrixNV: true, TensorCores: true, MatmulDirect: true, ComputeUnits: sms})
		require.Equal(t, MatmulDirectGroupsPerUnit*sms, p.MatmulDirectSlots)
		return p
	}
	require.Equal(t, uint32(MatmulDirectSplitTarget), gpu.MatmulDirectSlots, "a GPU that does not say its SMs")
	s := MatmulDirectSpecGPU
	for _, tc := range []struct {
		name                 string
		prof                 Profile
		rows, n, colsP, most uint32
		splits, slice        uint32
	}{
		{"1.1B q, 512 tokens", gpu, 2048, 512, 2048, 8, 2, 1024},
		{"1.1B q, 512 tokens, 132 SMs", gpuSMs(132), 2048, 512, 2048, 8, 2, 1024},
		{"1.1B q, 512 tokens, 114 SMs", gpuSMs(114), 2048, 512, 2048, 8, 1, 2048},
		{"1.1B k, 512 tokens, 28 SMs", gpuSMs(28), 256, 512, 2048, 8, 3, 704},
		{"1.1B k, 512 tokens", gpu, 256, 512, 2048, 8, 8, 256},
		{"1.1B gate, 512 tokens", gpu, 5632, 512, 2048, 8, 1, 2048},
		{"1.1B down, 512 tokens", gpu, 2048, 512, 5632, 8, 2, 2816},
		{"1.1B q, routed 64", gpu, 2048, 64, 2048, 8, 8, 256},
		{"1.1B k, routed 64", gpu, 256, 64, 2048, 8, 8, 256},
		{"7B q, 512 tokens", gpu, 4096, 512, 4096, 8, 1, 4096},
		{"7B q, routed 64", gpu, 4096, 64, 4096, 8, 8, 512},
		{"the scratch holds 2", gpu, 256, 512, 2048, 2, 2, 1024},
		{"the scratch holds 1", gpu, 256, 512, 2048, 1, 1, 2048},
		{"under a slice's columns", gpu, 64, 64, 256, 8, 1, 256},
		{"slices of 256, the last shorter", gpu, 128, 64, 832, 8, 4, 256},
		{"CPU device", cpu, 256, 512, 2048, 8, 1, 2048},
	} {
		splits, slice := tc.prof.MatmulDirectSplit(tc.rows, tc.n, tc.colsP, s, tc.most)
		assert.Equal(t, [2]uint32{tc.splits, tc.slice}, [2]uint32{splits, slice}, tc.name)
		if splits > 1 { // the slices cover K, each a multiple of 32, none empty
			assert.Zero(t, slice%32, tc.name)
			assert.Less(t, (splits-1)*slice, tc.colsP, tc.name)
			assert.GreaterOrEqual(t, splits*slice, tc.colsP, tc.name)
		}
	}
}
