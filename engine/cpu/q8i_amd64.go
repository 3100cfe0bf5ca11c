package cpu

//go:noescape
func q8i16x8VNNI(w *byte, wd *float32, nb int, x *int8, xstride int, xa *q8iAct, astride int, out *float32, ostride int)

//go:noescape
func q8i16x4VNNI(w *byte, wd *float32, nb int, x *int8, xstride int, xa *q8iAct, astride int, out *float32, ostride int)

//go:noescape
func q8i16x1VNNI(w *byte, wd *float32, nb int, x *int8, xstride int, xa *q8iAct, astride int, out *float32, ostride int)

// dotQ8i runs the interleaved kernel of k tokens (1, 4 or 8) over one
// group of 16 rows (wq, wd: nb blocks), token t's 16 results at
// out[t·ostride:]. It checks the lengths the assembly trusts.
func dotQ8i(wq []byte, wd []float32, nb int, xq []int8, xa []q8iAct, k int, out []float32, ostride int) {
	cols := nb * blockLen
	_, _, _, _ = wq[nb*q8iRows*blockLen-1], wd[nb*q8iRows-1], xq[k*cols-1], xa[k*nb-1]
	_ = out[(k-1)*ostride+q8iRows-1]
	switch k {
	case 8:
		q8i16x8VNNI(&wq[0], &wd[0], nb, &xq[0], cols, &xa[0], 8*nb, &out[0], 4*ostride)
	case 4:
		q8i16x4VNNI(&wq[0], &wd[0], nb, &xq[0], cols, &xa[0], 8*nb, &out[0], 4*ostride)
	case 1:
		q8i16x1VNNI(&wq[0], &wd[0], nb, &xq[0], cols, &xa[0], 8*nb, &out[0], 4*ostride)
	default:
		panic("cpu: dotQ8i of 1, 4 or 8 tokens")
	}
}

//go:noescape
func q8l16x8VNNI(w *byte, wd *float32, nb int, x *int8, xstride int, xa *q8lAct, astride int, out *float32, ostride int)

//go:noescape
func q8l16x4VNNI(w *byte, wd *float32, nb int, x *int8, xstride int, xa *q8lAct, astride int, out *float32, ostride int)

//go:noescape
func q8l16x1VNNI(w *byte, wd *float32, nb int, x *int8, xstride int, xa *q8lAct, astride int, out *float32, ostride int)

// dotQ8l is dotQ8i over a legacy tile (legacyTile: wd holds each block's
// 16 scales, then its 16 constants), each token block's xs times the
// constants added: out[t·ostride+r] for k tokens (1, 4 or 8).
func dotQ8l(wq []byte, wd []float32, nb int, xq []int8, xa []q8lAct, k int, out []float32, ostride int) {
	cols := nb * blockLen
	_, _, _, _ = wq[nb*q8iRows*blockLen-1], wd[2*nb*q8iRows-1], xq[k*cols-1], xa[k*nb-1]
	_ = out[(k-1)*ostride+q8iRows-1]
	switch k {
	case 8:
		q8l16x8VNNI(&wq[0], &wd[0], nb, &xq[0], cols, &xa[0], 16*nb, &out[0], 4*ostride)
	case 4:
		q8l16x4VNNI(&wq[0], &wd[0], nb, &xq[0], cols, &xa[0], 16*nb, &out[0], 4*ostride)
	case 1:
		q8l16x1VNNI(&wq[0], &wd[0], nb, &xq[0], cols, &xa[0], 16*nb, &out[0], 4*ostride)
	default:
		panic("cpu: dotQ8l of 1, 4 or 8 tokens")
	}
}
