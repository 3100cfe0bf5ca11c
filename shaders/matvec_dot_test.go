package shaders

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/vk"
)

// quantizeX8 is x as the CPU backend quantizes its activations and
// matvec_dot quantizes x: blocks of xb (32; 256 for the K-quants, as
// engine/cpu's quantizeRow and quantizeK), d = max|x| / 127, q = x * (127
// / max|x|) rounded to the nearest, ties to even, in float32; the
// dequantized values d*q, in float64. A block holding a NaN or an infinity
// dequantizes to NaN.
func quantizeX8(x []float32, xb int) []float64 {
	out := make([]float64, len(x))
	for b := 0; b < len(x); b += xb {
		var amax float32
		bad := false
		for _, v := range x[b : b+xb] {
			amax = max(amax, float32(math.Abs(float64(v))))
			bad = bad || math.IsNaN(float64(v)) || math.IsInf(float64(v), 0)
		}
		d := amax / 127
		for j, v := range x[b : b+xb] {
			switch {
			case bad:
				out[b+j] = math.NaN()
			case amax > 0:
				out[b+j] = float64(d) * math.RoundToEven(float64(v*(127/amax)))
			}
		}
	}
	return out
}

// ggmlTypeOf is the ggml type of matvec weight type typ.
func ggmlTypeOf(t *testing.T, typ string) gguf.TensorType {
	for g, name := range matvecTypeOf {
		if name == typ {
			return g
		}
	}
	t.Fatalf("no ggml type reads as %s", typ)
	return 0
}

// TestMatvecDot checks matvec_dot (every type of MatvecDotTypes, one
// vector, every fusion) against the float64 product of the dequantized
// weights with x quantized as the CPU backend quantizes activations
// (quantizeX8: with the norm, x times the norm's weight in float32,
// quantized, the 1/rms after), so that only the order of the sums
// differs. Q8_0 (units of 8 weights): rows of 1, 7 and 67 (the last
// subgroup's rows short), 1, 3, 10 and 129 blocks a row (lanes with none,
// one, two and many units). The other types (units of a 32-weight group):
// 3 and 129 groups a row, the K-quants 1 and 17 super-blocks (x in one
// block of 256, and many). A block of x of zeros (d 0). Specs of 4 rows a
// subgroup with the default units in flight, one subgroup a workgroup
// walking 1 row a unit at a time, and 3 rows a subgroup with 2 units and
// shared arrays larger than the row. A NaN or an infinity in x makes
// every row NaN. Integer dot products run on lavapipe in software (Vulkan
// 1.3 has them), so the code a GPU runs is tested in CI, at subgroups of
// 8.
func TestMatvecDot(t *testing.T) {
	dev := openDevice(t)
	d := deviceOf(dev)
	if !d.SubgroupArithmetic || d.SubgroupSize == 0 || !dev.Info().Features.IntegerDotProduct {
		t.Skip("matvec_dot needs subgroup arithmetic, a known subgroup size and integer dot products")
	}
	const eps = 1e-5
	sg := d.SubgroupSize
	checked := 0
	for _, typ := range MatvecDotTypes {
		gt, xb := ggmlTypeOf(t, typ), MatvecDotBlock(typ)
		colsOf := []int{96, 4128}
		switch {
		case typ == MatvecQ8_0:
			colsOf = []int{32, 96, 320, 4128}
		case xb == 256:
			colsOf = []int{256, 4352}
		}
		for _, fuse := range MatvecFusions {
			v, err := Lookup(MatvecFusedName(typ, ReduceSubgroupDot, fuse))
			require.NoError(t, err)
			for ci, cols := range colsOf {
				for si, spec := range [][]uint32{MatvecDotSpec(typ, sg, uint32(cols)), {sg, sg, 1, 1, 1, uint32(cols)}, {2 * sg, sg, 1, 3, 2, uint32(cols) + 64}} {
					if si > 0 && (fuse != FuseNone || ci != 1) && (typ != MatvecQ8_0 || cols != 320) {
						continue // the fusions' code is the same at every spec: fewer shapes
					}
					k := newKernel(t, dev, v, spec...)
					for _, rows := range []int{1, 7, 67} {
						label := fmt.Sprintf("%s%s%v/%dx%d", typ, fuse, spec, rows, cols)
						wRows := rows
						if fuse == FuseNormSwiGLU {
							wRows = 2 * rows
						}
						mc, err := newMatvecCase(gt, wRows, cols, 1, int64(rows*1000+cols))
						require.NoError(t, err, label)
						if cols > xb {
							clear(mc.x[xb : 2*xb]) // a block of zeros: d 0
						}
						got, want, scale := runDot(t, dev, k, mc, fuse, rows, eps, false)
						if err := closeness(got, want, scale, 1e-5); err != nil {
							t.Errorf("%s: %v", label, err)
						}
						checked++
					}
				}
			}
			for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
				cols := 3 * xb
				k := newKernel(t, dev, v, MatvecDotSpec(typ, sg, uint32(cols))...)
				wRows := 7
				if fuse == FuseNormSwiGLU {
					wRows = 14
				}
				mc, err := newMatvecCase(gt, wRows, cols, 1, 5)
				require.NoError(t, err)
				mc.x[xb+38] = bad
				got, _, _ := runDot(t, dev, k, mc, fuse, 7, eps, true)
				for r, g := range got {
					assert.True(t, math.IsNaN(float64(g)), "%s%s: x holding %g: row %d is %g, want NaN", typ, fuse, bad, r, g)
				}
			}
		}
	}
	t.Logf("%d cases", checked)
}

// runDot runs matvec_dot's kernel k under fuse on c (rows output rows;
// under SwiGLU c has twice them, gate then up) and returns y and the
// reference with x quantized (quantizeX8), and each value's scale (the sum
// of its terms' magnitudes). With skipRef the reference is not computed
// (x not finite).
func runDot(t *testing.T, dev *vk.Device, k *vk.Kernel, c *matvecCase, fuse string, rows int, eps float32, skipRef bool) (got []float32, want, scale []float64) {
	t.Helper()
	rng := rand.New(rand.NewSource(int64(rows + c.cols)))
	y0 := make([]float32, rows)
	for i := range y0 {
		y0[i] = float32(rng.NormFloat64())
	}
	nw := make([]float32, c.cols)
	for i := range nw {
		nw[i] = float32(0.5 + rng.Float64())
	}
	want, scale = make([]float64, rows), make([]float64, rows)
	if !skipRef {
		xn, inv := c.x, 1.0
		if fuse == FuseNorm || fuse == FuseNormSwiGLU {
			xn = make([]float32, c.cols)
			var ss float64
			for j, v := range c.x {
				xn[j] = v * nw[j]
				ss += float64(v) * float64(v)
			}
			inv = 1 / math.Sqrt(ss/float64(c.cols)+float64(eps))
		}
		xq := quantizeX8(xn, MatvecDotBlock(matvecTypeOf[c.typ]))
		dot := func(r int) (sum, abs float64) {
			for j, xv := range xq {
				p := float64(c.wf[r*c.cols+j]) * xv
				sum += p
				abs += math.Abs(p)
			}
			return sum * inv, abs * inv
		}
		for r := 0; r < rows; r++ {
			g, ga := dot(r)
			switch fuse {
			case FuseAdd:
				want[r], scale[r] = float64(y0[r])+g, math.Abs(float64(y0[r]))+ga
			case FuseNormSwiGLU:
				u, ua := dot(rows + r)
				silu := g / (1 + math.Exp(-g))
				want[r], scale[r] = silu*u, 1.1*ga*math.Abs(u)+math.Abs(silu)*ua
			default:
				want[r], scale[r] = g, ga
			}
		}
	}
	yb := newBuffer(t, dev, f32bytes(y0))
	binds := []vk.Bind{{Buf: newBuffer(t, dev, c.gpu), Access: vk.Read}, {Buf: newBuffer(t, dev, f32bytes(c.x)), Access: vk.Read}, {Buf: yb, Access: vk.Write}}
	switch fuse {
	case FuseAdd:
		binds[2].Access = vk.ReadWrite
	case FuseNorm, FuseNormSwiGLU:
		binds = append(binds, vk.Bind{Buf: newBuffer(t, dev, f32bytes(nw)), Access: vk.Read})
	}
	rec := dev.NewRecorder()
	defer rec.Close()
	rec.Dispatch(k, vk.MustPackPush(MatvecPush{Rows: uint32(rows), Cols: uint32(c.cols), N: 1, Eps: eps}), MatvecGroups(uint32(rows), k.Spec().Specialization), binds...)
	require.NoError(t, dev.Run(rec))
	return download(t, yb, rows), want, scale
}

// TestMatvecDotChoice: a GPU profile takes matvec_dot only where the user
// asked (Device.MatvecDot, MODRUN_MATVEC_DOT=1) on a device with integer
// dot products, for one vector of a quantized type whose quantized x fits
// the device's shared memory; else matvec_rows, as without it.
func TestMatvecDotChoice(t *testing.T) {
	dev := smallGPU // 16 KB of shared memory
	dev.IntegerDotProduct, dev.MatvecDot = true, true
	p := NewProfile(dev)
	name, spec := p.Matvec(MatvecQ8_0, FuseNormSwiGLU, 1, 4096)
	assert.Equal(t, MatvecFusedName(MatvecQ8_0, ReduceSubgroupDot, FuseNormSwiGLU), name)
	assert.Equal(t, []uint32{4 * dev.SubgroupSize, dev.SubgroupSize, 1, p.rowsPerSubgroup(FuseNormSwiGLU, 1), 4, 4096}, spec)
	_, spec = p.Matvec(MatvecQ8_0, FuseAdd, 1, 11008)
	assert.Equal(t, uint32(11264), spec[5], "the shared arrays' columns: rounded up to 1,024")
	for _, typ := range MatvecDotTypes[1:] {
		name, spec := p.Matvec(typ, FuseAdd, 1, 11008)
		assert.Equal(t, MatvecFusedName(typ, ReduceSubgroupDot, FuseAdd), name, "%s: 11,008 columns (7B's down) fit 16 KB", typ)
		assert.Equal(t, []uint32{4 * dev.SubgroupSize, dev.SubgroupSize, 1, p.rowsPerSubgroup(FuseAdd, 1), 2, 11264}, spec, "%s: 2 groups in flight", typ)
	}
	for _, c := range []struct {
		what      string
		typ       string
		n, cols   uint32
		dot, asks bool
	}{
		{"F16", MatvecF16, 1, 4096, true, true},
		{"two vectors", MatvecQ8_0, 2, 4096, true, true},
		{"two vectors of Q4_K", MatvecQ4_K, 2, 4096, true, true},
		{"x past 16 KB of shared memory", MatvecQ8_0, 1, 16384, true, true},
		{"Q4_K's x past 16 KB of shared memory", MatvecQ4_K, 1, 14336, true, true},
		{"no integer dot products", MatvecQ4_K, 1, 4096, false, true},
		{"not asked", MatvecQ6_K, 1, 4096, true, false},
	} {
		d := dev
		d.IntegerDotProduct, d.MatvecDot = c.dot, c.asks
		name, _ := NewProfile(d).Matvec(c.typ, FuseNone, c.n, c.cols)
		want := MatvecFusedName(c.typ, ReduceSubgroupRows, FuseNone)
		if c.typ == MatvecF16 {
			want = MatvecFusedName(c.typ, p.MatvecReduce, FuseNone)
		}
		assert.Equal(t, want, name, c.what)
	}
}
