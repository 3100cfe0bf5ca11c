package cpu

// simdName names the assembly kernels this CPU runs, "" for none: AVX2
// with FMA and F16C, and an OS that saves the YMM registers.
var simdName = func() string {
	_, _, c1, _ := cpuid(1, 0)
	_, b7, _, _ := cpuid(7, 0)
	const fma, osxsave, avx, f16c = 1 << 12, 1 << 27, 1 << 28, 1 << 29
	if c1&(fma|osxsave|avx|f16c) != fma|osxsave|avx|f16c || b7&(1<<5) == 0 {
		return ""
	}
	if xcr0, _ := xgetbv0(); xcr0&6 != 6 { // XMM and YMM state
		return ""
	}
	return "avx2"
}()

// hasVNNI says whether this CPU also runs q8x4VNNI: AVX-512 F, BW and VL
// with VNNI, and an OS that saves the mask and ZMM registers.
var hasVNNI = func() bool {
	if simdName == "" {
		return false
	}
	_, b7, c7, _ := cpuid(7, 0)
	const f, bw, vl, vnni = 1 << 16, 1 << 30, 1 << 31, 1 << 11
	if b7&(f|bw|vl) != f|bw|vl || c7&vnni == 0 {
		return false
	}
	xcr0, _ := xgetbv0()
	return xcr0&0xe6 == 0xe6 // XMM, YMM, opmask, ZMM_Hi256, Hi16_ZMM
}()

func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
func xgetbv0() (eax, edx uint32)

//go:noescape
func q8DotAVX2(w, x *int8, wd, xd *float32, nb int) float32

//go:noescape
func q8x4AVX2(w *int8, wstride int, wd *float32, dstride int, x *int8, xd *float32, nb int, out *float32)

//go:noescape
func q8x4VNNI(w *int8, wstride int, wd *float32, dstride int, x *int8, xd *float32, nb int, out *float32)

//go:noescape
func q8x4x4VNNI(w *int8, wstride int, wd *float32, dstride int, x *int8, xstride int, xd *float32, xdstride int, nb int, out *float32, wsub int)

//go:noescape
func q4x4VNNI(w *byte, wstride int, wd *float32, dstride int, x *int8, xd *float32, nb int, out *float32)

//go:noescape
func q4x4AVX2(w *byte, wstride int, wd *float32, dstride int, x *int8, xd *float32, nb int, out *float32)

//go:noescape
func q4DotAVX2(w *byte, x *int8, wd, xd *float32, nb int) float32

//go:noescape
func f32ScoresAVX2(q, k *float32, stride, m, hd int, scale float32, out *float32)

//go:noescape
func f32MixAVX2(out, v *float32, stride, m, hd int, p *float32)

//go:noescape
func f16ToF32AVX2(dst *float32, src *uint16, n int)

//go:noescape
func quantizeAVX2(q *int8, d *float32, x *float32, nb int)

//go:noescape
func f32DotAVX2(w, x *float32, n int) float32

//go:noescape
func f32x3x4AVX2(w *float32, wstride int, x *float32, xstride, n int, out *float32)

//go:noescape
func swigluAVX2(gate, up *float32, n int)

//go:noescape
func expSumAVX2(x *float32, n int, mx float32) float32

//go:noescape
func f16DotAVX2(w *uint16, x *float32, n int) float32

// The wrappers check lengths the assembly trusts: a short slice is a bug
// in the caller, and it must panic here rather than read past memory.

func dotQ8SIMD(w, x []int8, wd, xd []float32) float32 {
	nb := len(wd)
	if nb == 0 {
		return 0
	}
	_, _, _ = w[nb*blockLen-1], x[nb*blockLen-1], xd[nb-1]
	return q8DotAVX2(&w[0], &x[0], &wd[0], &xd[0], nb)
}

func dotQ8x4SIMD(w []int8, wd []float32, x []int8, xd []float32, cols int, out *[4]float32) {
	nb := cols / blockLen
	if nb == 0 {
		*out = [4]float32{}
		return
	}
	_, _, _, _ = w[3*cols+cols-1], wd[3*nb+nb-1], x[cols-1], xd[nb-1]
	if useVNNI {
		q8x4VNNI(&w[0], cols, &wd[0], nb, &x[0], &xd[0], nb, &out[0])
		return
	}
	q8x4AVX2(&w[0], cols, &wd[0], nb, &x[0], &xd[0], nb, &out[0])
}

// dotQ8x4x4VNNI is dotQ8x4 of four activation rows at once (x and xd hold
// four rows of cols): out[4t+r] is row r with token t. Only where hasVNNI.
func dotQ8x4x4VNNI(w []int8, wd []float32, x []int8, xd []float32, cols int, out *[16]float32) {
	nb := cols / blockLen
	if nb == 0 {
		*out = [16]float32{}
		return
	}
	_, _, _, _ = w[3*cols+cols-1], wd[3*nb+nb-1], x[3*cols+cols-1], xd[3*nb+nb-1]
	q8x4x4VNNI(&w[0], cols, &wd[0], nb, &x[0], cols, &xd[0], nb, nb, &out[0], 2)
}

func dotQ4x4SIMD(w []byte, wd []float32, x []int8, xd []float32, cols int, out *[4]float32) {
	nb := cols / blockLen
	if nb == 0 {
		*out = [4]float32{}
		return
	}
	_, _, _, _ = w[2*cols-1], wd[4*nb-1], x[cols-1], xd[nb-1]
	if useVNNI {
		q4x4VNNI(&w[0], cols/2, &wd[0], nb, &x[0], &xd[0], nb, &out[0])
		return
	}
	q4x4AVX2(&w[0], cols/2, &wd[0], nb, &x[0], &xd[0], nb, &out[0])
}

func dotQ4SIMD(w []byte, x []int8, wd, xd []float32) float32 {
	nb := len(wd)
	if nb == 0 {
		return 0
	}
	_, _, _ = w[nb*16-1], x[nb*blockLen-1], xd[nb-1]
	return q4DotAVX2(&w[0], &x[0], &wd[0], &xd[0], nb)
}

func dotF32SIMD(w, x []float32) float32 {
	n := len(w) &^ 7
	var s float32
	if n > 0 {
		_ = x[n-1]
		s = f32DotAVX2(&w[0], &x[0], n)
	}
	for j := n; j < len(w); j++ {
		s += w[j] * x[j]
	}
	return s
}

func dotF16SIMD(w []uint16, x []float32) float32 {
	n := len(w) &^ 7
	var s float32
	if n > 0 {
		_ = x[n-1]
		s = f16DotAVX2(&w[0], &x[0], n)
	}
	for j := n; j < len(w); j++ {
		s += f16Table[w[j]] * x[j]
	}
	return s
}

func scoresSIMD(out, q, k []float32, stride, hd int, scale float32) {
	m := len(out)
	if hd%8 != 0 || m == 0 {
		scoresGo(out, q, k, stride, hd, scale)
		return
	}
	_, _ = q[hd-1], k[(m-1)*stride+hd-1]
	f32ScoresAVX2(&q[0], &k[0], stride, m, hd, scale, &out[0])
}

func mixSIMD(out, v []float32, stride int, p []float32) {
	hd, m := len(out), len(p)
	if hd%8 != 0 || m == 0 {
		mixGo(out, v, stride, p)
		return
	}
	_ = v[(m-1)*stride+hd-1]
	f32MixAVX2(&out[0], &v[0], stride, m, hd, &p[0])
}

func f16RowSIMD(dst []float32, src []uint16) {
	n := len(src) &^ 7
	if n > 0 {
		_ = dst[n-1]
		f16ToF32AVX2(&dst[0], &src[0], n)
	}
	for j := n; j < len(src); j++ {
		dst[j] = f16Table[src[j]]
	}
}

func quantizeRowSIMD(q []int8, d []float32, x []float32) {
	nb := len(d)
	if nb == 0 {
		return
	}
	_, _ = q[nb*blockLen-1], x[nb*blockLen-1]
	quantizeAVX2(&q[0], &d[0], &x[0], nb)
}

func expSumSIMD(x []float32, mx float32) float32 {
	n := len(x) &^ 7
	var sum float32
	if n > 0 {
		sum = expSumAVX2(&x[0], n, mx)
	}
	for i := n; i < len(x); i++ {
		x[i] = expf(x[i] - mx)
		sum += x[i]
	}
	return sum
}

func dotF32x3x4SIMD(w []float32, x []float32, n int, out *[12]float32) {
	if n%8 != 0 || n == 0 {
		dotF32x3x4Go(w, x, n, out)
		return
	}
	_, _ = w[3*n-1], x[4*n-1]
	f32x3x4AVX2(&w[0], n, &x[0], n, n, &out[0])
}

func swigluSIMD(gate, up []float32) {
	n := len(gate) &^ 7
	if n > 0 {
		_ = up[n-1]
		swigluAVX2(&gate[0], &up[0], n)
	}
	swigluGo(gate[n:], up[n:])
}

//go:noescape
func q4kDotAVX2(w *byte, x *int8, xd *float32, bs *int16, nk int) float32

//go:noescape
func q4kDotVNNI(w *byte, x *int8, xd *float32, bs *int16, nk int) float32

//go:noescape
func q6kDotAVX2(w *byte, x *int8, xd *float32, bs *int16, nk int) float32

//go:noescape
func q6kDotVNNI(w *byte, x *int8, xd *float32, bs *int16, nk int) float32

//go:noescape
func q5kDotAVX2(w *byte, x *int8, xd *float32, bs *int16, nk int) float32

//go:noescape
func q5kDotVNNI(w *byte, x *int8, xd *float32, bs *int16, nk int) float32

// kDotSIMD runs a K-quant row kernel (its AVX2 or VNNI form) after
// checking the lengths it trusts; kb is the type's block bytes.
func kDotSIMD(avx2, vnni func(w *byte, x *int8, xd *float32, bs *int16, nk int) float32, kb int, w []byte, x []int8, xd []float32, bs []int16) float32 {
	nk := len(xd)
	if nk == 0 {
		return 0
	}
	_, _, _ = w[nk*kb-1], x[nk*kLen-1], bs[nk*16-1]
	if useVNNI {
		return vnni(&w[0], &x[0], &xd[0], &bs[0], nk)
	}
	return avx2(&w[0], &x[0], &xd[0], &bs[0], nk)
}

func dotQ4KSIMD(w []byte, x []int8, xd []float32, bs []int16) float32 {
	return kDotSIMD(q4kDotAVX2, q4kDotVNNI, 144, w, x, xd, bs)
}

func dotQ5KSIMD(w []byte, x []int8, xd []float32, bs []int16) float32 {
	return kDotSIMD(q5kDotAVX2, q5kDotVNNI, 176, w, x, xd, bs)
}

func dotQ6KSIMD(w []byte, x []int8, xd []float32, bs []int16) float32 {
	return kDotSIMD(q6kDotAVX2, q6kDotVNNI, 210, w, x, xd, bs)
}

//go:noescape
func quantizeKAVX2(q *int8, d *float32, bs *int16, x *float32, nk int)

func quantizeKSIMD(q []int8, d []float32, bs []int16, x []float32) {
	nk := len(d)
	if nk == 0 {
		return
	}
	_, _, _ = q[nk*kLen-1], bs[nk*16-1], x[nk*kLen-1]
	quantizeKAVX2(&q[0], &d[0], &bs[0], &x[0], nk)
}
