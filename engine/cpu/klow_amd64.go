package cpu

//go:noescape
func q2kDotAVX2(w *byte, x *int8, xd *float32, bs *int16, nk int) float32

//go:noescape
func q2kDotVNNI(w *byte, x *int8, xd *float32, bs *int16, nk int) float32

//go:noescape
func q3kDotAVX2(w *byte, x *int8, xd *float32, bs *int16, nk int) float32

//go:noescape
func q3kDotVNNI(w *byte, x *int8, xd *float32, bs *int16, nk int) float32

func dotQ2KSIMD(w []byte, x []int8, xd []float32, bs []int16) float32 {
	return kDotSIMD(q2kDotAVX2, q2kDotVNNI, 84, w, x, xd, bs)
}

func dotQ3KSIMD(w []byte, x []int8, xd []float32, bs []int16) float32 {
	return kDotSIMD(q3kDotAVX2, q3kDotVNNI, 110, w, x, xd, bs)
}
