package cpu

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/modrun/modrun/gguf"
)

// A prompt's K-quant products run four weight rows by four tokens at a
// time (kTileRun), on rows unpacked once per matrix (kPack) and tokens
// rearranged once per set of activations (acts.quantizeK with wide).
// Every K-quant weight is d·sc_g·q − dm·m_g with q >= 0 (Q6_K's q − 32
// is written q and a min of 32·sc_g, Q3_K's q − 4 likewise with 4·sc_g),
// so a super-block's product with
// a token is
//
//	xd·(d·Σ_g sc_g·Σ_{i∈g} q_i·x_i − dm·Σ_g m_g·bsum_g)
//
// where both sums are integers: VPDPBUSD takes q unsigned and x signed,
// so no sign trick and no per-group float step, and the mins meet the
// token's group sums (bsums) in VPDPWSSD. Only the super-block's two
// sums are scaled in float.
//
// The quants are in group-lane order: element 16L+4c+b of a block (group
// L, its bytes 4c..4c+3) goes to chunk c, dword lane L, byte b, so that
// one VPDPBUSD lane accumulates one group of 16 over the block's four
// chunks of 64, and one VPMULLD by the rows' scales finishes them.

// The layout of one super-block of a packed tile of four rows (kPack),
// in bytes: 21 cache lines.
const (
	ktQ   = 0    // [4 chunks][4 rows][64] quants, unsigned, group-lane order
	ktSc  = 1024 // [4 rows][16] int8 scales sc_g
	ktMin = 1088 // [8 pairs][4 rows] two int16 mins: m_2k, m_2k+1
	ktD   = 1216 // [16] float32: lane 4r+t holds row r's d
	ktDm  = 1280 // [16] float32: lane 4r+t holds row r's dm
	ktSB  = 1344 // one super-block
	// A token group's table (acts.ktab), per super-block: [8 pairs][4
	// tokens] two int16 bsums, then [4] float32 xd.
	ktTab = 36 // uint32s
)

// kNarrow says whether a type's group sums of q·x fit int16 (16·q·127 with
// q at most 15 for Q4_K, 7 for Q3_K, 3 for Q2_K), so that the VNNI tile
// scales them in fewer steps (KNARROW).
func kNarrow(t gguf.TensorType) bool {
	return t == gguf.TypeQ2_K || t == gguf.TypeQ3_K || t == gguf.TypeQ4_K
}

// groupLane writes a block's 256 bytes in group-lane order into dst, its
// chunks stride bytes apart.
func groupLane(dst []byte, stride int, src *[kLen]byte) {
	le := binary.LittleEndian
	for c := range 4 {
		d := dst[c*stride : c*stride+64]
		for l := range 16 {
			le.PutUint32(d[4*l:], le.Uint32(src[16*l+4*c:]))
		}
	}
}

// ktBlock is one super-block of a packed tile of four rows (kPack), at
// the offsets the kernel reads (ktQ ... ktDm; TestKTile checks them).
type ktBlock struct {
	q     [4][4][64]byte // [chunk][row]: quants, unsigned, group-lane order
	sc    [4][16]int8    // [row][group] scales
	min   [8][4][2]int16 // [pair][row]: the mins of groups 2k and 2k+1
	d, dm [16]float32    // lane 4r+t: row r's
}

// kPack unpacks K-quant rows i..i+3 of w into buf (nk·ktSB bytes) for
// kTileRun.
func kPack(w *matrix, i int, buf []byte) {
	kb, nk := kBlockBytes[w.ktype], w.cols/kLen
	_ = buf[nk*ktSB-1]
	if next := (i + 8) * nk * kb; useSIMD && useVNNI && next <= len(w.raw) {
		kPrefetch(&w.raw[(i+4)*nk*kb], 4*nk*kb) // the next tile's rows, read while this one's tokens run
	}
	for r := range 4 {
		row := w.raw[(i+r)*nk*kb : (i+r+1)*nk*kb]
		for k := range nk {
			src, b := row[k*kb:(k+1)*kb], (*ktBlock)(unsafe.Pointer(&buf[k*ktSB]))
			var d, dm float32
			switch w.ktype {
			case gguf.TypeQ4_K, gguf.TypeQ5_K:
				d, dm = halfBits(src), halfBits(src[2:])
				s := (*[12]byte)(src[4:16])
				for j := range 8 {
					sc, m := scaleMinK4(j, s[:])
					b.sc[r][2*j], b.sc[r][2*j+1] = int8(sc), int8(sc)
					b.min[j][r] = [2]int16{int16(m), int16(m)}
				}
				if w.ktype == gguf.TypeQ4_K {
					laneQ4K(&b.q, r, (*[144]byte)(src))
				} else {
					laneQ5K(&b.q, r, (*[176]byte)(src))
				}
			case gguf.TypeQ6_K:
				// The quants as stored, 0..63: the −32 becomes a min
				// of 32·sc_g with dm = d.
				d = halfBits(src[208:])
				dm = d
				for g, v := range (*[16]byte)(src[192:208]) {
					b.sc[r][g] = int8(v)
					b.min[g/2][r][g%2] = 32 * int16(int8(v))
				}
				laneQ6K(&b.q, r, (*[210]byte)(src))
			case gguf.TypeQ2_K:
				d, dm = halfBits(src[80:]), halfBits(src[82:])
				// scales: each byte's low nibble; mins: its high one, by pair
				le := binary.LittleEndian
				lo, hi := le.Uint64(src), le.Uint64(src[8:])
				le.PutUint64(unsafe.Slice((*byte)(unsafe.Pointer(&b.sc[r][0])), 8), lo&nib8)
				le.PutUint64(unsafe.Slice((*byte)(unsafe.Pointer(&b.sc[r][8])), 8), hi&nib8)
				for p := range 8 {
					v := uint32(le.Uint16(src[2*p:]))
					b.min[p][r] = [2]int16{int16(v >> 4 & 0x0f), int16(v >> 12)}
				}
				laneQ2K(&b.q, r, (*[84]byte)(src))
			case gguf.TypeQ3_K:
				// The quants unsigned, 0..7 (the third bit set where
				// hmask's is): the −4 becomes a min of 4·sc_g with dm = d.
				d = halfBits(src[108:])
				dm = d
				sc := src[96:108]
				for g := range 16 {
					v := int8(sc[g%8]>>(4*(g/8))&0x0f|(sc[8+g%4]>>(2*(g/4))&3)<<4) - 32
					b.sc[r][g] = v
					b.min[g/2][r][g%2] = 4 * int16(v)
				}
				laneQ3K(&b.q, r, (*[110]byte)(src))
			}
			for t := range 4 {
				b.d[4*r+t], b.dm[4*r+t] = d, dm
			}
		}
	}
}

// halfBits is half without f16Table: a scale per block and row, looked up
// at random in a 256 kB table, missed the caches.
func halfBits(b []byte) float32 {
	h := uint32(binary.LittleEndian.Uint16(b))
	e := h >> 10 & 0x1f
	if e == 0 || e == 0x1f { // zero, subnormals, infinities, NaNs
		return f16Table[h]
	}
	return math.Float32frombits(h>>15<<31 | (e+112)<<23 | (h&0x3ff)<<13)
}

const nib8 = 0x0F0F0F0F0F0F0F0F // the low nibble of 8 bytes

// laneQ4K writes a Q4_K block's quants as row r of a packed tile's chunks
// (q: [4 chunks][4 rows][64]) in group-lane order (laneQ4KVNNI with VNNI). Element 16L+4c+b is in
// sub-block j = L/2 at l = 16(L%2)+4c+b: nibble j%2 of qs byte 32(j/2)+l.
// So lanes 4P and 4P+1 of chunk c are the low nibbles of qs bytes
// 32P+4c.. and 32P+16+4c.., lanes 4P+2 and 4P+3 their high ones.
func laneQ4K(q *[4][4][64]byte, r int, blk *[144]byte) {
	if useSIMD && useVNNI {
		laneQ4KVNNI(&q[0][r][0], &blk[16])
		return
	}
	le := binary.LittleEndian
	qs := blk[16:144]
	for c := range 4 {
		d := q[c][r][:]
		for p := range 4 {
			v := uint64(le.Uint32(qs[32*p+4*c:])) | uint64(le.Uint32(qs[32*p+16+4*c:]))<<32
			le.PutUint64(d[16*p:], v&nib8)
			le.PutUint64(d[16*p+8:], v>>4&nib8)
		}
	}
}

// laneQ5K is laneQ4K for Q5_K (qs at 48), with the fifth bit of element
// 32j+l, bit j of qh byte l, as bit 4.
func laneQ5K(q *[4][4][64]byte, r int, blk *[176]byte) {
	const b0 = 0x0101010101010101
	le := binary.LittleEndian
	qh, qs := blk[16:48], blk[48:176]
	for c := range 4 {
		d := q[c][r][:]
		h := uint64(le.Uint32(qh[4*c:])) | uint64(le.Uint32(qh[16+4*c:]))<<32
		for p := range 4 {
			v := uint64(le.Uint32(qs[32*p+4*c:])) | uint64(le.Uint32(qs[32*p+16+4*c:]))<<32
			le.PutUint64(d[16*p:], v&nib8|(h>>(2*p)&b0)<<4)
			le.PutUint64(d[16*p+8:], v>>4&nib8|(h>>(2*p+1)&b0)<<4)
		}
	}
}

// laneQ6K is laneQ4K for Q6_K's quants as stored, 0..63 (scalesQ6K makes
// the −32 a min). Element 16L+4c+b is in half H = L/8, quarter s =
// (L%8)/2, at l = 16(L%2)+4c+b: nibble s/2 of ql byte 64H+32(s%2)+l,
// with bits 2s..2s+1 of qh byte 32H+l on top.
func laneQ6K(q *[4][4][64]byte, r int, blk *[210]byte) {
	const c2 = 0x0303030303030303
	le := binary.LittleEndian
	for c := range 4 {
		d := q[c][r][:]
		for h := range 2 {
			ql, qh := blk[64*h:64*h+64], blk[128+32*h:128+32*h+32]
			hb := uint64(le.Uint32(qh[4*c:])) | uint64(le.Uint32(qh[16+4*c:]))<<32
			for s := range 4 {
				o := 32 * (s % 2)
				v := uint64(le.Uint32(ql[o+4*c:])) | uint64(le.Uint32(ql[o+16+4*c:]))<<32
				le.PutUint64(d[32*h+8*s:], v>>(4*(s/2))&nib8|(hb>>(2*s)&c2)<<4)
			}
		}
	}
}

// laneQ2K is laneQ4K for Q2_K's 2-bit quants (qs at 16; crumbs2's
// layout). Element 16L+4c+b is in half H = L/8, crumb s = (L%8)/2, at l =
// 16(L%2)+4c+b: bits 2s..2s+1 of qs byte 32H+l.
func laneQ2K(q *[4][4][64]byte, r int, blk *[84]byte) {
	lane2(q, r, blk[16:80], nil)
}

// laneQ3K is laneQ2K for Q3_K (qs at 32) with the third bit of element
// 32(4H+s)+l, bit 4H+s of hmask byte l, as bit 2: the quant + 4, 0..7.
func laneQ3K(q *[4][4][64]byte, r int, blk *[110]byte) {
	lane2(q, r, blk[32:96], blk[:32])
}

// lane2 writes 64 bytes of 2-bit quants qs (and, unless nil, their third
// bits hmask) as row r of a packed tile's chunks, in group-lane order
// (lane2VNNI with VNNI: a VPERMD and a shift a chunk).
func lane2(q *[4][4][64]byte, r int, qs, hmask []byte) {
	const c2, b0 = 0x0303030303030303, 0x0101010101010101
	le := binary.LittleEndian
	_, _ = qs[63], q[3][r][63]
	if useSIMD && useVNNI {
		var hm *byte
		if hmask != nil {
			_ = hmask[31]
			hm = &hmask[0]
		}
		lane2VNNI(&q[0][r][0], &qs[0], hm)
		return
	}
	for c := range 4 {
		d := q[c][r][:]
		var hb uint64
		if hmask != nil {
			hb = uint64(le.Uint32(hmask[4*c:])) | uint64(le.Uint32(hmask[16+4*c:]))<<32
		}
		for h := range 2 {
			v := uint64(le.Uint32(qs[32*h+4*c:])) | uint64(le.Uint32(qs[32*h+16+4*c:]))<<32
			for s := range 4 {
				le.PutUint64(d[32*h+8*s:], v>>(2*s)&c2|(hb>>(4*h+s)&b0)<<2)
			}
		}
	}
}

// prepareTile fills a's forms for kTileRun from its Q8_K copy: kqT, each
// token's quants in group-lane order, and ktab, each whole group of four
// tokens' table (ktTab a super-block: the bsums of groups 2k and 2k+1 as
// one uint32 by pair k and token, then the four tokens' scales).
func (a *acts) prepareTile() {
	nk, ng := a.cols/kLen, a.cols/16
	a.kqT, a.ktab = grow(a.kqT, a.n*a.cols), grow(a.ktab, a.n/4*nk*ktTab)
	var lin [kLen]byte
	for s := range a.n {
		q := a.kq[s*a.cols : (s+1)*a.cols]
		dst := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(a.kqT[s*a.cols:]))), a.cols)
		for k := range nk {
			copy(lin[:], unsafe.Slice((*byte)(unsafe.Pointer(&q[k*kLen])), kLen))
			groupLane(dst[k*kLen:], 64, &lin)
		}
	}
	for g := range a.n / 4 {
		for k := range nk {
			tab := a.ktab[(g*nk+k)*ktTab : (g*nk+k+1)*ktTab]
			for t := range 4 {
				s := 4*g + t
				bs := a.ks[s*ng+16*k : s*ng+16*k+16]
				for p := range 8 {
					tab[4*p+t] = uint32(uint16(bs[2*p])) | uint32(uint16(bs[2*p+1]))<<16
				}
				tab[32+t] = math.Float32bits(a.kd[s*nk+k])
			}
		}
	}
}

// kTileRun dots rows r of a packed tile (w, nk super-blocks: kPack) with
// groups groups of four tokens t (x: 4·groups rows of nk·256 in
// group-lane order, xstride apart; tab: their tables, ktTab uint32s a
// super-block, nk a group), writing group j's at out[(4j+t)·ostride + r].
// narrow says that each group's sum of q·x fits int16 (kNarrow), which the
// VNNI kernel then scales in fewer steps.
func kTileRun(w []byte, x []int8, xstride int, tab []uint32, nk, groups int, narrow bool, out []float32, ostride int) {
	if groups == 0 {
		return
	}
	if nk == 0 {
		for s := range 4 * groups {
			clear(out[s*ostride : s*ostride+4])
		}
		return
	}
	_, _, _, _ = w[nk*ktSB-1], x[(4*groups-1)*xstride+nk*kLen-1], tab[groups*nk*ktTab-1], out[(4*groups-1)*ostride+3]
	if useSIMD && useVNNI {
		n := 0
		if narrow {
			n = 1
		}
		kTileVNNI(&w[0], &x[0], xstride, &tab[0], nk, &out[0], ostride, groups, n)
		return
	}
	for j := range groups {
		kTile4x4Go(w, x[4*j*xstride:], xstride, tab[j*nk*ktTab:], nk, out[4*j*ostride:], ostride)
	}
}

// kTile4x4Go is one group of kTileRun in Go, step by step as the VNNI
// kernel: exact integer sums per super-block, then I·(d·xd) − M·(dm·xd)
// in float32.
func kTile4x4Go(w []byte, x []int8, xstride int, tab []uint32, nk int, out []float32, ostride int) {
	le := binary.LittleEndian
	var acc [16]float32
	for k := range nk {
		sb, tb := w[k*ktSB:(k+1)*ktSB], tab[k*ktTab:(k+1)*ktTab]
		for r := range 4 {
			for t := range 4 {
				xs := x[t*xstride+k*kLen:]
				var isum, msum int32
				for l := range 16 { // group l
					var s int32
					for c := range 4 {
						for b := range 4 {
							s += int32(sb[ktQ+256*c+64*r+4*l+b]) * int32(xs[64*c+4*l+b])
						}
					}
					isum += int32(int8(sb[ktSc+16*r+l])) * s
				}
				for p := range 8 {
					m, bs := le.Uint32(sb[ktMin+16*p+4*r:]), tb[4*p+t]
					msum += int32(int16(m))*int32(int16(bs)) + int32(int16(m>>16))*int32(int16(bs>>16))
				}
				xd := math.Float32frombits(tb[32+t])
				d := math.Float32frombits(le.Uint32(sb[ktD+4*(4*r+t):]))
				dm := math.Float32frombits(le.Uint32(sb[ktDm+4*(4*r+t):]))
				acc[4*t+r] += float32(isum)*(d*xd) - float32(msum)*(dm*xd)
			}
		}
	}
	for t := range 4 {
		copy(out[t*ostride:t*ostride+4], acc[4*t:4*t+4])
	}
}

// kTileMin is the fewest tokens that take the tile: below it, packing the
// rows costs more than it saves (a 2048x2048 Q4_K product, one thread,
// loaded VM: 4 tokens 0.69 ms tiled, 0.53 by dotK; 8 tokens 0.81 and 1.04).
const kTileMin = 8

// kTileTokens is how many tokens one packing of a row tile serves: their
// activations (cols bytes each) stay within about 1 MB of L2 while the
// packed rows stay in L1.
func kTileTokens(cols int) int {
	return max(4, (1<<20)/cols&^3)
}

// kTileBuf is a worker's packed tile of four K-quant rows (kPack), 64-byte
// aligned.
type kTileBuf struct {
	mem []byte
	buf []byte
}

// grow makes b.buf at least n bytes, on a cache-line boundary.
func (b *kTileBuf) grow(n int) []byte {
	if len(b.buf) < n {
		b.mem = make([]byte, n+64)
		off := int(-uintptr(unsafe.Pointer(&b.mem[0])) & 63)
		b.buf = b.mem[off : off+n]
	}
	return b.buf[:n]
}

// kTiles runs the tokens t0..t1 (t0 a multiple of four; up to the last
// whole group) through rows i..i+3 packed in buf, writing out[s][i..i+3];
// it returns the first token it left.
func kTiles(out []float32, rows, i int, buf []byte, narrow bool, x *acts, t0, t1 int) int {
	cols, nk, g := x.cols, x.cols/kLen, (t1-t0)/4
	kTileRun(buf, x.kqT[t0*cols:], cols, x.ktab[t0/4*nk*ktTab:], nk, g, narrow, out[t0*rows+i:], rows)
	return t0 + 4*g
}
