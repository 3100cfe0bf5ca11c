package cpu

//go:noescape
func f16ScoresAVX2(q *float32, k *uint16, stride, m, hd int, scale float32, out *float32)

//go:noescape
func f16MixAVX2(out *float32, v *uint16, stride, m, hd int, p *float32)

//go:noescape
func f32ToF16AVX2(dst *uint16, src *float32, n int)

// f16Fused says whether halves of hd elements a row take the fused
// kernels (F16C loads into the float kernels' FMAs).
func f16Fused(hd int) bool { return useSIMD && fuseF16 && hd%8 == 0 }

// fuseF16 is false only where a test or benchmark runs the block-widening
// path on the SIMD kernels, to compare the two.
var fuseF16 = true

// scoresF16Fused is kvRows.scores over halves, f16Fused(len(q)).
func scoresF16Fused(out, q []float32, k []uint16, stride int, scale float32) {
	m, hd := len(out), len(q)
	if m == 0 {
		return
	}
	_ = k[(m-1)*stride+hd-1]
	f16ScoresAVX2(&q[0], &k[0], stride, m, hd, scale, &out[0])
}

// mixF16Fused is kvRows.mix over halves, f16Fused(len(out)).
func mixF16Fused(out []float32, v []uint16, stride int, p []float32) {
	m, hd := len(p), len(out)
	if m == 0 {
		clear(out)
		return
	}
	_ = v[(m-1)*stride+hd-1]
	f16MixAVX2(&out[0], &v[0], stride, m, hd, &p[0])
}

func toHalvesSIMD(dst []uint16, x []float32) {
	n := len(x) &^ 7
	if n > 0 {
		_ = dst[n-1]
		f32ToF16AVX2(&dst[0], &x[0], n)
	}
	toHalvesGo(dst[n:], x[n:])
}
