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
// were requantized to took 9). A prompt's four rows are unpacked to int8
// values (legacyTile) for the Q8_0 tile kernel, the mins added after.
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

// legacyTileBuf is a worker's four rows unpacked (legacyTile) and its
// activations' block sums.
type legacyTileBuf struct {
	q    []int8    // [4][cols] the values u − 16 (Q5_0) or u
	d, c []float32 // [4][cols/32] each block's scale and, with mins, its constant
	xsum []float32 // [n][cols/32] xd·Σx of each activation block
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

// legacyTile unpacks rows i..i+3 of w into tb, eight quants at a time:
// Q5_0's as the signed values u − 16 (its constant folded in), Q4_1's and
// Q5_1's as u with the min in c.
func legacyTile(w *matrix, i int, tb *legacyTileBuf) {
	const b4 = 0x1010101010101010
	l := legacyTypes[w.ktype]
	le := binary.LittleEndian
	nb := w.cols / blockLen
	out := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(tb.q))), len(tb.q))
	for r := range 4 {
		row := w.raw[(i+r)*nb*l.bytes : (i+r+1)*nb*l.bytes]
		for b := range nb {
			blk := row[b*l.bytes : (b+1)*l.bytes]
			d, c := half(blk), -16*half(blk)
			if l.m >= 0 {
				c = half(blk[l.m:])
			}
			var qh uint32
			if l.qh >= 0 {
				qh = le.Uint32(blk[l.qh:])
			}
			o := out[r*w.cols+b*blockLen:]
			for h := 0; h < 16; h += 8 {
				v := le.Uint64(blk[l.qs+h:])
				lo := v&nib8 | fifthBytes[qh>>h&0xff]
				hi := v>>4&nib8 | fifthBytes[qh>>(h+16)&0xff]
				if l.m < 0 { // u − 16: bit 4 flipped, and bits 5-7 set where it is then set (u < 16)
					lo ^= b4
					lo |= (lo & b4) * 0x0e
					hi ^= b4
					hi |= (hi & b4) * 0x0e
				}
				le.PutUint64(o[h:], lo)
				le.PutUint64(o[16+h:], hi)
			}
			if l.m < 0 {
				c = 0
			}
			tb.d[r*nb+b], tb.c[r*nb+b] = d, c
		}
	}
}

// matmulLegacy is matmul's part for a Q4_1, Q5_0 or Q5_1 matrix w over
// tokens 0..n and rows lo..hi: four tokens or more with VNNI take the
// Q8_0 tile kernel on rows unpacked four at a time, once for all the
// tokens (the mins added after: Σ_b c_b·xd_b·Σx_b), the rest dotLegacy.
func matmulLegacy(out []float32, x *acts, w *matrix, lo, hi, n int, tb *legacyTileBuf) {
	cols, nb := w.cols, w.cols/blockLen
	rb := nb * legacyTypes[w.ktype].bytes
	mins := legacyTypes[w.ktype].m >= 0
	i := lo
	if useSIMD && useVNNI && n >= 4 {
		tb.q, tb.d, tb.c = grow(tb.q, 4*cols), grow(tb.d, 4*nb), grow(tb.c, 4*nb)
		if mins {
			tb.xsum = grow(tb.xsum, n*nb)
			blockSums(tb.xsum, x)
		}
		for ; i+4 <= hi; i += 4 {
			legacyTile(w, i, tb)
			for t0 := 0; t0 < n; t0 += tokenTile {
				t1 := min(n, t0+tokenTile)
				s := q8Tiles(out, w.rows, i, tb.q, tb.d, x, t0, t1)
				if mins {
					addMins(out, w.rows, i, tb, nb, t0, s)
				}
				for ; s < t1; s++ {
					for r := i; r < i+4; r++ {
						out[s*w.rows+r] = dotLegacy(w.ktype, w.raw[r*rb:(r+1)*rb], x.q[s*cols:(s+1)*cols], x.d[s*nb:(s+1)*nb])
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

// blockSums writes xsum[s][b] = xd_b·Σ x_b of x's activation blocks.
func blockSums(xsum []float32, x *acts) {
	for b, d := range x.d[:x.n*x.cols/blockLen] {
		var v int32
		for _, q := range x.q[b*blockLen : (b+1)*blockLen] {
			v += int32(q)
		}
		xsum[b] = d * float32(v)
	}
}

// addMins adds Σ_b c_b·xsum_b to out[s][i..i+3] for tokens t0..t1 (whole
// groups of four): three rows by dotF32x3x4 and the fourth by dotF32.
func addMins(out []float32, rows, i int, tb *legacyTileBuf, nb, t0, t1 int) {
	var twelve [12]float32
	for s := t0; s < t1; s += 4 {
		xs := tb.xsum[s*nb : (s+4)*nb]
		dotF32x3x4(tb.c[:3*nb], xs, nb, &twelve)
		for t := range 4 {
			o := out[(s+t)*rows+i : (s+t)*rows+i+4]
			for r := range 3 {
				o[r] += twelve[3*t+r]
			}
			o[3] += dotF32(tb.c[3*nb:4*nb], xs[t*nb:(t+1)*nb])
		}
	}
}
