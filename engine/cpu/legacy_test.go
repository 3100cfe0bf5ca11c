package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
)

// lTypes are the types of legacy.go.
var lTypes = []gguf.TensorType{gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1}

// lWant is the reference for a product with a row of type typ: gguf's
// dequantized row w dotted in float64 with the activations' Q8_0 values
// (q·d), and the magnitude the float32 rounding is relative to. The
// kernels sum d·Σu·x and c·Σx apart, where each weight is d·u + c (c = −16·d
// for Q5_0: both terms can be far larger than the weights, which cancel
// them), so it is Σ (|w| + 2|c|)·|x| ≥ Σ (|d·u| + |c|)·|x|, with c the value
// gguf decodes for a quant of 0 in the block (raw's block b with its quants
// and fifth bits cleared).
func lWant(t *testing.T, typ gguf.TensorType, raw []byte, w []float32, q []int8, d []float32) (want, scale float64) {
	t.Helper()
	l := legacyTypes[typ]
	for b := range d {
		zero := append([]byte(nil), raw[b*l.bytes:(b+1)*l.bytes]...)
		clear(zero[l.qs : l.qs+16])
		if l.qh >= 0 {
			clear(zero[l.qh : l.qh+4])
		}
		var y [blockLen]float32
		require.NoError(t, gguf.Dequantize(typ, zero, y[:]))
		c := math.Abs(float64(y[0]))
		for i := b * blockLen; i < (b+1)*blockLen; i++ {
			xv := float64(q[i]) * float64(d[b])
			want += float64(w[i]) * xv
			scale += (math.Abs(float64(w[i])) + 2*c) * math.Abs(xv)
		}
	}
	return want, scale
}

// lRows quantizes rows×cols random weights to typ with gguf (rows of
// different magnitudes and offsets, so that mins and fifth bits vary) and
// returns the blocks and gguf's dequantization of them.
func lRows(t *testing.T, g *rand.Rand, typ gguf.TensorType, rows, cols int) ([]byte, []float32) {
	t.Helper()
	w := randF32(g, rows*cols)
	for i := range w {
		w[i] = w[i]*float32(1+i/cols%3) + float32(i/cols%2)
	}
	raw, err := gguf.Quantize(typ, w)
	require.NoError(t, err)
	deq := make([]float32, rows*cols)
	require.NoError(t, gguf.Dequantize(typ, raw, deq))
	return raw, deq
}

// The Q4_1, Q5_0 and Q5_1 dot products, on every path, equal gguf's
// dequantization dotted with the Q8_0 activations, over 1, 2, 3, 5 and 9
// blocks: the integer sums are exact, so only the float32 rounding of two
// products per block remains (relative 1e-6 of lWant's scale; a wrong
// quant, fifth bit, scale or min moves a product by far more). A block
// with a NaN scale makes the dot NaN.
func TestLegacyDot(t *testing.T) {
	g := rand.New(rand.NewPCG(41, 42))
	kernelPaths(t, func(t *testing.T) {
		for _, typ := range lTypes {
			for _, nb := range []int{1, 2, 3, 5, 9} {
				cols := nb * blockLen
				raw, deq := lRows(t, g, typ, 1, cols)
				x := randF32(g, cols)
				x[7] = 40 // one large activation: its block's others quantize coarsely
				q, d := make([]int8, cols), make([]float32, nb)
				quantizeRow(q, d, x)
				want, scale := lWant(t, typ, raw, deq, q, d)
				got := dotLegacy(typ, raw, q, d)
				assert.InDelta(t, want, float64(got), 1e-6*scale, "%s %d blocks", typ, nb)
				raw[(nb-1)*legacyTypes[typ].bytes+1] = 0x7e // the last block's d a NaN: the dot shows it
				assert.True(t, math.IsNaN(float64(dotLegacy(typ, raw, q, d))), "%s %d blocks, a NaN scale", typ, nb)
			}
		}
	})
}

// matmul of Q4_1, Q5_0 and Q5_1 matrices, on every path: four tokens or
// more take, with VNNI, the interleaved kernel with constants (dotQ8l) on
// rows unpacked 16 at a time (legacyTile), with AVX2 the four-row Q8_0
// kernel on rows unpacked four at a time (legacyRows4), the rest and the
// Go path dotLegacy. Every
// element equals TestLegacyDot's reference, for token counts around the
// kernel's 8, 4 and 1 and past a tokenTile, and row counts that leave a
// remainder of the 16-row groups, over an odd number of blocks.
func TestMatmulLegacy(t *testing.T) {
	g := rand.New(rand.NewPCG(43, 44))
	r := &Runner{pool: newPool(2)}
	kernelPaths(t, func(t *testing.T) {
		for _, typ := range lTypes {
			rows, cols := 2*rowGrain+6, 5*blockLen
			raw, deq := lRows(t, g, typ, rows, cols)
			w := &matrix{name: typ.String(), kind: kindL, ktype: typ, rows: rows, cols: cols, raw: raw}
			for _, n := range []int{1, 3, 4, 7, tokenTile + 6} {
				x := &acts{}
				x.set(randF32(g, n*cols), n, cols)
				out := make([]float32, n*rows)
				r.matmul(out, x, w)
				nb := cols / blockLen
				for s := range n {
					for i := range rows {
						want, scale := lWant(t, typ, raw[i*nb*legacyTypes[typ].bytes:], deq[i*cols:(i+1)*cols], x.q[s*cols:(s+1)*cols], x.d[s*nb:(s+1)*nb])
						require.InDelta(t, want, float64(out[s*rows+i]), 1e-6*scale, fmt.Sprintf("%s %d tokens row %d token %d", typ, n, i, s))
					}
				}
			}
		}
	})
}

// legacyTile's gathers (legacyTileVNNI) write the bytes and floats of its
// Go twin, for each type, over 1, 2 and 5 blocks and a tile that starts
// past the first rows (the rows' stride is the matrix's, not the tile's).
func TestLegacyTile(t *testing.T) {
	if !hasVNNI {
		t.Skipf("no AVX-512 VNNI on this CPU (%s): legacyTileVNNI does not run", Kernels())
	}
	savedSIMD, savedVNNI := useSIMD, useVNNI
	t.Cleanup(func() { useSIMD, useVNNI = savedSIMD, savedVNNI })
	g := rand.New(rand.NewPCG(48, 49))
	for _, typ := range lTypes {
		for _, nb := range []int{1, 2, 5} {
			rows, cols := 2*q8iRows+5, nb*blockLen
			raw, _ := lRows(t, g, typ, rows, cols)
			w := &matrix{name: typ.String(), kind: kindL, ktype: typ, rows: rows, cols: cols, raw: raw}
			for _, i := range []int{0, 13, rows - q8iRows} {
				tiles := [2]legacyTileBuf{}
				for p, vnni := range []bool{false, true} {
					useSIMD, useVNNI = vnni, vnni
					tb := &tiles[p]
					tb.q, tb.d = make([]byte, q8iRows*cols), make([]float32, 2*q8iRows*nb)
					for j := range tb.d {
						tb.d[j] = float32(j) // overwritten, Q5_0's constants too
					}
					legacyTile(w, i, tb)
				}
				assert.Equal(t, tiles[0].q, tiles[1].q, "%s %d blocks rows %d..: quants", typ, nb, i)
				assert.Equal(t, tiles[0].d, tiles[1].d, "%s %d blocks rows %d..: scales and constants", typ, nb, i)
			}
		}
	}
}

// Q4_1, Q5_0 and Q5_1 matrices stay in the file's bytes (the matrix holds
// the file's own slice), and models of those types give the reference's
// greedy tokens and its logits within QuantizedRelTol, on every kernel
// path, batched prompts (the tile kernel) and decode alike, with and
// without routed layers.
func TestLegacyMatrix(t *testing.T) {
	for _, typ := range lTypes {
		raw, _ := lRows(t, rand.New(rand.NewPCG(45, 46)), typ, 3, 96)
		m, err := mod.NewMat("w", typ, []uint64{96, 3}, raw)
		require.NoError(t, err)
		w, err := newMatrix(&m)
		require.NoError(t, err)
		assert.Equal(t, kindL, w.kind, typ.String())
		_, packed := m.Data()
		assert.Same(t, &packed[0], &w.raw[0], "%s: the file's bytes, not a copy", typ)
		assert.Equal(t, int64(len(packed)), w.bytes(), typ.String())
	}
	var models []namedModel
	for _, typ := range lTypes {
		for _, capacity := range []float32{0, 0.25} {
			models = append(models, namedModel{fmt.Sprintf("%s capacity %g", typ, capacity), buildSynth(t, tiny, typ, capacity)})
		}
	}
	lockstepModels(t, models, kindL)
}

// A 2048×2048 matrix's product with one token (decode) and with 128 (a
// prompt), for the types that were requantized to Q8_0 at load before
// they had kernels of their own, and Q8_0 itself (what they ran as).
func BenchmarkMatmulNative(b *testing.B) {
	benchMatmul(b, 47, gguf.TypeQ8_0, gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeQ2_K, gguf.TypeQ3_K)
}

// benchMatmul runs matmul of a random 2048×2048 matrix of each type with
// 1 and 128 tokens; bytes/s counts the file's weight bytes.
func benchMatmul(b *testing.B, seed uint64, types ...gguf.TensorType) {
	g := rand.New(rand.NewPCG(seed, seed+1))
	const rows, cols = 2048, 2048
	r := &Runner{pool: thePool()}
	for _, typ := range types {
		raw, err := gguf.Quantize(typ, randF32(g, rows*cols))
		if err != nil {
			b.Fatal(err)
		}
		src, err := mod.NewMat(typ.String(), typ, []uint64{cols, rows}, raw)
		if err != nil {
			b.Fatal(err)
		}
		w, err := newMatrix(&src)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{1, 128} {
			x := &acts{}
			f := randF32(g, n*cols)
			out := make([]float32, n*rows)
			b.Run(fmt.Sprintf("%s/%d", typ, n), func(b *testing.B) {
				b.SetBytes(int64(len(raw)))
				for i := 0; i < b.N; i++ {
					x.set(f, n, cols)
					r.matmul(out, x, w)
				}
			})
		}
	}
}
