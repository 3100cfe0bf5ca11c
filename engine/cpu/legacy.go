package cpu

import (
	"encoding/binary"
	"unsafe"

	"github.com/modrun/modrun/gguf"
)

// Q4_1, Q5_0 and Q5_1 dot in the file's own blocks of 32, against the
// activations' Q8_0 blocks (quantizeRow), as llama.cpp dots them. Each
// weight is d·u + c for an unsigned quant u (the nibble, with the fifth
// bit as bit 4 for the Q5s) and a block constant c (the min m of Q4_1 and
// Q5_1; −16·d for Q5_0), so a block's dot with activations xd·x is
//
//	xd·(d·Σ u_i·x_i + c·Σ x_i)
//
// two integer sums and one float step per 32 weights; the weights stay the
// file's bytes (decode reads 5-6 bits a weight, where the Q8_0 copy they
// were requantized to took 9). A prompt's rows are unpacked 16 at a time
// (legacyTile) for the interleaved Q8_0 kernel's variant that adds each
// block's constants in one more FMA a token (dotQ8l, q8i_vnni_amd64.s).
//
// The layouts (gguf/quant.go): byte j of the 16 nibble bytes holds element
// j (low half) and j+16 (high half); bit j of qh is element j's fifth bit.
//
//	Q4_1 (20 B): d, m, qs[16]
//	Q5_0 (22 B): d, qh[4], qs[16]
//	Q5_1 (24 B): d, m, qh[4], qs[16]

// legacy is the layout of one of these types: its block bytes and where
// the min, the fifth bits and the nibbles sit (−1: none).
type legacy struct {
	bytes, m, qh, qs int
}

// legacyTypes are the types dotted by this file.
var legacyTypes = map[gguf.TensorType]legacy{
	gguf.TypeQ4_1: {bytes: 20, m: 2, qh: -1, qs: 4},
	gguf.TypeQ5_0: {bytes: 22, m: -1, qh: 2, qs: 6},
	gguf.TypeQ5_1: {bytes: 24, m: 2, qh: 4, qs: 8},
}

// legacyBlock unpacks one block: u its unsigned quants (0..31), d its
// scale and c its constant (each weight is d·u + c).
func (l legacy) block(blk []byte, u *[blockLen]uint8) (d, c float32) {
	d = half(blk)
	c = -16 * d
	if l.m >= 0 {
		c = half(blk[l.m:])
	}
	var qh uint32
	if l.qh >= 0 {
		qh = binary.LittleEndian.Uint32(blk[l.qh:])
	}
	for j, v := range blk[l.qs : l.qs+16] {
		u[j] = v&0x0f | uint8(qh>>j&1)<<4
		u[j+16] = v>>4 | uint8(qh>>(j+16)&1)<<4
	}
	return d, c
}

// dotLegacyGo is a row of type t (len(xd) blocks) dotted with Q8_0
// activations x, xd.
func dotLegacyGo(t gguf.TensorType, w []byte, x []int8, xd []float32) float32 {
	l := legacyTypes[t]
	var u [blockLen]uint8
	var sum float32
	for b := range xd {
		d, c := l.block(w[b*l.bytes:(b+1)*l.bytes], &u)
		var isum, xsum int32
		for j, v := range x[b*blockLen : (b+1)*blockLen] {
			isum += int32(u[j]) * int32(v)
			xsum += int32(v)
		}
		sum += xd[b] * (d*float32(isum) + c*float32(xsum))
	}
	return sum
}

// dotLegacy is dotLegacyGo on the fastest path this CPU has.
func dotLegacy(t gguf.TensorType, w []byte, x []int8, xd []float32) float32 {
	if useSIMD {
		switch t {
		case gguf.TypeQ4_1:
			return dotQ41SIMD(w, x, xd)
		case gguf.TypeQ5_0:
			return dotQ50SIMD(w, x, xd)
		case gguf.TypeQ5_1:
			return dotQ51SIMD(w, x, xd)
		}
	}
	return dotLegacyGo(t, w, x, xd)
}

// legacyTileBuf is a worker's 16 rows unpacked (legacyTile), or four
// (legacyRows4).
type legacyTileBuf struct {
	q []byte    // [cols/32][8][16][4] as q8i's q (one group): u + 128, or u + 112 for Q5_0 (its −16 folded in)
	d []float32 // [cols/32][2][16] each block's 16 scales, then its 16 constants (the mins; Q5_0's zero)

	// The AVX2 path's four rows (legacyRows4).
	q8     []int8    // [4][cols]
	d4, c4 []float32 // [4][cols/32]
}

// q8lAct is a token's block for the legacy tile kernel: q8iAct's fields,
// then xd·Σx, which the rows' constants multiply.
type q8lAct struct {
	d  float32
	s  int32
	xs float32
	_  int32
}

// q8lActs fills a.la and a.lxs from a's quantized rows, once per set (not
// per worker and product: at 128 tokens of 5632 la is 360 kB).
func (a *acts) q8lActs() {
	if a.lready {
		return
	}
	a.q8iActs()
	a.la, a.lxs = grow(a.la, len(a.ia)), grow(a.lxs, len(a.ia))
	for b, v := range a.ia { // v.s is −128·Σx
		a.lxs[b] = v.d * float32(v.s/-128)
		a.la[b] = q8lAct{d: v.d, s: v.s, xs: a.lxs[b]}
	}
	a.lready = true
}

// fifthBytes[b] spreads the 8 bits of b to bit 4 of 8 bytes (bit j to
// byte j).
var fifthBytes = func() (t [256]uint64) {
	for b := range t {
		for j := range 8 {
			t[b] |= uint64(b>>j&1) << (8*j + 4)
		}
	}
	return t
}()

// legacyTile unpacks rows i..i+15 of w into tb as interleaveQ8 lays out a
// group of Q8_0 rows (each weight +128, which the kernel's activation sums
// cancel), with the scales and constants by block: the unsigned quants u,
// Q5_0's as u − 16 with its constant folded in, Q4_1's and Q5_1's with
// the min in tb.d. With VNNI the rows' fields are gathered 16 at a time
// (legacyTileVNNI); legacyTileGo is its twin.
func legacyTile(w *matrix, i int, tb *legacyTileBuf) {
	l := legacyTypes[w.ktype]
	nb := w.cols / blockLen
	rb := nb * l.bytes
	if !useSIMD || !useVNNI || nb == 0 {
		legacyTileGo(w, i, tb)
		return
	}
	_, _, _ = w.raw[(i+q8iRows)*rb-1], tb.q[nb*q8iRows*blockLen-1], tb.d[2*nb*q8iRows-1]
	bias := 0x80
	if l.m < 0 {
		bias = 0x70
	}
	legacyTileVNNI(&w.raw[i*rb], rb, nb, l.bytes, l.qs, l.qh, l.m, bias, &tb.q[0], &tb.d[0])
}

// legacyTileGo is legacyTile eight quants at a time in Go.
func legacyTileGo(w *matrix, i int, tb *legacyTileBuf) {
	l := legacyTypes[w.ktype]
	le := binary.LittleEndian
	nb := w.cols / blockLen
	for rr := range q8iRows {
		row := w.raw[(i+rr)*nb*l.bytes : (i+rr+1)*nb*l.bytes]
		for b := range nb {
			blk := row[b*l.bytes : (b+1)*l.bytes]
			for h := 0; h < 16; h += 8 {
				lo, hi := l.biased8(blk, h)
				// bytes 4c..4c+3 of row rr at (b·8+c)·64+4rr: lo holds
				// elements h..h+7 (c = h/4, h/4+1), hi 16+h..23+h
				at := (b*8+h/4)*64 + 4*rr
				le.PutUint32(tb.q[at:], uint32(lo))
				le.PutUint32(tb.q[at+64:], uint32(lo>>32))
				le.PutUint32(tb.q[at+4*64:], uint32(hi))
				le.PutUint32(tb.q[at+5*64:], uint32(hi>>32))
			}
			tb.d[2*b*q8iRows+rr] = half(blk)
			tb.d[(2*b+1)*q8iRows+rr] = 0
			if l.m >= 0 {
				tb.d[(2*b+1)*q8iRows+rr] = half(blk[l.m:])
			}
		}
	}
}

// biased8 is a block's elements h..h+7 (lo) and 16+h..23+h (hi), h 0 or
// 8, eight bytes each: u + 128, or u + 112 for Q5_0 (its −16 folded in),
// which is the quant's value + 128.
func (l legacy) biased8(blk []byte, h int) (lo, hi uint64) {
	const b80, b70 = 0x8080808080808080, 0x7070707070707070
	var qh uint32
	if l.qh >= 0 {
		qh = binary.LittleEndian.Uint32(blk[l.qh:])
	}
	v := binary.LittleEndian.Uint64(blk[l.qs+h:])
	lo = v&nib8 | fifthBytes[qh>>h&0xff]
	hi = v>>4&nib8 | fifthBytes[qh>>(h+16)&0xff]
	if l.m < 0 { // u + 112 = u − 16 + 128, no carry between bytes (u < 32)
		return lo + b70, hi + b70
	}
	return lo | b80, hi | b80
}

// legacyRows4 unpacks rows i..i+3 of w into tb's q8 (the quants' values
// as int8, −16..31, row-major), d4 (their block scales) and c4 (their
// constants, Q4_1's and Q5_1's mins; Q5_0's are folded into its quants),
// for the AVX2 path's four-row Q8_0 kernel (dotQ8x4).
func legacyRows4(w *matrix, i int, tb *legacyTileBuf) {
	const b80 = 0x8080808080808080
	l := legacyTypes[w.ktype]
	le := binary.LittleEndian
	cols, nb := w.cols, w.cols/blockLen
	out := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(tb.q8))), 4*cols)
	for r := range 4 {
		row := w.raw[(i+r)*nb*l.bytes : (i+r+1)*nb*l.bytes]
		for b := range nb {
			blk := row[b*l.bytes : (b+1)*l.bytes]
			d := out[r*cols+b*blockLen : r*cols+(b+1)*blockLen]
			for h := 0; h < 16; h += 8 {
				lo, hi := l.biased8(blk, h)
				le.PutUint64(d[h:], lo^b80)
				le.PutUint64(d[16+h:], hi^b80)
			}
			tb.d4[r*nb+b] = half(blk)
			if l.m >= 0 {
				tb.c4[r*nb+b] = half(blk[l.m:])
			}
		}
	}
}

// matmulLegacy is matmul's part for a Q4_1, Q5_0 or Q5_1 matrix w over
// tokens 0..n and rows lo..hi: VNNI takes the interleaved kernel with
// constants (dotQ8l) on rows unpacked 16 at a time for any n, decode's one
// token too (its block sums once per token, not per row: 1.4-2.8x the row
// kernels' decode on d2048 files); with four tokens or more AVX2 takes the
// four-row Q8_0 kernel (dotQ8x4) on rows unpacked four at
// a time with the mins added after, once for all the tokens (x.q8lActs
// filled before); the rest dotLegacy.
func matmulLegacy(out []float32, x *acts, w *matrix, lo, hi, n int, tb *legacyTileBuf) {
	cols, nb := w.cols, w.cols/blockLen
	rb := nb * legacyTypes[w.ktype].bytes
	i := lo
	switch {
	case useSIMD && useVNNI:
		tb.q, tb.d = grow(tb.q, q8iRows*cols), grow(tb.d, 2*q8iRows*nb)
		for ; i+q8iRows <= hi; i += q8iRows {
			legacyTile(w, i, tb)
			for s := 0; s < n; {
				k := 1
				switch {
				case n-s >= 8:
					k = 8
				case n-s >= 4:
					k = 4
				}
				dotQ8l(tb.q, tb.d, nb, x.q[s*cols:(s+k)*cols], x.la[s*nb:(s+k)*nb], k, out[s*w.rows+i:], w.rows)
				s += k
			}
		}
	case useSIMD && n >= 4:
		mins := legacyTypes[w.ktype].m >= 0
		tb.q8, tb.d4, tb.c4 = grow(tb.q8, 4*cols), grow(tb.d4, 4*nb), grow(tb.c4, 4*nb)
		var four [4]float32
		for ; i+4 <= hi; i += 4 {
			legacyRows4(w, i, tb)
			for s := range n {
				dotQ8x4(tb.q8, tb.d4, x.q[s*cols:(s+1)*cols], x.d[s*nb:(s+1)*nb], cols, &four)
				o := out[s*w.rows+i : s*w.rows+i+4]
				for r := range 4 {
					o[r] = four[r]
					if mins {
						o[r] += dotF32(tb.c4[r*nb:(r+1)*nb], x.lxs[s*nb:(s+1)*nb])
					}
				}
			}
		}
	}
	for ; i < hi; i++ {
		wr := w.raw[i*rb : (i+1)*rb]
		for s := range n {
			out[s*w.rows+i] = dotLegacy(w.ktype, wr, x.q[s*cols:(s+1)*cols], x.d[s*nb:(s+1)*nb])
		}
	}
}
