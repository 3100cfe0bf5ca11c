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

// TestMatvecDot checks matvec_dot (every type of MatvecDotTypes, every
// fusion) against the float64 product of the dequantized weights with x
// quantized as the CPU backend quantizes activations (quantizeX8: with
// the norm, x times the norm's weight in float32, quantized, the 1/rms
// after), so that only the order of the sums differs. Rows of 1, 7 and 67
// (the last subgroup's rows short). Q8_0: 1, 3, 10 and 129 groups a row
// (lanes with none, one, two and many groups); the other types 3 and 129,
// the K-quants 1 and 17 super-blocks (x in one block of 256, and many). A
// block of x of zeros (d 0). Specs: the decode's (MatvecDotSpec: one
// tile); one subgroup a workgroup walking 1 row a group at a time in
// tiles of 256 columns (17 tiles at 4,352); 3 rows a subgroup with 2
// groups in flight and a tile larger than the row; and a batched step's
// (MatvecDotBatchSpec) at 3 vectors a pass over 1, 3 and 7 vectors (one
// ragged pass; 3 passes, the last ragged), in tiles of 512. A NaN or an
// infinity in x makes every row NaN (every vector's, in a batch: the
// others' sums are checked). Integer dot products run on lavapipe in
// software (Vulkan 1.3 has them), so the code a GPU runs is tested in CI,
// at subgroups of 8.
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
			vPre, err := Lookup(MatvecFusedName(typ, ReduceSubgroupDot+MatvecDotPre, fuse))
			require.NoError(t, err)
			vDotX, err := Lookup(DotXName(typ, fuse))
			require.NoError(t, err)
			for ci, cols := range colsOf {
				wide := uint32(cols+255)/256*256 + 256
				for si, spec := range [][]uint32{MatvecDotSpec(typ, sg, uint32(cols)), {sg, sg, 1, 1, 1, 256}, {2 * sg, sg, 1, 3, 2, wide}, MatvecDotBatchSpec(fuse, sg, 3, 512)} {
					last := ci == len(colsOf)-1
					if (si == 1 || si == 2) && (fuse != FuseNone || !last) && (typ != MatvecQ8_0 || cols != 320) || si == 3 && !last {
						continue // the fusions' code is the same at every spec: fewer shapes
					}
					ns := []int{1}
					if spec[2] > 1 {
						ns = []int{1, 3, 7}
					}
					k := newKernel(t, dev, v, spec...)
					var pre, dx *vk.Kernel // the batched spec: the PREQ variant too, after dot_x
					if si == 3 {
						pre, dx = newKernel(t, dev, vPre, spec...), newKernel(t, dev, vDotX)
					}
					for _, n := range ns {
						for _, rows := range []int{1, 7, 67} {
							if n > 1 && rows == 7 {
								continue
							}
							label := fmt.Sprintf("%s%s%v/%dx%d/n%d", typ, fuse, spec, rows, cols, n)
							wRows := rows
							if fuse == FuseNormSwiGLU {
								wRows = 2 * rows
							}
							mc, err := newMatvecCase(gt, wRows, cols, n, int64(rows*1000+cols+n))
							require.NoError(t, err, label)
							if cols > xb {
								clear(mc.x[xb : 2*xb]) // a block of zeros: d 0
							}
							got, want, scale := runDot(t, dev, k, nil, mc, fuse, rows, eps, -1)
							if err := closeness(got, want, scale, 1e-5); err != nil {
								t.Errorf("%s: %v", label, err)
							}
							checked++
							if pre == nil {
								continue
							}
							gotPre, _, _ := runDotRef(t, dev, pre, dx, mc, fuse, rows, eps, -1, false) // the same inputs: want and scale above
							if err := closeness(gotPre, want, scale, 1e-5); err != nil {
								t.Errorf("%s, x quantized by dot_x: %v", label, err)
							}
							same := 0
							for i := range got {
								if got[i] == gotPre[i] {
									same++
								}
							}
							// The same operations on the same values: the same sums
							// but for the compiler's freedom to contract them.
							assert.GreaterOrEqual(t, same, len(got)*9/10, "%s: %d of %d sums equal to the in-kernel quantization's", label, same, len(got))
							checked++
						}
					}
				}
			}
			for _, spec := range [][]uint32{MatvecDotSpec(typ, sg, uint32(3*xb)), MatvecDotBatchSpec(fuse, sg, 3, 256)} {
				for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
					cols, n := 3*xb, int(spec[2])
					k, dx := newKernel(t, dev, v, spec...), (*vk.Kernel)(nil)
					if n > 1 { // a batched step's: x quantized by dot_x
						k, dx = newKernel(t, dev, vPre, spec...), newKernel(t, dev, vDotX)
					}
					wRows := 7
					if fuse == FuseNormSwiGLU {
						wRows = 14
					}
					mc, err := newMatvecCase(gt, wRows, cols, n, 5)
					require.NoError(t, err)
					mc.x[(n-1)*cols+xb+38] = bad // the last vector's
					got, want, scale := runDot(t, dev, k, dx, mc, fuse, 7, eps, n-1)
					for r, g := range got[(n-1)*7:] {
						assert.True(t, math.IsNaN(float64(g)), "%s%s%v: x holding %g: row %d is %g, want NaN", typ, fuse, spec, bad, r, g)
					}
					if err := closeness(got[:(n-1)*7], want[:(n-1)*7], scale[:(n-1)*7], 1e-5); err != nil {
						t.Errorf("%s%s%v: the finite vectors beside a %g: %v", typ, fuse, spec, bad, err)
					}
				}
			}
		}
	}
	t.Logf("%d cases", checked)
}

// runDot runs matvec_dot's kernel k under fuse on c (rows output rows of
// c.n vectors; under SwiGLU c has twice the rows, gate then up), with x
// quantized first by dot_x's kernel dx where it is not nil (k a PREQ
// variant), and returns y and the reference with x quantized (quantizeX8), and each
// value's scale (the sum of its terms' magnitudes). Vector bad's x is not
// finite: its reference is not computed (-1: none is).
func runDot(t *testing.T, dev *vk.Device, k, dx *vk.Kernel, c *matvecCase, fuse string, rows int, eps float32, bad int) (got []float32, want, scale []float64) {
	return runDotRef(t, dev, k, dx, c, fuse, rows, eps, bad, true)
}

// runDotRef is runDot, with the reference computed only where ref is set
// (else want and scale are nil: a second kernel on the same case, with
// the same inputs, compares with the first's).
func runDotRef(t *testing.T, dev *vk.Device, k, dx *vk.Kernel, c *matvecCase, fuse string, rows int, eps float32, bad int, ref bool) (got []float32, want, scale []float64) {
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
	if ref {
		want, scale = make([]float64, c.n*rows), make([]float64, c.n*rows)
	}
	for s := 0; s < c.n && ref; s++ {
		if s == bad {
			continue
		}
		x := c.x[s*c.cols : (s+1)*c.cols]
		xn, inv := x, 1.0
		if fuse == FuseNorm || fuse == FuseNormSwiGLU {
			xn = make([]float32, c.cols)
			var ss float64
			for j, v := range x {
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
			at := s*rows + r
			g, ga := dot(r)
			switch fuse {
			case FuseAdd:
				want[at], scale[at] = float64(y0[at])+g, math.Abs(float64(y0[at]))+ga
			case FuseNormSwiGLU:
				u, ua := dot(rows + r)
				silu := g / (1 + math.Exp(-g))
				want[at], scale[at] = silu*u, 1.1*ga*math.Abs(u)+math.Abs(silu)*ua
			default:
				want[at], scale[at] = g, ga
			}
		}
	}
	yb := newBuffer(t, dev, f32bytes(y0))
	xb, nwb := newBuffer(t, dev, f32bytes(c.x)), newBuffer(t, dev, f32bytes(nw))
	norm := fuse == FuseNorm || fuse == FuseNormSwiGLU
	push := vk.MustPackPush(MatvecPush{Rows: uint32(rows), Cols: uint32(c.cols), N: uint32(c.n), Eps: eps})
	rec := dev.NewRecorder()
	defer rec.Close()
	binds := []vk.Bind{{Buf: newBuffer(t, dev, c.gpu), Access: vk.Read}, {Buf: xb, Access: vk.Read}, {Buf: yb, Access: vk.Write}}
	if dx != nil {
		xq := newBuffer(t, dev, make([]byte, DotXBytes(uint32(c.n), uint32(c.cols))))
		dxBinds := []vk.Bind{{Buf: xb, Access: vk.Read}, {Buf: xq, Access: vk.Write}}
		if norm {
			dxBinds = append(dxBinds, vk.Bind{Buf: nwb, Access: vk.Read})
		}
		rec.Dispatch(dx, push, DotXGroups(uint32(c.n), uint32(c.cols)), dxBinds...)
		binds[1].Buf = xq
	} else if norm {
		binds = append(binds, vk.Bind{Buf: nwb, Access: vk.Read})
	}
	if fuse == FuseAdd {
		binds[2].Access = vk.ReadWrite
	}
	rec.Dispatch(k, push, MatvecGroups(uint32(rows), k.Spec().Specialization), binds...)
	require.NoError(t, dev.Run(rec))
	return download(t, yb, c.n*rows), want, scale
}

// TestMatvecDotChoice: a GPU profile takes matvec_dot only where the user
// asked (Device.MatvecDot, MODRUN_MATVEC_DOT=1) on a device with integer
// dot products, for a quantized type: the decode's one vector in one tile
// where x fits the device's shared memory, else in tiles of 4,096 columns;
// a batched step's vectors in tiles of up to 2,048, smaller where NB
// vectors of them do not fit. Else matvec_rows (matvec_words batched), as
// without it.
func TestMatvecDotChoice(t *testing.T) {
	dev := smallGPU // 16 KB of shared memory
	dev.IntegerDotProduct, dev.MatvecDot = true, true
	p := NewProfile(dev)
	sg := dev.SubgroupSize
	name, spec := p.Matvec(MatvecQ8_0, FuseNormSwiGLU, 1, 4096)
	assert.Equal(t, MatvecFusedName(MatvecQ8_0, ReduceSubgroupDot, FuseNormSwiGLU), name)
	assert.Equal(t, []uint32{4 * sg, sg, 1, p.rowsPerSubgroup(FuseNormSwiGLU, 1), 1, 4096}, spec)
	_, spec = p.Matvec(MatvecQ8_0, FuseAdd, 1, 11008)
	assert.Equal(t, uint32(11264), spec[5], "the tile: the row rounded up to 1,024")
	_, spec = p.Matvec(MatvecQ8_0, FuseAdd, 1, 16384)
	assert.Equal(t, uint32(4096), spec[5], "16,384 columns past 16 KB of shared memory: tiles of 4,096")
	for _, typ := range MatvecDotTypes[1:] {
		name, spec := p.Matvec(typ, FuseAdd, 1, 11008)
		assert.Equal(t, MatvecFusedName(typ, ReduceSubgroupDot, FuseAdd), name, "%s: 11,008 columns (7B's down) fit 16 KB", typ)
		assert.Equal(t, []uint32{4 * sg, sg, 1, p.rowsPerSubgroup(FuseAdd, 1), 2, 11264}, spec, "%s: 2 groups in flight", typ)
		_, spec = p.Matvec(typ, FuseAdd, 1, 14336)
		assert.Equal(t, uint32(4096), spec[5], "%s: 14,336 columns past 16 KB of shared memory: tiles of 4,096", typ)
		name, spec = p.MatvecBatch(typ, FuseNormSwiGLU, 16, 8, 4096)
		assert.Equal(t, MatvecFusedName(typ, ReduceSubgroupDot+MatvecDotPre, FuseNormSwiGLU), name, "%s: a batched step, x quantized by dot_x", typ)
		assert.Equal(t, []uint32{4 * sg, sg, 8, 1, 1, 1024}, spec, "%s: 8 vectors of 2,048 columns past 16 KB: tiles of 1,024; 2 rows walked, a gate and an up row", typ)
		_, spec = p.MatvecBatch(typ, FuseNone, 3, 8, 512)
		assert.Equal(t, []uint32{4 * sg, sg, 3, 4, 1, 512}, spec, "%s: 3 rows of 512 columns: one tile, 3 vectors", typ)
	}
	for _, c := range []struct {
		what      string
		typ       string
		n, cols   uint32
		dot, asks bool
	}{
		{"F16", MatvecF16, 1, 4096, true, true},
		{"two vectors in Matvec (MatvecBatch's own)", MatvecQ8_0, 2, 4096, true, true},
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
	d := dev
	d.MatvecDot = false
	name, _ = NewProfile(d).MatvecBatch(MatvecQ4_K, FuseNone, 8, 8, 4096)
	assert.NotContains(t, name, ReduceSubgroupDot, "a batched step without MODRUN_MATVEC_DOT=1")
}

// TestDotX checks dot_x (a batched step's x quantized once for matvec_dot's
// PREQ variants) against QuantizeDotX, its host mirror: blocks of 32 and
// 256, with and without the norm's weight, 3 vectors of 256 columns (one
// workgroup, 8 chunks) and of 8,448 (264 chunks: a second workgroup with
// 8), a block of zeros and, in the middle vector, a NaN. q must be the
// host's but where x*127/max|x| lies within 1e-3 of a half (a device
// whose division is not IEEE's may round there the other way); each
// chunk's halves' sums must be those of the kernel's own q; the scales the
// host's to an ulp (NaN for the NaN's block), the sums of squares to 1e-6.
func TestDotX(t *testing.T) {
	dev := openDevice(t)
	for _, xb := range []int{32, 256} {
		typ := MatvecQ8_0
		if xb == 256 {
			typ = MatvecQ4_K
		}
		for _, fuse := range []string{FuseNone, FuseNorm} {
			v, err := Lookup(DotXName(typ, fuse))
			require.NoError(t, err)
			k := newKernel(t, dev, v)
			for _, cols := range []int{256, 8448} {
				const n = 3
				rng := rand.New(rand.NewSource(int64(xb + cols)))
				x := make([]float32, n*cols)
				for i := range x {
					x[i] = float32(rng.NormFloat64() * 3)
				}
				clear(x[cols-xb : cols])             // vector 0's last block: zeros
				x[cols+cols/2] = float32(math.NaN()) // vector 1: a NaN
				var nw []float32
				if fuse == FuseNorm {
					nw = make([]float32, cols)
					for i := range nw {
						nw[i] = float32(0.5 + rng.Float64())
					}
				}
				want := QuantizeDotX(x, nw, n, cols, xb)
				xq := newBuffer(t, dev, make([]byte, DotXBytes(n, uint32(cols))))
				binds := []vk.Bind{{Buf: newBuffer(t, dev, f32bytes(x)), Access: vk.Read}, {Buf: xq, Access: vk.Write}}
				if nw != nil {
					binds = append(binds, vk.Bind{Buf: newBuffer(t, dev, f32bytes(nw)), Access: vk.Read})
				}
				rec := dev.NewRecorder()
				rec.Dispatch(k, vk.MustPackPush(MatvecPush{Cols: uint32(cols), N: n}), DotXGroups(n, uint32(cols)), binds...)
				require.NoError(t, dev.Run(rec))
				rec.Close()
				raw := make([]byte, DotXBytes(n, uint32(cols)))
				require.NoError(t, xq.Download(raw, 0))
				got := make([]uint32, len(raw)/4)
				for i := range got {
					got[i] = uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24
				}
				chunks := cols / 32
				meta, nc := n*cols/4, n*chunks
				label := fmt.Sprintf("%s/%d cols", v.Name, cols)
				ties, bad := 0, 0
				for vi := range n {
					for c := range chunks {
						g := vi*chunks + c
						d := math.Float32frombits(want[meta+nc+g])
						gd := math.Float32frombits(got[meta+nc+g])
						if math.IsNaN(float64(d)) {
							if !math.IsNaN(float64(gd)) {
								t.Errorf("%s: vector %d chunk %d: scale %g, want NaN (its block holds a NaN)", label, vi, c, gd)
							}
							continue
						}
						if u := math.Float32bits(gd) - math.Float32bits(d); gd != d && u != 1 && u != ^uint32(0) {
							t.Errorf("%s: vector %d chunk %d: scale %g, want %g", label, vi, c, gd, d)
						}
						var lo, hi int32
						for j := range 32 {
							gq := int32(int8(got[8*g+j/4] >> (8 * (j % 4))))
							wq := int32(int8(want[8*g+j/4] >> (8 * (j % 4))))
							if j < 16 {
								lo += gq
							} else {
								hi += gq
							}
							if gq == wq {
								continue
							}
							xv := x[vi*cols+32*c+j]
							if nw != nil {
								xv *= nw[32*c+j]
							}
							f := float64(xv) / float64(d)
							if gq-wq == 1 || wq-gq == 1 {
								if math.Abs(math.Abs(f-math.Trunc(f))-0.5) < 1e-3 {
									ties++
									continue
								}
							}
							bad++
							if bad < 5 {
								t.Errorf("%s: vector %d value %d: q %d, want %d (x/d %g)", label, vi, 32*c+j, gq, wq, f)
							}
						}
						if s2 := uint32(lo)&0xffff | uint32(hi)<<16; got[meta+g] != s2 {
							t.Errorf("%s: vector %d chunk %d: halves' sums %#x, its q's are %#x", label, vi, c, got[meta+g], s2)
						}
						gs, ws := math.Float32frombits(got[meta+2*nc+g]), math.Float32frombits(want[meta+2*nc+g])
						if math.Abs(float64(gs-ws)) > 1e-6*math.Abs(float64(ws)) {
							t.Errorf("%s: vector %d chunk %d: sum of squares %g, want %g", label, vi, c, gs, ws)
						}
					}
				}
				assert.Zero(t, bad, "%s: q off the host's away from a tie", label)
				t.Logf("%s: %d q a value off the host's at a tie", label, ties)
			}
		}
	}
}
