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

func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
func xgetbv0() (eax, edx uint32)

//go:noescape
func q8DotAVX2(w, x *int8, wd, xd *float32, nb int) float32

//go:noescape
func q8x4AVX2(w *int8, wstride int, wd *float32, dstride int, x *int8, xd *float32, nb int, out *float32)

//go:noescape
func q4DotAVX2(w *byte, x *int8, wd, xd *float32, nb int) float32

//go:noescape
func f32DotAVX2(w, x *float32, n int) float32

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
	q8x4AVX2(&w[0], cols, &wd[0], nb, &x[0], &xd[0], nb, &out[0])
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
