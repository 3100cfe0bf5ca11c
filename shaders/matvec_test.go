package shaders

import (
	"fmt"
	"math"
	"math/rand"
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
//   - F32, F16: the decoded weights are exactly the reference's; only the
//     summation order differs (strided partial sums, then a tree): a few ulps.
//   - Q8_0: the kernel sums q*x within a block and multiplies by the scale
//     once, where the reference multiplies each element: one more rounding.
var matvecTolerance = map[gguf.TensorType]float64{
	gguf.TypeF32:  1e-5,
	gguf.TypeF16:  1e-5,
	gguf.TypeQ8_0: 2e-5,
}

var matvecVariantOf = map[gguf.TensorType]string{
	gguf.TypeF32:  "matvec_f32",
	gguf.TypeF16:  "matvec_f16",
	gguf.TypeQ8_0: "matvec_q8_0",
}

// matvecCase is one problem: W [rows][cols] of type typ, x [n][cols].
type matvecCase struct {
	typ           gguf.TensorType
	rows, cols, n int
	w             []byte    // ggml bytes
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
	wb := newBuffer(t, dev, c.w)
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

func TestMatvec(t *testing.T) {
	dev := openDevice(t)
	rowsList := []int{1, 7, 67, 172, 513}
	colsOf := map[gguf.TensorType][]int{
		gguf.TypeF32:  {32, 64, 96, 172, 7},
		gguf.TypeF16:  {32, 64, 96, 172, 7}, // 7: odd, rows do not start on a word
		gguf.TypeQ8_0: {32, 64, 96, 160},    // 160: 5 blocks, rows alternate 4-alignment
	}
	for _, typ := range []gguf.TensorType{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ8_0} {
		v, err := Lookup(matvecVariantOf[typ])
		require.NoError(t, err)
		for _, spec := range [][]uint32{MatvecSpecGPU, MatvecSpecCPU, {64, 64, 4}, {64, 1, 4}} {
			k := newKernel(t, dev, v, spec...)
			for _, rows := range rowsList {
				for _, cols := range colsOf[typ] {
					for _, n := range []int{1, 3, 6} { // 6: two passes of 4 vectors
						name := fmt.Sprintf("%s/spec%v/%dx%d/n%d", typ, spec, rows, cols, n)
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

// TestMatvecWorkgroupSizes runs the reduction with other workgroup sizes and
// invocations per row (specialization constants 0 and 1), including sizes
// that are not powers of two and rows that do not fill the last workgroup.
func TestMatvecWorkgroupSizes(t *testing.T) {
	dev := openDevice(t)
	for _, typ := range []gguf.TensorType{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ8_0} {
		v, err := Lookup(matvecVariantOf[typ])
		require.NoError(t, err)
		for _, spec := range [][]uint32{{1, 1, 1}, {32, 32, 2}, {48, 48, 3}, {100, 25, 4}, {256, 32, 1}, {96, 3, 5}, {64, 8, 2}, {64, 1, 3}} {
			k := newKernel(t, dev, v, spec...)
			c, err := newMatvecCase(typ, 67, 320, 5, int64(spec[0]*100+spec[1]))
			require.NoError(t, err)
			if err := closeness(c.run(t, dev, k), c.want, c.scale, matvecTolerance[typ]); err != nil {
				t.Errorf("%s spec %v: %v", typ, spec, err)
			}
		}
	}
}

// TestMatvecLongLoops: lavapipe stops an invocation's loops after 65535
// iterations in all and returns garbage without an error. With an invocation
// per row, n=64 vectors of 1024 columns need ~130000; MatvecSpecCPUFor
// shares each row among enough invocations to stay under the limit.
func TestMatvecLongLoops(t *testing.T) {
	assert.Greater(t, MatvecLoopIterations(64, 1024, MatvecSpecCPU), uint32(LavapipeLoopIterations), "the shape crosses the limit with MatvecSpecCPU")
	assert.Equal(t, MatvecSpecCPU, MatvecSpecCPUFor(1, 4096), "decode keeps an invocation per row")
	dev := openDevice(t)
	for _, typ := range []gguf.TensorType{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ8_0} {
		v, err := Lookup(matvecVariantOf[typ])
		require.NoError(t, err)
		spec := MatvecSpecCPUFor(64, 1024)
		require.LessOrEqual(t, MatvecLoopIterations(64, 1024, spec), uint32(LavapipeLoopIterations))
		c, err := newMatvecCase(typ, 37, 1024, 64, 11)
		require.NoError(t, err)
		if err := closeness(c.run(t, dev, newKernel(t, dev, v, spec...)), c.want, c.scale, matvecTolerance[typ]); err != nil {
			t.Errorf("%s n=64 cols=1024 spec %v: %v", typ, spec, err)
		}
	}
}

// TestMatvecManyRows crosses 65535 workgroups, so the grid is 2D. One type
// is enough (the grid is the same code for all) and keeps lavapipe's 65537
// workgroups to about a second.
func TestMatvecManyRows(t *testing.T) {
	dev := openDevice(t)
	for _, typ := range []gguf.TensorType{gguf.TypeQ8_0} {
		v, err := Lookup(matvecVariantOf[typ])
		require.NoError(t, err)
		c, err := newMatvecCase(typ, 65537, 32, 1, 7)
		require.NoError(t, err)
		// One row per workgroup: 65537 workgroups, a 2D grid.
		spec := []uint32{8, 8, 1}
		require.Equal(t, uint32(2), MatvecGroups(65537, spec)[1])
		if err := closeness(c.run(t, dev, newKernel(t, dev, v, spec...)), c.want, c.scale, matvecTolerance[typ]); err != nil {
			t.Errorf("%s 65537 rows: %v", typ, err)
		}
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
