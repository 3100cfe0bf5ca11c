package cpu

// Q8_0 weights interleaved by 16 rows, for the VNNI product
// (q8i_vnni_amd64.s). Row-major quants (w.q8) put one row's bytes in a
// vector, so a kernel multiplies a row with a token lane by lane and must
// reduce the lanes and scale every block of every row and token apart:
// per 64 products, one VPDPBUSD and five more instructions, whether the
// tile holds 1 token or 4. Interleaved, a vector holds 4 bytes of each of
// 16 rows, the token's 4 bytes are broadcast to all of them, and a
// block's 8 vectors sum into the 16 rows' lanes: per 64 products, one
// VPDPBUSD and under one more. That is what lets a step of 8 sequences
// cost less than 8 single steps (issue 33).
//
// Every token count runs the same arithmetic per row and token (an exact
// integer sum per block, then float(sum)·(wd·xd) added block after block),
// so a row's result does not depend on the batch around it: a sequence's
// logits in a step of many equal its logits alone, bit for bit.

// q8iRows is the rows interleaved together: one AVX-512 vector of int32.
const q8iRows = 16

// q8i is a Q8_0 matrix interleaved, its rows padded to a multiple of 16
// with zero rows (scale 0).
type q8i struct {
	q []byte    // [groups][nb][8][16][4]: row r's bytes 4c..4c+3 of block b at ((g·nb+b)·8+c)·64+4r, each +128
	d []float32 // [groups][nb][16] the rows' block scales
}

// q8iAct is a token's block as the interleaved kernel reads it: its scale
// and -128·(the sum of its quants), which cancels the weights' +128.
type q8iAct struct {
	d float32
	s int32
}

// interleaveQ8 interleaves a row-major Q8_0 matrix (q [rows][cols], d
// [rows][cols/32]).
func interleaveQ8(q []int8, d []float32, rows, cols int) *q8i {
	nb, groups := cols/blockLen, (rows+q8iRows-1)/q8iRows
	p := &q8i{q: make([]byte, groups*q8iRows*cols), d: make([]float32, groups*nb*q8iRows)}
	for i := range p.q {
		p.q[i] = 128 // the padding rows' zeros
	}
	for r := range rows {
		g, rr := r/q8iRows, r%q8iRows
		for b := range nb {
			base := (g*nb + b) * q8iRows
			p.d[base+rr] = d[r*nb+b]
			for j := range blockLen {
				c, k := j/4, j%4
				p.q[((base/q8iRows)*8+c)*64+4*rr+k] = byte(int(q[r*cols+b*blockLen+j]) + 128)
			}
		}
	}
	return p
}

// rowMajor is interleaveQ8's inverse.
func (p *q8i) rowMajor(rows, cols int) ([]int8, []float32) {
	nb := cols / blockLen
	q, d := make([]int8, rows*cols), make([]float32, rows*nb)
	for r := range rows {
		g, rr := r/q8iRows, r%q8iRows
		for b := range nb {
			gb := g*nb + b
			d[r*nb+b] = p.d[gb*q8iRows+rr]
			for j := range blockLen {
				q[r*cols+b*blockLen+j] = int8(int(p.q[(gb*8+j/4)*64+4*rr+j%4]) - 128)
			}
		}
	}
	return q, d
}

// q8Rows is a Q8_0 matrix's row-major quants and scales, which the
// kernels other than the interleaved one read. Where the matrix is held
// interleaved (a VNNI CPU), they are made on first use: only when tests
// or benchmarks turn VNNI off.
func (w *matrix) q8Rows() ([]int8, []float32) {
	if w.i16 != nil {
		w.rowsOnce.Do(func() { w.q8, w.d = w.i16.rowMajor(w.rows, w.cols) })
	}
	return w.q8, w.d
}

// interleave holds a Q8_0 matrix interleaved instead of row-major, where
// the interleaved kernel runs.
func (w *matrix) interleave() {
	if !hasVNNI || w.kind != kindQ8 || w.cols%blockLen != 0 {
		return
	}
	w.i16 = interleaveQ8(w.q8, w.d, w.rows, w.cols)
	w.q8, w.d = nil, nil
}

// q8iActs fills a.ia from a's quantized rows, once per set.
func (a *acts) q8iActs() {
	if a.iready {
		return
	}
	nb := a.cols / blockLen
	a.ia = grow(a.ia, a.n*nb)
	for s := range a.n * nb {
		var sum int32
		for _, v := range a.q[s*blockLen : (s+1)*blockLen] {
			sum += int32(v)
		}
		a.ia[s] = q8iAct{d: a.d[s], s: -128 * sum}
	}
	a.iready = true
}

// matmulQ8i is matmul of an interleaved Q8_0 matrix: workers split the
// groups of 16 rows; each runs its groups over a tile of tokens (so the
// group's weights stay in cache), 8 tokens a call, then 4, then 1.
func (r *Runner) matmulQ8i(out []float32, x *acts, w *matrix) {
	x.quantize(r.pool)
	x.q8iActs()
	n, cols, nb := x.n, w.cols, w.cols/blockLen
	groups := (w.rows + q8iRows - 1) / q8iRows
	r.pool.run(groups, 1, func(lo, hi int) {
		var tmp [8 * q8iRows]float32 // a last group's tokens when its rows are padding
		for t0 := 0; t0 < n; t0 += tokenTile {
			t1 := min(n, t0+tokenTile)
			for g := lo; g < hi; g++ {
				wq, wd := w.i16.q[g*nb*q8iRows*blockLen:(g+1)*nb*q8iRows*blockLen], w.i16.d[g*nb*q8iRows:(g+1)*nb*q8iRows]
				r0 := g * q8iRows
				for s := t0; s < t1; {
					k := 1
					switch {
					case t1-s >= 8:
						k = 8
					case t1-s >= 4:
						k = 4
					}
					xq, xa := x.q[s*cols:(s+k)*cols], x.ia[s*nb:(s+k)*nb]
					if r0+q8iRows <= w.rows {
						dotQ8i(wq, wd, nb, xq, xa, k, out[s*w.rows+r0:], w.rows)
					} else {
						dotQ8i(wq, wd, nb, xq, xa, k, tmp[:], q8iRows)
						for t := range k {
							copy(out[(s+t)*w.rows+r0:(s+t+1)*w.rows], tmp[t*q8iRows:])
						}
					}
					s += k
				}
			}
		}
	})
}

// dotQ8iGo is the interleaved kernel's arithmetic in Go, for its tests:
// out[t·ostride+r] for k tokens and the group's 16 rows. Go does not fuse
// float32 a·b+c by contract, so it may differ from the assembly's fused
// sum by a rounding per block.
func dotQ8iGo(wq []byte, wd []float32, nb int, xq []int8, xa []q8iAct, k int, out []float32, ostride int) {
	cols := nb * blockLen
	for t := range k {
		for r := range q8iRows {
			var acc float32
			for b := range nb {
				sum := xa[t*nb+b].s
				for j := range blockLen {
					sum += int32(wq[(b*8+j/4)*64+4*r+j%4]) * int32(xq[t*cols+b*blockLen+j])
				}
				acc += float32(sum) * (wd[b*q8iRows+r] * xa[t*nb+b].d)
			}
			out[t*ostride+r] = acc
		}
	}
}
