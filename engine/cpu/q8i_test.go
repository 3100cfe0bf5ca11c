package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randQ8 is a Q8_0 matrix's quants over the whole int8 range (-128 too:
// quantizeRow writes it for a non-finite block) and its block scales.
func randQ8(g *rand.Rand, rows, cols int) ([]int8, []float32) {
	q := make([]int8, rows*cols)
	for i := range q {
		q[i] = int8(g.IntN(256) - 128)
	}
	return q, randF32(g, rows*cols/blockLen)
}

// interleaveQ8 and rowMajor are inverses, for row counts short of a group
// of 16, one group, and past it (the padding rows dropped).
func TestInterleaveQ8(t *testing.T) {
	g := rand.New(rand.NewPCG(31, 32))
	for _, rows := range []int{1, 15, 16, 17, 40} {
		for _, nb := range []int{1, 3} {
			q, d := randQ8(g, rows, nb*blockLen)
			p := interleaveQ8(q, d, rows, nb*blockLen)
			require.Len(t, p.d, (rows+15)/16*16*nb)
			gq, gd := p.rowMajor(rows, nb*blockLen)
			assert.Equal(t, q, gq, "%d rows of %d blocks: quants", rows, nb)
			assert.Equal(t, d, gd, "%d rows of %d blocks: scales", rows, nb)
		}
	}
}

// The interleaved kernels (1, 4 and 8 tokens) against dotQ8iGo within
// assertClose (the Go sum rounds a·b and then +c, the assembly fuses
// them: a rounding per block), and each token's 16 results bit for bit
// the same in a tile of 8, of 4 and alone: the batch a row runs in must
// not change its logits.
func TestDotQ8i(t *testing.T) {
	if !hasVNNI {
		t.Skipf("no AVX-512 VNNI on this CPU (%s): the interleaved kernel does not run", Kernels())
	}
	g := rand.New(rand.NewPCG(33, 34))
	for _, nb := range []int{1, 2, 9, 24} {
		cols := nb * blockLen
		q, d := randQ8(g, q8iRows, cols)
		p := interleaveQ8(q, d, q8iRows, cols)
		x := &acts{}
		x.set(randF32(g, 8*cols), 8, cols)
		x.quantize(newPool(1))
		x.q8iActs()
		want := make([]float32, 8*q8iRows)
		dotQ8iGo(p.q, p.d, nb, x.q, x.ia, 8, want, q8iRows)
		tiles := map[int][]float32{}
		for _, k := range []int{8, 4, 1} {
			got := make([]float32, 8*q8iRows)
			for s := 0; s < 8; s += k {
				dotQ8i(p.q, p.d, nb, x.q[s*cols:], x.ia[s*nb:], k, got[s*q8iRows:], q8iRows)
			}
			for i := range got {
				assertClose(t, float64(want[i]), got[i], fmt.Sprintf("%d blocks, tiles of %d: token %d row %d", nb, k, i/q8iRows, i%q8iRows))
			}
			tiles[k] = got
		}
		assert.Equal(t, tiles[1], tiles[8], "%d blocks: tiles of 8 against one token at a time", nb)
		assert.Equal(t, tiles[1], tiles[4], "%d blocks: tiles of 4 against one token at a time", nb)
	}
}

// matmul of a Q8_0 matrix, on every path (the interleaved one where VNNI
// runs): every element equals dotQ8Go of its row and token, for token
// counts around the 4- and 8-token tiles and past a tokenTile, and row
// counts that leave part of a group of 16 (and of the row-major paths'
// four-row groups). On every path each token's results equal, bit for
// bit, its results alone.
func TestMatmulQ8(t *testing.T) {
	g := rand.New(rand.NewPCG(35, 36))
	r := &Runner{pool: newPool(2)}
	kernelPaths(t, func(t *testing.T) {
		for _, rows := range []int{16, 4*rowGrain + 2, 37} {
			nb := 3
			cols := nb * blockLen
			q, d := randQ8(g, rows, cols)
			w := &matrix{name: "q8", kind: kindQ8, rows: rows, cols: cols, q8: q, d: d}
			w.interleave()
			for _, n := range []int{1, 3, 4, 7, 8, 13, tokenTile + 6} {
				f := randF32(g, n*cols)
				x := &acts{}
				x.set(f, n, cols)
				out := make([]float32, n*rows)
				r.matmul(out, x, w)
				for s := range n {
					for i := range rows {
						want := dotQ8Go(q[i*cols:(i+1)*cols], x.q[s*cols:(s+1)*cols], d[i*nb:(i+1)*nb], x.d[s*nb:(s+1)*nb])
						assertClose(t, float64(want), out[s*rows+i], fmt.Sprintf("%d rows, %d tokens: row %d token %d", rows, n, i, s))
					}
				}
				for _, s := range []int{0, n / 2, n - 1} {
					one := &acts{}
					one.set(f[s*cols:(s+1)*cols], 1, cols)
					alone := make([]float32, rows)
					r.matmul(alone, one, w)
					require.Equal(t, alone, out[s*rows:(s+1)*rows], "%d rows, %d tokens: token %d against itself alone", rows, n, s)
				}
			}
		}
	})
}

// BenchmarkMatmulQ8 times matmul of stories15m's Q8_0 shapes (nFF x nEmbd
// and the output head) for 1 and 8 tokens, row-major (the 4-row and
// 4x4 kernels) against interleaved, in one run so the ratio holds under
// load. The two give the same results to a rounding (TestMatmulQ8).
func BenchmarkMatmulQ8(b *testing.B) {
	g := rand.New(rand.NewPCG(37, 38))
	r := &Runner{pool: newPool(2)}
	for _, shape := range []struct{ rows, cols int }{{768, 288}, {32000, 288}} {
		q, d := randQ8(g, shape.rows, shape.cols)
		rowMajor := &matrix{name: "q8", kind: kindQ8, rows: shape.rows, cols: shape.cols, q8: q, d: d}
		inter := &matrix{name: "q8", kind: kindQ8, rows: shape.rows, cols: shape.cols, q8: q, d: d}
		inter.interleave()
		for _, n := range []int{1, 8} {
			x := &acts{}
			x.set(randF32(g, n*shape.cols), n, shape.cols)
			out := make([]float32, n*shape.rows)
			for _, w := range []*matrix{rowMajor, inter} {
				layout := "rows"
				if w.i16 != nil {
					layout = "interleaved"
				}
				b.Run(fmt.Sprintf("%dx%d/n%d/%s", shape.rows, shape.cols, n, layout), func(b *testing.B) {
					for range b.N {
						x.ready = false
						r.matmul(out, x, w)
					}
					b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "tok/s")
				})
			}
		}
	}
}
