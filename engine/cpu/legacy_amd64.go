package cpu

//go:noescape
func q41DotAVX2(w *byte, x *int8, xd *float32, nb int) float32

//go:noescape
func q41DotVNNI(w *byte, x *int8, xd *float32, nb int) float32

//go:noescape
func q50DotAVX2(w *byte, x *int8, xd *float32, nb int) float32

//go:noescape
func q50DotVNNI(w *byte, x *int8, xd *float32, nb int) float32

//go:noescape
func q51DotAVX2(w *byte, x *int8, xd *float32, nb int) float32

//go:noescape
func q51DotVNNI(w *byte, x *int8, xd *float32, nb int) float32

// legacyDotSIMD runs a Q4_1/Q5_0/Q5_1 row kernel (its AVX2 or VNNI form)
// after checking the lengths it trusts; lb is the type's block bytes.
func legacyDotSIMD(avx2, vnni func(w *byte, x *int8, xd *float32, nb int) float32, lb int, w []byte, x []int8, xd []float32) float32 {
	nb := len(xd)
	if nb == 0 {
		return 0
	}
	_, _ = w[nb*lb-1], x[nb*blockLen-1]
	if useVNNI {
		return vnni(&w[0], &x[0], &xd[0], nb)
	}
	return avx2(&w[0], &x[0], &xd[0], nb)
}

func dotQ41SIMD(w []byte, x []int8, xd []float32) float32 {
	return legacyDotSIMD(q41DotAVX2, q41DotVNNI, 20, w, x, xd)
}

func dotQ50SIMD(w []byte, x []int8, xd []float32) float32 {
	return legacyDotSIMD(q50DotAVX2, q50DotVNNI, 22, w, x, xd)
}

func dotQ51SIMD(w []byte, x []int8, xd []float32) float32 {
	return legacyDotSIMD(q51DotAVX2, q51DotVNNI, 24, w, x, xd)
}

//go:noescape
func legacyTileVNNI(raw *byte, rb, nb, lb, qs, qh, m, bias int, q *byte, d *float32)
