package gguf

import (
	"encoding/binary"
	"math"
)

// The K-quant quantizers follow ggml's reference ones (quantize_row_q*_K_ref
// in ggml-quants.c, which llama-quantize uses when it has no importance
// matrix): each sub-block gets the scale (and min) that a small search finds
// best, the scales are quantized against the super-block's largest, and the
// elements are then rounded against the quantized scales. The float32
// operations are ggml's, in its order, so the bytes are the same as its.

// groupMaxEps is the largest magnitude ggml treats as an all-zero group.
const groupMaxEps = 1e-15

// nearestInt rounds to the nearest integer, ties to even, as ggml's
// nearest_int does for |v| <= 2^22: adding 1.5*2^23 leaves the integer in the
// low mantissa bits. float32(v) keeps a product passed as v from being fused
// with the addition once inlined.
func nearestInt(v float32) int {
	return int(math.Float32bits(float32(v)+12582912)&0x7fffff) - 0x400000
}

func clampInt(v, lo, hi int) int { return max(lo, min(hi, v)) }

// mul is a float32 product that the compiler may not fuse with an addition.
func mul(a, b float32) float32 { return float32(a * b) }

// makeQXQuants picks the scale of a symmetric group of levels [-nmax, nmax)
// that minimises the x²-weighted squared error (ggml's make_qx_quants with
// rmse_type 1 and no importance weights): it tries 19 scales near max/-nmax.
// L receives the levels offset by nmax.
func makeQXQuants(nmax int, x []float32, L []int8) float32 {
	mx := signedMax(x)
	if abs32(mx) < groupMaxEps {
		clear(L)
		return 0
	}
	fn := float32(nmax)
	level := func(iscale, v float32) int { return clampInt(nearestInt(iscale*v), -nmax, nmax-1) }
	sums := func(iscale float32) (sumlx, suml2 float32) {
		for _, v := range x {
			l := float32(level(iscale, v))
			w := v * v
			sumlx += mul(mul(w, v), l)
			suml2 += mul(mul(w, l), l)
		}
		return sumlx, suml2
	}
	iscale := -fn / mx
	for i, v := range x {
		L[i] = int8(level(iscale, v) + nmax)
	}
	sumlx, suml2 := sums(iscale)
	scale := float32(0)
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fn + mul(0.1, float32(is))) / mx
		sumlx, suml2 = sums(iscale)
		if suml2 > 0 && mul(sumlx, sumlx) > mul(best, suml2) {
			for i, v := range x {
				L[i] = int8(level(iscale, v) + nmax)
			}
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}

// makeQ3Quants is ggml's make_q3_quants with do_rmse: levels [-nmax, nmax)
// from max/-nmax, then up to 5 passes that move single levels while that
// lowers the x²-weighted error. L receives the levels offset by nmax.
func makeQ3Quants(nmax int, x []float32, L []int8) float32 {
	mx := signedMax(x)
	if abs32(mx) < groupMaxEps {
		clear(L)
		return 0
	}
	iscale := -float32(nmax) / mx
	var sumlx, suml2 float32
	for i, v := range x {
		l := clampInt(nearestInt(iscale*v), -nmax, nmax-1)
		L[i] = int8(l)
		w := v * v
		sumlx += mul(mul(w, v), float32(l))
		suml2 += mul(mul(w, float32(l)), float32(l))
	}
	for try := 0; try < 5; try++ {
		changed := 0
		for i, v := range x {
			w := v * v
			li := float32(L[i])
			slx := sumlx - mul(mul(w, v), li)
			if slx <= 0 {
				continue
			}
			sl2 := suml2 - mul(mul(w, li), li)
			nl := clampInt(nearestInt(v*sl2/slx), -nmax, nmax-1)
			if nl == int(L[i]) {
				continue
			}
			fl := float32(nl)
			slx += mul(mul(w, v), fl)
			sl2 += mul(mul(w, fl), fl)
			if sl2 > 0 && mul(mul(slx, slx), suml2) > mul(mul(sumlx, sumlx), sl2) {
				L[i], sumlx, suml2 = int8(nl), slx, sl2
				changed++
			}
		}
		if changed == 0 {
			break
		}
	}
	for i := range L {
		L[i] += int8(nmax)
	}
	return sumlx / suml2
}

// makeQKX2Quants is ggml's make_qkx2_quants: levels [0, nmax] with a scale and
// a min (x ≈ scale*L - min), chosen among nstep+1 trial scales by a weighted
// least-squares fit, keeping the one with the least weighted error (absolute
// when useMad, else squared). It returns the scale and the min as ggml stores
// it (subtracted, so positive).
func makeQKX2Quants(nmax int, x, weights []float32, L, aux []uint8, rmin, rdelta float32, nstep int, useMad bool) (scale, negMin float32) {
	lo, hi := x[0], x[0]
	sumW := weights[0]
	sumX := mul(sumW, x[0])
	for i := 1; i < len(x); i++ {
		lo, hi = minf(lo, x[i]), maxf(hi, x[i])
		sumW += weights[i]
		sumX += mul(weights[i], x[i])
	}
	if lo > 0 {
		lo = 0
	}
	if hi == lo {
		clear(L)
		return 0, -lo
	}
	fn := float32(nmax)
	quantize := func(iscale, lo float32, L []uint8) {
		for i, v := range x {
			L[i] = uint8(clampInt(nearestInt(iscale*(v-lo)), 0, nmax))
		}
	}
	errorOf := func(scale, lo float32, L []uint8) float32 {
		var e float32
		for i, v := range x {
			diff := float32(mul(scale, float32(L[i]))+lo) - v
			if useMad {
				diff = abs32(diff)
			} else {
				diff = mul(diff, diff)
			}
			e += mul(weights[i], diff)
		}
		return e
	}
	iscale := fn / (hi - lo)
	scale = 1 / iscale
	quantize(iscale, lo, L)
	best := errorOf(scale, lo, L)
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + mul(rdelta, float32(is)) + fn) / (hi - lo)
		quantize(iscale, lo, aux)
		var sumL, sumL2, sumXL float32
		for i, v := range x {
			l, w := float32(aux[i]), weights[i]
			sumL += mul(w, l)
			sumL2 += mul(mul(w, l), l)
			sumXL += mul(mul(w, l), v)
		}
		D := mul(sumW, sumL2) - mul(sumL, sumL)
		if D <= 0 {
			continue
		}
		thisScale := (mul(sumW, sumXL) - mul(sumX, sumL)) / D
		thisMin := (mul(sumL2, sumX) - mul(sumL, sumXL)) / D
		if thisMin > 0 {
			thisMin = 0
			thisScale = sumXL / sumL2
		}
		if e := errorOf(thisScale, thisMin, aux); e < best {
			copy(L, aux)
			best, scale, lo = e, thisScale, thisMin
		}
	}
	return scale, -lo
}

// minf and maxf are C's `if (v < m) m = v` updates, which keep m when v is NaN.
func minf(m, v float32) float32 {
	if v < m {
		return v
	}
	return m
}

func maxf(m, v float32) float32 {
	if v > m {
		return v
	}
	return m
}

// packCrumbs stores 256 2-bit levels as the Q2_K/Q3_K qs bytes (kquant.go).
func packCrumbs(L []int8, qs []byte) {
	for h := 0; h < 2; h++ {
		for l := 0; l < 32; l++ {
			e := 128*h + l
			qs[32*h+l] = byte(L[e] | L[e+32]<<2 | L[e+64]<<4 | L[e+96]<<6)
		}
	}
}

func encodeQ2_K(x []float32, blk []byte) {
	var L [qkK]int8
	var scales, mins [16]float32
	var maxScale, maxMin float32
	var weights [16]float32
	var Lu, aux [16]uint8
	for j := 0; j < 16; j++ {
		xs := x[16*j : 16*j+16]
		for l, v := range xs {
			weights[l] = abs32(v)
		}
		scales[j], mins[j] = makeQKX2Quants(3, xs, weights[:], Lu[:], aux[:], -0.5, 0.1, 15, true)
		for l, q := range Lu {
			L[16*j+l] = int8(q)
		}
		maxScale, maxMin = maxf(maxScale, scales[j]), maxf(maxMin, mins[j])
	}
	sc := blk[:16]
	clear(sc)
	var d, dmin float32
	if maxScale > 0 {
		iscale := 15 / maxScale
		for j := range sc {
			sc[j] = byte(nearestInt(iscale * scales[j]))
		}
		d = maxScale / 15
	}
	if maxMin > 0 {
		iscale := 15 / maxMin
		for j := range sc {
			sc[j] |= byte(nearestInt(iscale*mins[j]) << 4)
		}
		dmin = maxMin / 15
	}
	binary.LittleEndian.PutUint16(blk[80:], F32ToF16(d))
	binary.LittleEndian.PutUint16(blk[82:], F32ToF16(dmin))
	// Round each element against the scale and min as stored.
	d, dmin = half(blk[80:]), half(blk[82:])
	for j := 0; j < 16; j++ {
		dl := d * float32(sc[j]&0x0f)
		if dl == 0 {
			continue
		}
		ml := mul(dmin, float32(sc[j]>>4))
		for l := 16 * j; l < 16*j+16; l++ {
			L[l] = int8(clampInt(nearestInt((x[l]+ml)/dl), 0, 3))
		}
	}
	packCrumbs(L[:], blk[16:80])
}

// subScales16 gives each 16-element sub-block of a symmetric K-quant (Q3_K,
// Q6_K) its scale and levels with pick, and returns the scales and the one of
// largest magnitude, sign kept.
func subScales16(x []float32, L []int8, pick func(x []float32, L []int8) float32) (scales [16]float32, maxScale float32) {
	var amax float32
	for j := range scales {
		scales[j] = pick(x[16*j:16*j+16], L[16*j:16*j+16])
		if a := abs32(scales[j]); a > amax {
			amax, maxScale = a, scales[j]
		}
	}
	return scales, maxScale
}

func encodeQ3_K(x []float32, blk []byte) {
	var L [qkK]int8
	scales, maxScale := subScales16(x, L[:], func(x []float32, L []int8) float32 { return makeQ3Quants(4, x, L) })
	sc := blk[96:108]
	clear(sc)
	var d float32
	if maxScale != 0 {
		iscale := -32 / maxScale
		for j := 0; j < 16; j++ {
			l := clampInt(int(int8(nearestInt(iscale*scales[j]))), -32, 31) + 32
			sc[j%8] |= byte(l&0x0f) << (4 * (j / 8))
			sc[8+j%4] |= byte(l>>4) << (2 * (j / 4))
		}
		d = 1 / iscale
	}
	binary.LittleEndian.PutUint16(blk[108:], F32ToF16(d))
	d = half(blk[108:])
	for j := 0; j < 16; j++ {
		dl := d * float32(scaleQ3K(j, sc))
		if dl == 0 {
			continue
		}
		for l := 16 * j; l < 16*j+16; l++ {
			L[l] = int8(clampInt(nearestInt(x[l]/dl), -4, 3) + 4)
		}
	}
	// The third bit of element e goes to hmask byte e%32, bit e/32.
	hmask := blk[:32]
	clear(hmask)
	for e := range L {
		if L[e] > 3 {
			hmask[e%32] |= 1 << (e / 32)
			L[e] -= 4
		}
	}
	packCrumbs(L[:], blk[32:96])
}

// encodeScaleMinK4 quantizes 8 sub-block scales and mins to 6 bits against
// the largest of each, stores them as scaleMinK4 unpacks them, and writes d
// and dmin (Q4_K, Q5_K).
func encodeScaleMinK4(scales, mins []float32, maxScale, maxMin float32, blk []byte) {
	invScale, invMin := float32(0), float32(0)
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	s := blk[4:16]
	clear(s)
	for j := 0; j < 8; j++ {
		ls := min(63, uint8(nearestInt(invScale*scales[j])))
		lm := min(63, uint8(nearestInt(invMin*mins[j])))
		if j < 4 {
			s[j], s[j+4] = ls, lm
		} else {
			s[j+4] = ls&0x0f | lm<<4
			s[j-4] |= ls >> 4 << 6
			s[j] |= lm >> 4 << 6
		}
	}
	binary.LittleEndian.PutUint16(blk, F32ToF16(maxScale/63))
	binary.LittleEndian.PutUint16(blk[2:], F32ToF16(maxMin/63))
}

// quantizeK32 is the part Q4_K and Q5_K share: each 32-element sub-block's
// scale and min from makeQKX2Quants, weighted by rms(x) + |x|; the scales
// stored; then every element's level in [0, nmax] against the stored ones.
func quantizeK32(x []float32, blk []byte, nmax int, rmin float32, nstep int) [qkK]uint8 {
	var L [qkK]uint8
	var scales, mins [8]float32
	var maxScale, maxMin float32
	var weights [32]float32
	var aux [32]uint8
	for j := 0; j < 8; j++ {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += mul(v, v)
		}
		av := float32(math.Sqrt(float64(sumX2 / 32)))
		for l, v := range xs {
			weights[l] = av + abs32(v)
		}
		scales[j], mins[j] = makeQKX2Quants(nmax, xs, weights[:], L[32*j:32*j+32], aux[:], rmin, 0.1, nstep, false)
		maxScale, maxMin = maxf(maxScale, scales[j]), maxf(maxMin, mins[j])
	}
	encodeScaleMinK4(scales[:], mins[:], maxScale, maxMin, blk)
	d, dmin := half(blk), half(blk[2:])
	for j := 0; j < 8; j++ {
		sc, m := scaleMinK4(j, blk[4:16])
		dl := d * float32(sc)
		if dl == 0 {
			continue
		}
		dm := mul(dmin, float32(m))
		for l := 32 * j; l < 32*j+32; l++ {
			L[l] = uint8(clampInt(nearestInt((x[l]+dm)/dl), 0, nmax))
		}
	}
	return L
}

func encodeQ4_K(x []float32, blk []byte) {
	L := quantizeK32(x, blk, 15, -1, 20)
	qs := blk[16:144]
	for c := 0; c < 4; c++ { // 64 elements a chunk: low nibbles, then high
		for l := 0; l < 32; l++ {
			qs[32*c+l] = L[64*c+l] | L[64*c+l+32]<<4
		}
	}
}

func encodeQ5_K(x []float32, blk []byte) {
	L := quantizeK32(x, blk, 31, -0.5, 15)
	qh, qs := blk[16:48], blk[48:176]
	clear(qh)
	for c := 0; c < 4; c++ {
		for l := 0; l < 32; l++ {
			lo, hi := L[64*c+l], L[64*c+l+32]
			qs[32*c+l] = lo&0x0f | hi<<4
			qh[l] |= lo>>4<<(2*c) | hi>>4<<(2*c+1)
		}
	}
}

func encodeQ6_K(x []float32, blk []byte) {
	var L [qkK]int8
	scales, maxScale := subScales16(x, L[:], func(x []float32, L []int8) float32 { return makeQXQuants(32, x, L) })
	clear(blk)
	if abs32(maxScale) < groupMaxEps {
		return // an all-zero block: d = 0
	}
	iscale := -128 / maxScale
	binary.LittleEndian.PutUint16(blk[208:], F32ToF16(1/iscale))
	sc := blk[192:208]
	for j := range sc {
		sc[j] = byte(int8(min(127, nearestInt(iscale*scales[j]))))
	}
	d := half(blk[208:])
	for j := 0; j < 16; j++ {
		dl := d * float32(int8(sc[j]))
		if dl == 0 {
			continue
		}
		for l := 16 * j; l < 16*j+16; l++ {
			L[l] = int8(clampInt(nearestInt(x[l]/dl), -32, 31) + 32)
		}
	}
	ql, qh := blk[:128], blk[128:192]
	for e, q := range L { // the layout decodeQ6_K reads
		h, r := e/128, e%128
		ql[64*h+r%64] |= byte(q&0x0f) << (4 * (r / 64))
		qh[32*h+r%32] |= byte(q>>4) << (2 * (r / 32))
	}
}
