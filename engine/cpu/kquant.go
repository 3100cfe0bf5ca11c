package cpu

import (
	"encoding/binary"
	"math"

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
// what a Q8_0 copy would). A prompt's tiles of four rows by four tokens
// take the same sums from rows unpacked once per matrix (ktile.go).
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
// over the pool; with wide, also the forms the tile kernel takes (kqT,
// ktab: prepareTile).
func (a *acts) quantizeK(p *pool, wide bool) {
	nk, ng := a.cols/kLen, a.cols/16
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
		a.prepareTile()
		a.kwide = true
	}
}

// matmulK is matmul's part for a K-quant matrix w over tokens t0..t1 and
// rows lo..hi: with VNNI and kTileMin tokens or more, whole groups of four
// tokens take the tile kernel (kTileRun) on rows packed four at a time
// (into tile, a worker's buffer) once per kTileTokens tokens; the rest
// dotK.
func matmulK(out []float32, x *acts, w *matrix, lo, hi, t0, t1 int, tile *kTileBuf) {
	cols, nk, ng := w.cols, w.cols/kLen, w.cols/16
	rb := nk * kBlockBytes[w.ktype]
	dot := func(i, s int) {
		out[s*w.rows+i] = dotK(w.ktype, w.raw[i*rb:(i+1)*rb], x.kq[s*cols:(s+1)*cols], x.kd[s*nk:(s+1)*nk], x.ks[s*ng:(s+1)*ng])
	}
	if useSIMD && useVNNI && t1-t0 >= kTileMin && t0%4 == 0 {
		buf := tile.grow(nk * ktSB)
		step := kTileTokens(cols)
		for u0 := t0; u0 < t1; u0 += step {
			u1 := min(t1, u0+step)
			for i := lo; i+4 <= hi; i += 4 {
				kPack(w, i, buf)
				for s := kTiles(out, w.rows, i, buf, kNarrow(w.ktype), x, u0, u1); s < u1; s++ {
					for r := i; r < i+4; r++ {
						dot(r, s)
					}
				}
			}
		}
		lo += (hi - lo) &^ 3
	}
	for i := lo; i < hi; i++ {
		for s := t0; s < t1; s++ {
			dot(i, s)
		}
	}
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
		case gguf.TypeQ2_K:
			return dotQ2KSIMD(w, x, xd, bs)
		case gguf.TypeQ3_K:
			return dotQ3KSIMD(w, x, xd, bs)
		}
	}
	return dotKGo(t, w, x, xd, bs)
}
