package gguf

// K-quant block layouts (ggml-common.h): super-blocks of qkK elements split
// into sub-blocks of 16 or 32, each with its own small scale (and min) that
// the super-block's half-precision d (and dmin) scale in turn.
//
//	Q2_K (84 B):  scales[16] (4-bit scale | 4-bit min << 4), qs[64] (2 bits), d, dmin
//	              x = d*scale*q - dmin*min
//	Q3_K (110 B): hmask[32] (third bit), qs[64] (2 low bits), scales[12] (16 6-bit), d
//	              x = d*(scale-32)*(q - 4 if the hmask bit is clear)
//	Q4_K (144 B): d, dmin, scales[12] (8 6-bit scales, 8 6-bit mins), qs[128] (nibbles)
//	              x = d*scale*q - dmin*min
//	Q5_K (176 B): d, dmin, scales[12], qh[32] (fifth bit), qs[128] (nibbles)
//	              x = d*scale*q - dmin*min
//	Q6_K (210 B): ql[128] (4 low bits), qh[64] (2 high bits), scales[16] (int8), d
//	              x = d*scale*(q-32)
//
// Bit packing of the 2-bit types (Q2_K, Q3_K) and of Q6_K's high bits: each
// half of the super-block (128 elements) uses 32 bytes, byte l holding
// elements l, l+32, l+64 and l+96 of that half at bit shifts 0, 2, 4 and 6.
const qkK = 256

// scaleMinK4 unpacks sub-block j's 6-bit scale and min from the 12 bytes that
// Q4_K and Q5_K use: bytes 0-3 hold scales 0-3 and bytes 4-7 mins 0-3 in
// their low 6 bits; the sub-blocks 4-7 take their low 4 bits from bytes 8-11
// and their top 2 bits from the spare top bits of bytes 0-7.
func scaleMinK4(j int, s []byte) (sc, m byte) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0x0f | s[j-4]>>6<<4, s[j+4]>>4 | s[j]>>6<<4
}

// scaleQ3K unpacks Q3_K's 6-bit scale j (0..15) from its 12 bytes: the low 4
// bits are nibbles of bytes 0-7 (scales 0-7 low halves, 8-15 high halves), the
// top 2 bits come from byte 8 + j%4 at bit 2*(j/4).
func scaleQ3K(j int, s []byte) int {
	lo := s[j%8] >> (4 * (j / 8)) & 0x0f
	hi := s[8+j%4] >> (2 * (j / 4)) & 3
	return int(lo|hi<<4) - 32
}

// crumbs decodes the 2-bit fields of 16 elements from e (a multiple of 16)
// of a 2-bit-packed super-block into q.
func crumbs(qs []byte, e int, q *[16]int) {
	b, shift := qs[32*(e/128)+e%32:], 2*(e%128/32)
	for l := range q {
		q[l] = int(b[l]>>shift) & 3
	}
}

func decodeQ2_K(blk []byte, y []float32) {
	scales, qs := blk[:16], blk[16:80]
	d, dmin := half(blk[80:]), half(blk[82:])
	var q [16]int
	for j, sc := range scales { // 16 sub-blocks of 16
		dl, ml := d*float32(sc&0x0f), float32(dmin*float32(sc>>4))
		crumbs(qs, 16*j, &q)
		for l, v := range q {
			y[16*j+l] = float32(dl*float32(v)) - ml
		}
	}
}

func decodeQ3_K(blk []byte, y []float32) {
	hmask, qs, scales := blk[:32], blk[32:96], blk[96:108]
	d := half(blk[108:])
	var q [16]int
	for j := 0; j < 16; j++ { // 16 sub-blocks of 16
		dl := d * float32(scaleQ3K(j, scales))
		crumbs(qs, 16*j, &q)
		bit := uint(j / 2) // element e's third bit is bit e/32 of hmask[e%32]
		for l, v := range q {
			e := 16*j + l
			if hmask[e%32]>>bit&1 == 0 {
				v -= 4
			}
			y[e] = dl * float32(v)
		}
	}
}

func decodeQ4_K(blk []byte, y []float32) {
	d, dmin, scales, qs := half(blk), half(blk[2:]), blk[4:16], blk[16:144]
	// Each 64 elements share 32 bytes: low nibbles first, then high nibbles.
	for j := 0; j < 8; j++ { // 8 sub-blocks of 32
		sc, m := scaleMinK4(j, scales)
		dl, ml := d*float32(sc), float32(dmin*float32(m))
		b, shift := qs[32*(j/2):32*(j/2)+32], 4*(j%2)
		for l, v := range b {
			y[32*j+l] = float32(dl*float32(v>>shift&0x0f)) - ml
		}
	}
}

func decodeQ5_K(blk []byte, y []float32) {
	d, dmin, scales, qh, qs := half(blk), half(blk[2:]), blk[4:16], blk[16:48], blk[48:176]
	for j := 0; j < 8; j++ { // 8 sub-blocks of 32; the fifth bit is bit j of qh[l]
		sc, m := scaleMinK4(j, scales)
		dl, ml := d*float32(sc), float32(dmin*float32(m))
		b, shift := qs[32*(j/2):32*(j/2)+32], 4*(j%2)
		for l, v := range b {
			q := v>>shift&0x0f | (qh[l]>>j&1)<<4
			y[32*j+l] = float32(dl*float32(q)) - ml
		}
	}
}

func decodeQ6_K(blk []byte, y []float32) {
	ql, qh, scales := blk[:128], blk[128:192], blk[192:208]
	d := half(blk[208:])
	// Per half of 128: ql bytes l and l+32 hold elements l, l+32 (low nibbles)
	// and l+64, l+96 (high nibbles); qh byte l their high 2 bits.
	for j := 0; j < 16; j++ { // 16 sub-blocks of 16
		dl := d * float32(int8(scales[j]))
		h, r := j/8, 16*(j%8) // half, first element within it
		lo, hi := ql[64*h+r%64:], qh[32*h+r%32:]
		loShift, hiShift := 4*(r/64), 2*(r/32)
		for l := 0; l < 16; l++ {
			q := int(lo[l]>>loShift&0x0f|(hi[l]>>hiShift&3)<<4) - 32
			y[16*j+l] = dl * float32(q)
		}
	}
}
