package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
)

func randInt8(g *rand.Rand, n int) []int8 {
	v := make([]int8, n)
	for i := range v {
		v[i] = int8(g.IntN(255) - 127)
	}
	return v
}

func randF32(g *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(g.NormFloat64())
	}
	return v
}

// Each kernel, on both paths, equals a float64 sum of the same products
// over ragged lengths (blocks: 1, 3, 9, 24; floats: tails past a multiple
// of 8). The integer block sums are exact on both paths; only the float32
// accumulation of scaled block sums differs, hence a relative 1e-5.
func TestKernels(t *testing.T) {
	g := rand.New(rand.NewPCG(1, 2))
	kernelPaths(t, func(t *testing.T) {
		for _, nb := range []int{1, 3, 9, 24} {
			n := nb * blockLen
			w, x := randInt8(g, n), randInt8(g, n)
			w[0], x[1] = -128, -127 // the extremes VPSIGNB and VPMADDUBSW must take
			wd, xd := randF32(g, nb), randF32(g, nb)
			q4 := make([]byte, n/2)
			for i := range q4 {
				q4[i] = byte(g.IntN(256))
			}
			var want8, want4 float64
			for b := range nb {
				var s8, s4 int64
				for j := range blockLen {
					s8 += int64(w[b*blockLen+j]) * int64(x[b*blockLen+j])
					nib := q4[b*16+j%16] & 0x0f
					if j >= 16 {
						nib = q4[b*16+j%16] >> 4
					}
					s4 += (int64(nib) - 8) * int64(x[b*blockLen+j])
				}
				want8 += float64(wd[b]) * float64(xd[b]) * float64(s8)
				want4 += float64(wd[b]) * float64(xd[b]) * float64(s4)
			}
			assertClose(t, want8, dotQ8(w, x, wd, xd), fmt.Sprintf("q8 %d blocks", nb))
			assertClose(t, want4, dotQ4(q4, x, wd, xd), fmt.Sprintf("q4 %d blocks", nb))
		}
		for _, n := range []int{1, 7, 8, 13, 48, 288, 301} {
			a, b := randF32(g, n), randF32(g, n)
			h := make([]uint16, n)
			var want32, want16 float64
			for i := range a {
				h[i] = gguf.F32ToF16(a[i])
				want32 += float64(a[i]) * float64(b[i])
				want16 += float64(gguf.F16ToF32(h[i])) * float64(b[i])
			}
			assertClose(t, want32, dotF32(a, b), fmt.Sprintf("f32 %d", n))
			assertClose(t, want16, dotF16(h, b), fmt.Sprintf("f16 %d", n))
		}
	})
}

// scale is the sum's magnitude the error is relative to: the terms can
// cancel, so relative to the result alone would demand the impossible.
func assertClose(t *testing.T, want float64, got float32, what string) {
	t.Helper()
	assert.InDelta(t, want, float64(got), 1e-5*math.Max(1, math.Abs(want))*10, what)
}

// quantizeRow (on the path this CPU takes) rounds each element to the nearest step of its block's
// max|x|/127: the error is at most half a step, the largest element is
// ±127 exactly, and a block of zeros stays zero.
func TestQuantizeRow(t *testing.T) {
	g := rand.New(rand.NewPCG(3, 4))
	x := randF32(g, 4*blockLen)
	clear(x[2*blockLen : 3*blockLen])
	x[3*blockLen+5] = 0.5 * x[3*blockLen] // a tie after scaling, unless it rounds
	q, d := make([]int8, len(x)), make([]float32, 4)
	quantizeRow(q, d, x)
	// Both paths give the same bytes.
	qGo, dGo := make([]int8, len(x)), make([]float32, 4)
	quantizeRowGo(qGo, dGo, x)
	assert.Equal(t, qGo, q)
	assert.Equal(t, dGo, d)
	for b := range d {
		var amax float32
		for j := range blockLen {
			amax = max(amax, float32(math.Abs(float64(x[b*blockLen+j]))))
		}
		require.InDelta(t, amax/127, d[b], 1e-9, "block %d scale", b)
		for j := range blockLen {
			i := b*blockLen + j
			assert.InDelta(t, x[i], float32(q[i])*d[b], float64(d[b])/2+1e-7, "element %d", i)
			if amax > 0 && (x[i] == amax || x[i] == -amax) {
				assert.EqualValues(t, 127, max(q[i], -q[i]), "element %d is its block's largest", i)
			}
		}
	}
	assert.Equal(t, make([]int8, blockLen), q[2*blockLen:3*blockLen])
}

// dotQ8x4 and dotQ4x4 are four dotQ8 (dotQ4) calls, on both paths, over ragged row counts of
// blocks.
func TestDotX4(t *testing.T) {
	g := rand.New(rand.NewPCG(5, 6))
	kernelPaths(t, func(t *testing.T) {
		for _, nb := range []int{1, 3, 9, 24} {
			cols := nb * blockLen
			w, x := randInt8(g, 4*cols), randInt8(g, cols)
			w[0], w[cols+33], x[1] = -128, -128, -127 // the extremes the sign tricks must take
			wd, xd := randF32(g, 4*nb), randF32(g, nb)
			q4 := make([]byte, 4*cols/2)
			for i := range q4 {
				q4[i] = byte(g.IntN(256))
			}
			var got, got4 [4]float32
			dotQ8x4(w, wd, x, xd, cols, &got)
			dotQ4x4(q4, wd, x, xd, cols, &got4)
			for r := range got {
				want := dotQ8Go(w[r*cols:(r+1)*cols], x, wd[r*nb:(r+1)*nb], xd)
				assertClose(t, float64(want), got[r], fmt.Sprintf("q8 %d blocks row %d", nb, r))
				want4 := dotQ4Go(q4[r*cols/2:(r+1)*cols/2], x, wd[r*nb:(r+1)*nb], xd)
				assertClose(t, float64(want4), got4[r], fmt.Sprintf("q4 %d blocks row %d", nb, r))
			}
		}
	})
}

// dotQ8x4x4 is sixteen dotQ8 calls (four weight rows by four activation
// rows), on every path, over odd and even block counts, with the extremes
// the sign tricks must take: -128 in weights, -127 in activations.
func TestDotX4X4(t *testing.T) {
	g := rand.New(rand.NewPCG(11, 12))
	kernelPaths(t, func(t *testing.T) {
		for _, nb := range []int{1, 2, 3, 9, 24} {
			cols := nb * blockLen
			w, x := randInt8(g, 4*cols), randInt8(g, 4*cols)
			w[0], w[cols+33], x[1], x[2*cols+5] = -128, -128, -127, -127 // activations are never -128 (quantizeRow)
			wd, xd := randF32(g, 4*nb), randF32(g, 4*nb)
			var got [16]float32
			dotQ8x4x4(w, wd, x, xd, cols, &got)
			for tok := range 4 {
				for r := range 4 {
					want := dotQ8Go(w[r*cols:(r+1)*cols], x[tok*cols:(tok+1)*cols], wd[r*nb:(r+1)*nb], xd[tok*nb:(tok+1)*nb])
					assertClose(t, float64(want), got[4*tok+r], fmt.Sprintf("%d blocks row %d token %d", nb, r, tok))
				}
			}
		}
	})
}

// Attention's kernels and the half decoder, on both paths, against plain
// float64 loops: head sizes a multiple of 8 (the SIMD case) and not.
func TestAttentionKernels(t *testing.T) {
	g := rand.New(rand.NewPCG(7, 8))
	kernelPaths(t, func(t *testing.T) {
		// Head sizes that take the mix kernel's pieces of 4, 2 and 1
		// vectors (and a width the AVX2 kernels leave to Go); key counts
		// around the scores kernel's groups of four and the mix's pairs.
		for _, shape := range [][2]int{{8, 5}, {12, 5}, {24, 1}, {48, 2}, {48, 3}, {48, 4}, {48, 16}, {64, 5}, {136, 7}} {
			hd, m := shape[0], shape[1]
			const stride = 200
			q, k := randF32(g, hd), randF32(g, m*stride)
			guarded := make([]float32, m+4) // past m: untouched
			got := guarded[:m]
			scores(got, q, k, stride, hd, 0.5)
			assert.Equal(t, []float32{0, 0, 0, 0}, guarded[m:], "scores hd %d: written past %d entries", hd, m)
			for e := range got {
				var want float64
				for j := range hd {
					want += float64(q[j]) * float64(k[e*stride+j])
				}
				assertClose(t, 0.5*want, got[e], fmt.Sprintf("scores hd %d entry %d", hd, e))
			}
			p := randF32(g, m)
			guarded = randF32(g, hd+8) // mix overwrites the first hd
			out, tail := guarded[:hd], slices.Clone(guarded[hd:])
			mix(out, k, stride, p)
			assert.Equal(t, tail, guarded[hd:], "mix hd %d: written past it", hd)
			for j := range out {
				var want float64
				for e := range p {
					want += float64(p[e]) * float64(k[e*stride+j])
				}
				assertClose(t, want, out[j], fmt.Sprintf("mix hd %d element %d", hd, j))
			}
			h := make([]uint16, hd+3)
			for i := range h {
				h[i] = gguf.F32ToF16(float32(g.NormFloat64()))
			}
			dec := make([]float32, len(h))
			f16Row(dec, h)
			for i := range h {
				assert.Equal(t, gguf.F16ToF32(h[i]), dec[i], "f16 %d of %d", i, len(h))
			}
		}
	})
}

// A NaN or an infinity anywhere in a block makes that block's scale NaN on
// both paths, so every dot product with the row is NaN: the max of |x| alone
// would drop a NaN on x86 (MAXPS returns its second operand), and an
// infinity would scale the rest of the block to 0. The other blocks stay
// as they were.
func TestQuantizeRowNonFinite(t *testing.T) {
	g := rand.New(rand.NewPCG(9, 10))
	clean := randF32(g, 3*blockLen)
	want, wantD := make([]int8, len(clean)), make([]float32, 3)
	quantizeRowGo(want, wantD, clean)
	kernelPaths(t, func(t *testing.T) {
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			for _, at := range []int{0, 7, 13, 20, blockLen - 1} { // each of the SIMD path's four vectors
				x := slices.Clone(clean)
				x[blockLen+at] = bad
				q, d := make([]int8, len(x)), make([]float32, 3)
				quantizeRow(q, d, x)
				assert.True(t, math.IsNaN(float64(d[1])), "%v at %d: scale %v", bad, at, d[1])
				assert.Equal(t, wantD[0], d[0], "block 0")
				assert.Equal(t, wantD[2], d[2], "block 2")
				w := randInt8(g, len(x))
				wd := []float32{1, 1, 1}
				assert.True(t, math.IsNaN(float64(dotQ8(w, q, wd, d))), "%v at %d: the dot product", bad, at)
			}
		}
	})
}

// matmul of a Q4_0 matrix, on every path: with VNNI a tile of four tokens
// or more unpacks four rows to int8 and takes Q8_0's four-by-four kernel
// (unpackQ4), the rest dotQ4x4 or dotQ4 per token. Every element equals
// dotQ4Go of its row and token, for token counts around the four-token
// groups and past a tokenTile, and row counts that leave a remainder of
// the four-row groups.
func TestMatmulQ4(t *testing.T) {
	g := rand.New(rand.NewPCG(13, 14))
	r := &Runner{pool: newPool(2)}
	kernelPaths(t, func(t *testing.T) {
		for _, n := range []int{1, 3, 4, 7, tokenTile + 6} {
			nb, rows := 3, 4*rowGrain+2
			cols := nb * blockLen
			w := &matrix{name: "q4", kind: kindQ4, rows: rows, cols: cols, q4: make([]byte, rows*cols/2), d: randF32(g, rows*nb)}
			for i := range w.q4 {
				w.q4[i] = byte(g.IntN(256))
			}
			x := &acts{}
			x.set(randF32(g, n*cols), n, cols)
			out := make([]float32, n*rows)
			r.matmul(out, x, w)
			for s := range n {
				for i := range rows {
					want := dotQ4Go(w.q4[i*cols/2:(i+1)*cols/2], x.q[s*cols:(s+1)*cols], w.d[i*nb:(i+1)*nb], x.d[s*nb:(s+1)*nb])
					assertClose(t, float64(want), out[s*rows+i], fmt.Sprintf("%d tokens row %d token %d", n, i, s))
				}
			}
		}
	})
}

// unpackQ4 against the plain rule, for every byte in both halves of a
// block (16 blocks hold each of the 256 bytes at each of the 16 places).
func TestUnpackQ4(t *testing.T) {
	q4 := make([]byte, 256*16)
	for i := range q4 {
		q4[i] = byte(i*17 + i/256)
	}
	got := make([]int8, 2*len(q4))
	unpackQ4(got, q4)
	for b := 0; b < len(q4)/16; b++ {
		for j := range 16 {
			v := q4[16*b+j]
			require.Equal(t, int8(v&0x0f)-8, got[32*b+j], "block %d element %d (byte %#x)", b, j, v)
			require.Equal(t, int8(v>>4)-8, got[32*b+j+16], "block %d element %d (byte %#x)", b, j+16, v)
		}
	}
}

// matmul of float matrices (F32, F16 and a BF16 one decoded a row at a
// time), on every path: four tokens or more take three rows at a time
// through dotF32x3x4, the rest dotF32. Every element equals a float64 dot
// of its decoded row and token, for token counts around the four-token
// groups and past a tokenTile, row counts that leave a remainder of the
// three-row groups, and widths a multiple of 8 (the AVX2 kernel) and not.
func TestMatmulFloat(t *testing.T) {
	g := rand.New(rand.NewPCG(15, 16))
	r := &Runner{pool: newPool(2)}
	kernelPaths(t, func(t *testing.T) {
		for _, cols := range []int{96, 100} {
			rows := 3*rowGrain + 2
			f32 := randF32(g, rows*cols)
			f16 := make([]uint16, rows*cols)
			bf16 := make([]byte, 2*rows*cols)
			for i, v := range f32 {
				f16[i] = gguf.F32ToF16(v)
				b := math.Float32bits(v) >> 16
				bf16[2*i], bf16[2*i+1] = byte(b), byte(b>>8)
			}
			src, err := mod.NewMat("bf16", gguf.TypeBF16, []uint64{uint64(cols), uint64(rows)}, bf16)
			require.NoError(t, err)
			mats := []*matrix{
				{name: "f32", kind: kindF32, rows: rows, cols: cols, f32: f32},
				{name: "f16", kind: kindF16, rows: rows, cols: cols, f16: f16},
				{name: "bf16", kind: kindRows, rows: rows, cols: cols, src: &src},
			}
			for _, w := range mats {
				row := make([]float32, cols)
				for _, n := range []int{1, 3, 4, 7, tokenTile + 6} {
					x := &acts{}
					x.set(randF32(g, n*cols), n, cols)
					out := make([]float32, n*rows)
					r.matmul(out, x, w)
					for i := range rows {
						switch w.kind {
						case kindF32:
							copy(row, f32[i*cols:(i+1)*cols])
						case kindF16:
							f16RowGo(row, f16[i*cols:(i+1)*cols])
						default:
							src.Row(i, row)
						}
						for s := range n {
							var want float64
							for j, v := range row {
								want += float64(v) * float64(x.f[s*cols+j])
							}
							assertClose(t, want, out[s*rows+i], fmt.Sprintf("%s %d cols %d tokens row %d token %d", w.name, cols, n, i, s))
						}
					}
				}
			}
		}
	})
}
