package cpu

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/modrun/modrun/gguf"
)

// The K-quants (Q2_K ... Q6_K) dot in the file's own blocks of 256,
// against activations quantized as ggml's Q8_K is (quantizeK): 256 int8
// with one float32 scale, and the sums of each 16 of them. Every K-quant
// weight is d·sc_g·q − dm·m_g for a small integer q and integer scale sc_g
// and min m_g of its group g of 16, so a block's dot is
//
//	xd·(d·Σ_g sc_g·Σ_{i∈g} q_i·x_i − dm·Σ_g m_g·bsum_g)
//
// summed in integers up to the last two products: one float step per 256
// weights, and the weights stay the file's bytes (decode reads half of
// what a Q8_0 copy would). A prompt's tile of four rows is unpacked to
// int8 with a float scale per 16 (kTile) for the Q8_0 tile kernel.
//
// The layouts (gguf/kquant.go):
//
//	Q2_K (84 B):  scales[16] (4-bit sc | 4-bit m << 4), qs[64] (2 bits), d, dmin
//	Q3_K (110 B): hmask[32], qs[64], scales[12] (16 6-bit, minus 32), d
//	Q4_K (144 B): d, dmin, scales[12] (8 6-bit sc, 8 6-bit m), qs[128] (nibbles)
//	Q5_K (176 B): d, dmin, scales[12], qh[32] (fifth bit), qs[128]
//	Q6_K (210 B): ql[128], qh[64], scales[16] (int8), d; q − 32

// kLen is the elements of a K-quant block and of an activation block of
// quantizeK.
const kLen = 256

// kBlock is one K-quant block unpacked: weight i is
// d·sc[i/16]·q[i] − dm·m[i/16].
type kBlock struct {
	q     [kLen]int8
	sc, m [kLen / 16]int32
	d, dm float32
}

// kBlockBytes are the bytes of a block of each K-quant type this package
// dots natively.
var kBlockBytes = map[gguf.TensorType]int{
	gguf.TypeQ2_K: 84, gguf.TypeQ3_K: 110, gguf.TypeQ4_K: 144, gguf.TypeQ5_K: 176, gguf.TypeQ6_K: 210,
}

// unpackK unpacks a block of type t into b.
func unpackK(t gguf.TensorType, blk []byte, b *kBlock) {
	switch t {
	case gguf.TypeQ2_K:
		unpackQ2K(blk, b)
	case gguf.TypeQ3_K:
		unpackQ3K(blk, b)
	case gguf.TypeQ4_K:
		unpackQ4K(blk, b)
	case gguf.TypeQ5_K:
		unpackQ5K(blk, b)
	case gguf.TypeQ6_K:
		unpackQ6K(blk, b)
	}
}

func half(b []byte) float32 { return f16Table[binary.LittleEndian.Uint16(b)] }

// scaleMinK4 is Q4_K's and Q5_K's sub-block j (of 32): 6-bit scale and
// min, the low 4 bits of j >= 4 in bytes 8-11 and their top 2 bits in the
// spare top bits of bytes 0-7.
func scaleMinK4(j int, s []byte) (sc, m int32) {
	if j < 4 {
		return int32(s[j] & 63), int32(s[j+4] & 63)
	}
	return int32(s[j+4]&0x0f | s[j-4]>>6<<4), int32(s[j+4]>>4 | s[j]>>6<<4)
}

func unpackQ4K(blk []byte, b *kBlock) {
	b.d, b.dm = half(blk), half(blk[2:])
	qs := blk[16:144]
	for j := range 8 { // sub-blocks of 32; each 64 elements share 32 bytes, low nibbles first
		sc, m := scaleMinK4(j, blk[4:16])
		b.sc[2*j], b.sc[2*j+1], b.m[2*j], b.m[2*j+1] = sc, sc, m, m
		src, shift := qs[32*(j/2):32*(j/2)+32], 4*(j%2)
		for l, v := range src {
			b.q[32*j+l] = int8(v >> shift & 0x0f)
		}
	}
}

func unpackQ5K(blk []byte, b *kBlock) {
	b.d, b.dm = half(blk), half(blk[2:])
	qh, qs := blk[16:48], blk[48:176]
	for j := range 8 { // the fifth bit of element 32j+l is bit j of qh[l]
		sc, m := scaleMinK4(j, blk[4:16])
		b.sc[2*j], b.sc[2*j+1], b.m[2*j], b.m[2*j+1] = sc, sc, m, m
		src, shift := qs[32*(j/2):32*(j/2)+32], 4*(j%2)
		for l, v := range src {
			b.q[32*j+l] = int8(v>>shift&0x0f | (qh[l]>>j&1)<<4)
		}
	}
}

func unpackQ6K(blk []byte, b *kBlock) {
	ql, qh, scales := blk[:128], blk[128:192], blk[192:208]
	b.d, b.dm = half(blk[208:]), 0
	for g, s := range scales {
		b.sc[g], b.m[g] = int32(int8(s)), 0
	}
	// Per half of 128: ql bytes l and l+32 hold elements l, l+32 (low
	// nibbles) and l+64, l+96 (high nibbles); qh byte l their top 2 bits.
	for h := range 2 {
		lo, hi, q := ql[64*h:], qh[32*h:], b.q[128*h:]
		for l := range 32 {
			q[l] = int8(lo[l]&0x0f|(hi[l]&3)<<4) - 32
			q[l+32] = int8(lo[l+32]&0x0f|(hi[l]>>2&3)<<4) - 32
			q[l+64] = int8(lo[l]>>4|(hi[l]>>4&3)<<4) - 32
			q[l+96] = int8(lo[l+32]>>4|(hi[l]>>6&3)<<4) - 32
		}
	}
}

// crumbs2 writes the 2-bit fields of a 2-bit-packed block (Q2_K's and
// Q3_K's qs): each half of 128 uses 32 bytes, byte l holding elements l,
// l+32, l+64 and l+96 at shifts 0, 2, 4 and 6.
func crumbs2(qs []byte, q *[kLen]int8) {
	for h := range 2 {
		for s := range 4 {
			for l := range 32 {
				q[128*h+32*s+l] = int8(qs[32*h+l] >> (2 * s) & 3)
			}
		}
	}
}

func unpackQ2K(blk []byte, b *kBlock) {
	b.d, b.dm = half(blk[80:]), half(blk[82:])
	for g, s := range blk[:16] {
		b.sc[g], b.m[g] = int32(s&0x0f), int32(s>>4)
	}
	crumbs2(blk[16:80], &b.q)
}

func unpackQ3K(blk []byte, b *kBlock) {
	hmask, scales := blk[:32], blk[96:108]
	b.d, b.dm = half(blk[108:]), 0
	for g := range 16 { // low 4 bits: nibbles of bytes 0-7; top 2: byte 8+g%4 at 2·(g/4)
		lo := scales[g%8] >> (4 * (g / 8)) & 0x0f
		hi := scales[8+g%4] >> (2 * (g / 4)) & 3
		b.sc[g], b.m[g] = int32(lo|hi<<4)-32, 0
	}
	crumbs2(blk[32:96], &b.q)
	for e := range kLen { // element e's third bit is bit e/32 of hmask[e%32]; clear means −4
		if hmask[e%32]>>(e/32)&1 == 0 {
			b.q[e] -= 4
		}
	}
}

// dotKGo is a K-quant row of type t (nb blocks of kb bytes) dotted with
// Q8_K activations (x [nb·256], xd [nb], bs [nb·16] the sums of each 16).
func dotKGo(t gguf.TensorType, w []byte, x []int8, xd []float32, bs []int16) float32 {
	kb := kBlockBytes[t]
	var b kBlock
	var sum float32
	for k := range xd {
		unpackK(t, w[k*kb:(k+1)*kb], &b)
		xs, bk := x[k*kLen:(k+1)*kLen], bs[k*16:(k+1)*16]
		var isum, msum int32
		for g := range 16 {
			var s int32
			for i := 16 * g; i < 16*g+16; i++ {
				s += int32(b.q[i]) * int32(xs[i])
			}
			isum += b.sc[g] * s
			msum += b.m[g] * int32(bk[g])
		}
		sum += xd[k] * (b.d*float32(isum) - b.dm*float32(msum))
	}
	return sum
}

// quantizeK writes x (a multiple of 256 long) as Q8_K-style blocks: d =
// max|x|/127, q = x/d rounded to nearest even, bs the sums of each 16 q.
// A block holding a NaN or an infinity gets a NaN scale, so that every
// dot with it is NaN (as quantizeRow).
func quantizeK(q []int8, d []float32, bs []int16, x []float32) {
	if useSIMD {
		quantizeKSIMD(q, d, bs, x)
		return
	}
	quantizeKGo(q, d, bs, x)
}

func quantizeKGo(q []int8, d []float32, bs []int16, x []float32) {
	for k := range d {
		xs, qs := x[k*kLen:(k+1)*kLen], q[k*kLen:(k+1)*kLen]
		var amax float32
		for _, v := range xs {
			amax = max(amax, v, -v) // Go's max keeps a NaN
		}
		amax += amax - amax // NaN for a NaN or +Inf
		d[k] = amax / 127
		var id float32
		if amax == amax && amax != 0 {
			id = 127 / amax
		}
		for j, v := range xs {
			qs[j] = int8(math.RoundToEven(float64(v * id)))
		}
		for g := range 16 {
			var s int16
			for _, v := range qs[16*g : 16*g+16] {
				s += int16(v)
			}
			bs[16*k+g] = s
		}
	}
}

// quantizeK fills a's Q8_K copy (kq, kd, ks) from f, once per set, split
// over the pool; with wide, also the forms the tile kernel takes (kd32,
// ksf).
func (a *acts) quantizeK(p *pool, wide bool) {
	nk, ng, nb := a.cols/kLen, a.cols/16, a.cols/blockLen
	if !a.kready {
		a.kq, a.kd, a.ks = grow(a.kq, a.n*a.cols), grow(a.kd, a.n*nk), grow(a.ks, a.n*ng)
		p.run(a.n, max(1, 4096/a.cols), func(lo, hi int) {
			for s := lo; s < hi; s++ {
				quantizeK(a.kq[s*a.cols:(s+1)*a.cols], a.kd[s*nk:(s+1)*nk], a.ks[s*ng:(s+1)*ng], a.f[s*a.cols:(s+1)*a.cols])
			}
		})
		a.kready, a.kwide = true, false
	}
	if wide && !a.kwide {
		a.kd32, a.ksf = grow(a.kd32, a.n*nb), grow(a.ksf, a.n*ng)
		for s := range a.n {
			for b := range nb {
				a.kd32[s*nb+b] = a.kd[s*nk+b/8]
			}
			for g := range ng {
				a.ksf[s*ng+g] = a.kd[s*nk+g/16] * float32(a.ks[s*ng+g])
			}
		}
		a.kwide = true
	}
}

// kTile unpacks K-quant rows i..i+3 of w for the tile kernel: q [4][cols]
// the integer quants, a [4][cols/16] each group's scale d·sc, b [4][cols/16]
// its min dm·m (zero for the types without one).
func kTile(w *matrix, i int, q []int8, a, b []float32) {
	var blk kBlock
	kb, nk := kBlockBytes[w.ktype], w.cols/kLen
	for r := range 4 {
		row := w.raw[(i+r)*nk*kb : (i+r+1)*nk*kb]
		for k := range nk {
			base := r*w.cols + k*kLen
			src := row[k*kb : (k+1)*kb]
			switch w.ktype { // the common types' quants eight at a time
			case gguf.TypeQ4_K:
				scalesQ4K(src, &blk)
				nibblesQ4K(q[base:base+kLen], src[16:144])
			case gguf.TypeQ5_K:
				scalesQ4K(src, &blk)
				quantsQ5K(q[base:base+kLen], src)
			case gguf.TypeQ6_K:
				scalesQ6K(src, &blk)
				quantsQ6K(q[base:base+kLen], src)
			default:
				unpackK(w.ktype, src, &blk)
				copy(q[base:base+kLen], blk.q[:])
			}
			for g := range 16 {
				a[base/16+g] = blk.d * float32(blk.sc[g])
				b[base/16+g] = blk.dm * float32(blk.m[g])
			}
		}
	}
}

// scalesQ4K is unpackQ4K without the quants (and Q5_K's, whose scales
// and mins are laid out alike).
func scalesQ4K(blk []byte, b *kBlock) {
	b.d, b.dm = half(blk), half(blk[2:])
	for j := range 8 {
		sc, m := scaleMinK4(j, blk[4:16])
		b.sc[2*j], b.sc[2*j+1], b.m[2*j], b.m[2*j+1] = sc, sc, m, m
	}
}

// scalesQ6K is unpackQ6K without the quants.
func scalesQ6K(blk []byte, b *kBlock) {
	b.d, b.dm = half(blk[208:]), 0
	for g, s := range blk[192:208] {
		b.sc[g], b.m[g] = int32(int8(s)), 0
	}
}

const nib8 = 0x0F0F0F0F0F0F0F0F // the low nibble of 8 bytes

// nibblesQ4K writes Q4_K's 256 quants (qs: each 64 elements in 32 bytes,
// low nibbles first) as int8, eight at a time.
func nibblesQ4K(dst []int8, qs []byte) {
	le := binary.LittleEndian
	out := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(dst))), len(dst))
	for c := range 4 {
		for h := 0; h < 32; h += 8 {
			v := le.Uint64(qs[32*c+h:])
			le.PutUint64(out[64*c+h:], v&nib8)
			le.PutUint64(out[64*c+32+h:], v>>4&nib8)
		}
	}
}

// quantsQ5K writes Q5_K's 256 quants as int8, eight at a time: Q4_K's
// nibbles (qs at 48), with bit j of qh byte l as bit 4 of element 32j+l.
func quantsQ5K(dst []int8, blk []byte) {
	const b0 = 0x0101010101010101
	le := binary.LittleEndian
	out := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(dst))), len(dst))
	qh, qs := blk[16:48], blk[48:176]
	for c := range 4 {
		for h := 0; h < 32; h += 8 {
			v, hb := le.Uint64(qs[32*c+h:]), le.Uint64(qh[h:])
			le.PutUint64(out[64*c+h:], v&nib8|(hb>>(2*c)&b0)<<4)
			le.PutUint64(out[64*c+32+h:], v>>4&nib8|(hb>>(2*c+1)&b0)<<4)
		}
	}
}

// quantsQ6K writes Q6_K's 256 quants minus 32 as int8, eight at a time:
// y = u ^ 32 is u − 32 when u >= 32, and u + 32 otherwise, where u − 32 is
// y − 64 = y | 0xC0 (y < 64): (y & 32)·6 adds that 0xC0, with no carry.
func quantsQ6K(dst []int8, blk []byte) {
	const c2, b5 = 0x0303030303030303, 0x2020202020202020
	le := binary.LittleEndian
	out := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(dst))), len(dst))
	put := func(at int, u uint64) {
		y := u ^ b5
		le.PutUint64(out[at:], y|(y&b5)*6)
	}
	for h := range 2 {
		ql, qh := blk[64*h:], blk[128+32*h:]
		for l := 0; l < 32; l += 8 {
			lo0, lo1, hi := le.Uint64(ql[l:]), le.Uint64(ql[l+32:]), le.Uint64(qh[l:])
			put(128*h+l, lo0&nib8|(hi&c2)<<4)
			put(128*h+32+l, lo1&nib8|(hi>>2&c2)<<4)
			put(128*h+64+l, lo0>>4&nib8|(hi>>4&c2)<<4)
			put(128*h+96+l, lo1>>4&nib8|(hi>>6&c2)<<4)
		}
	}
}

// kTiles runs unpacked K-quant rows i..i+3 (q, a, b of kTile) over x's
// tokens t0.. in groups of four (dotQ8x4x4s16VNNI, then each product's
// mins subtracted: Σ_g b_g·(the token's sum of group g), three rows by
// dotF32x3x4 and the fourth by dotF32), writing out[s][i..i+3]; it returns
// the first token it left (the last t1-t0 mod 4).
func kTiles(out []float32, rows, i int, q []int8, a, b []float32, mins bool, x *acts, t0, t1 int) int {
	cols, nb, ng := x.cols, x.cols/blockLen, x.cols/16
	var sixteen [16]float32
	var twelve [12]float32
	s := t0
	for ; s+4 <= t1; s += 4 {
		dotQ8x4x4s16VNNI(q, a, x.kq[s*cols:(s+4)*cols], x.kd32[s*nb:(s+4)*nb], cols, &sixteen)
		if mins {
			xs := x.ksf[s*ng : (s+4)*ng]
			dotF32x3x4(b[:3*ng], xs, ng, &twelve)
			for t := range 4 {
				for r := range 3 {
					sixteen[4*t+r] -= twelve[3*t+r]
				}
				sixteen[4*t+3] -= dotF32(b[3*ng:4*ng], xs[t*ng:(t+1)*ng])
			}
		}
		for t := range 4 {
			copy(out[(s+t)*rows+i:(s+t)*rows+i+4], sixteen[4*t:4*t+4])
		}
	}
	return s
}

// matmulK is matmul's part for a K-quant matrix w over tokens t0..t1 and
// rows lo..hi: four tokens or more with VNNI take the tile kernel on rows
// unpacked four at a time (into tile, a worker's buffers), the rest dotK.
func matmulK(out []float32, x *acts, w *matrix, lo, hi, t0, t1 int, tile *kTileBuf) {
	cols, nk, ng := w.cols, w.cols/kLen, w.cols/16
	rb := nk * kBlockBytes[w.ktype]
	i := lo
	if useSIMD && useVNNI && t1-t0 >= 4 {
		if tile.q == nil {
			tile.q, tile.a, tile.b = make([]int8, 4*cols), make([]float32, 4*ng), make([]float32, 4*ng)
		}
		mins := w.ktype == gguf.TypeQ2_K || w.ktype == gguf.TypeQ4_K || w.ktype == gguf.TypeQ5_K
		for ; i+4 <= hi; i += 4 {
			kTile(w, i, tile.q, tile.a, tile.b)
			for s := kTiles(out, w.rows, i, tile.q, tile.a, tile.b, mins, x, t0, t1); s < t1; s++ {
				for r := i; r < i+4; r++ {
					out[s*w.rows+r] = dotK(w.ktype, w.raw[r*rb:(r+1)*rb], x.kq[s*cols:(s+1)*cols], x.kd[s*nk:(s+1)*nk], x.ks[s*ng:(s+1)*ng])
				}
			}
		}
	}
	for ; i < hi; i++ {
		wr := w.raw[i*rb : (i+1)*rb]
		for s := t0; s < t1; s++ {
			out[s*w.rows+i] = dotK(w.ktype, wr, x.kq[s*cols:(s+1)*cols], x.kd[s*nk:(s+1)*nk], x.ks[s*ng:(s+1)*ng])
		}
	}
}

// kTileBuf is a worker's unpacked tile of four K-quant rows (kTile).
type kTileBuf struct {
	q    []int8    // [4][cols]
	a, b []float32 // [4][cols/16]
}

// dotK is dotKGo on the fastest path this CPU has for type t.
func dotK(t gguf.TensorType, w []byte, x []int8, xd []float32, bs []int16) float32 {
	if useSIMD {
		switch t {
		case gguf.TypeQ4_K:
			return dotQ4KSIMD(w, x, xd, bs)
		case gguf.TypeQ5_K:
			return dotQ5KSIMD(w, x, xd, bs)
		case gguf.TypeQ6_K:
			return dotQ6KSIMD(w, x, xd, bs)
		}
	}
	return dotKGo(t, w, x, xd, bs)
}

// kNative are the K-quants dotted in their own blocks at load: those with
// SIMD kernels (the Q4_K_M and Q5_K_M mixes' types). Q2_K and Q3_K have
// the Go kernel only (tested, but a Go decode is slower than Q8_0's SIMD
// one), so they are still requantized to Q8_0 (matrix.requantize).
var kNative = map[gguf.TensorType]bool{gguf.TypeQ4_K: true, gguf.TypeQ5_K: true, gguf.TypeQ6_K: true}
