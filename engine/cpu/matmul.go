package cpu

import (
	"encoding/binary"
	"unsafe"
)

// acts are n rows of activations [n][cols], as floats and, once asked for,
// quantized to blocks of 32 (quantizeRow): a set of rows feeding several
// matrices (q, k and v; gate and up) is quantized once.
type acts struct {
	f     []float32 // [n][cols]
	n     int
	cols  int
	q     []int8    // [n][cols] when quantized
	d     []float32 // [n][cols/32]
	ready bool      // q and d hold f's rows

	// The Q8_K copy for K-quant weights (quantizeK, kquant.go).
	kq            []int8    // [n][cols]
	kd            []float32 // [n][cols/256]
	ks            []int16   // [n][cols/16] each 16 quants' sum
	kqT           []int8    // [n][cols] kq in group-lane order, for the tile kernel (ktile.go)
	ktab          []uint32  // [n/4][cols/256][ktTab] each four tokens' bsums and scales
	kready, kwide bool      // kq, kd, ks hold f's rows; and kqT, ktab

	ia     []q8iAct  // [n][cols/32] for interleaved Q8_0 weights (q8i.go)
	iready bool      // ia holds q's rows
	la     []q8lAct  // [n][cols/32] for Q4_1/Q5_0/Q5_1 tiles (legacy.go)
	lxs    []float32 // [n][cols/32] la's xs alone, for the AVX2 path's dotF32
	lready bool      // la and lxs hold q's rows
}

// set points a at n rows of f, dropping any quantized copy.
func (a *acts) set(f []float32, n, cols int) {
	a.f, a.n, a.cols, a.ready, a.kready, a.kwide, a.iready, a.lready = f[:n*cols], n, cols, false, false, false, false, false
}

// quantize fills q and d from f, once per set, split over the pool.
func (a *acts) quantize(p *pool) {
	if a.ready {
		return
	}
	nb := a.cols / blockLen
	a.q, a.d = grow(a.q, a.n*a.cols), grow(a.d, a.n*nb)
	p.run(a.n, max(1, 4096/a.cols), func(lo, hi int) {
		for s := lo; s < hi; s++ {
			quantizeRow(a.q[s*a.cols:(s+1)*a.cols], a.d[s*nb:(s+1)*nb], a.f[s*a.cols:(s+1)*a.cols])
		}
	})
	a.ready, a.iready, a.lready = true, false, false
}

// grow returns buf resliced to n, reallocated only when too short.
func grow[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	return buf[:n]
}

// rowGrain is the fewest rows a worker takes: below it the hand-off costs
// more than the rows.
const rowGrain = 16

// tokenTile is how many activation rows a worker runs through each weight
// row before moving on: the weight row stays in L1 while the tile's rows
// stream from L2.
const tokenTile = 64

// matmul computes out[s][i] = w.row(i) · x[s] for the n rows of x; out is
// [n][w.rows]. Workers split w's rows, so each weight byte is read by one
// core; a quantized w uses x's quantized rows.
func (r *Runner) matmul(out []float32, x *acts, w *matrix) {
	if w.kind == kindQ8 && w.i16 != nil && useSIMD && useVNNI {
		r.matmulQ8i(out, x, w)
		return
	}
	rq8, rd := w.q8, w.d // kindQ8, kindQ4: the rows' quants and scales
	if w.kind == kindQ8 {
		rq8, rd = w.q8Rows()
	}
	switch {
	case w.kind == kindK:
		x.quantizeK(r.pool, useSIMD && useVNNI && x.n >= kTileMin)
	case w.quantized():
		x.quantize(r.pool)
		if w.kind == kindL && useSIMD && (x.n >= 4 || useVNNI) {
			x.q8lActs() // matmulLegacy's tiles
		}
	}
	n, cols, nb := x.n, w.cols, w.cols/blockLen
	r.pool.run(w.rows, rowGrain, func(lo, hi int) {
		var row []float32 // kindRows, kindF16: a decoded weight row
		if w.kind == kindRows || w.kind == kindF16 {
			row = make([]float32, cols)
		}
		var q8 []int8       // kindQ4: four rows unpacked to int8
		var rows3 []float32 // kindF16, kindRows: three rows decoded
		var tile kTileBuf   // kindK: four rows unpacked
		if w.kind == kindK {
			matmulK(out, x, w, lo, hi, 0, n, &tile)
			return
		}
		if w.kind == kindL {
			var tb legacyTileBuf
			matmulLegacy(out, x, w, lo, hi, n, &tb)
			return
		}
		for t0 := 0; t0 < n; t0 += tokenTile {
			t1 := min(n, t0+tokenTile)
			i := lo
			if w.kind == kindQ8 { // four rows at a time, each activation row loaded once for them
				var four [4]float32
				for ; i+4 <= hi; i += 4 {
					wq, wd := rq8[i*cols:(i+4)*cols], rd[i*nb:(i+4)*nb]
					for s := q8Tiles(out, w.rows, i, wq, wd, x, t0, t1); s < t1; s++ {
						dotQ8x4(wq, wd, x.q[s*cols:(s+1)*cols], x.d[s*nb:(s+1)*nb], cols, &four)
						copy(out[s*w.rows+i:s*w.rows+i+4], four[:])
					}
				}
			}
			if w.kind == kindQ4 {
				var four [4]float32
				// With four tokens or more and VNNI, the four rows are
				// unpacked to int8 once for the tile and take Q8_0's
				// four-by-four kernel: the same integer products.
				wide := useSIMD && useVNNI && t1-t0 >= 4
				if wide && q8 == nil {
					q8 = make([]int8, 4*cols)
				}
				for ; i+4 <= hi; i += 4 {
					wq, wd := w.q4[i*cols/2:(i+4)*cols/2], rd[i*nb:(i+4)*nb]
					s := t0
					if wide {
						unpackQ4(q8, wq)
						s = q8Tiles(out, w.rows, i, q8, wd, x, t0, t1)
					}
					for ; s < t1; s++ {
						dotQ4x4(wq, wd, x.q[s*cols:(s+1)*cols], x.d[s*nb:(s+1)*nb], cols, &four)
						copy(out[s*w.rows+i:s*w.rows+i+4], four[:])
					}
				}
			}
			if w.kind == kindF32 || w.kind == kindF16 || w.kind == kindRows {
				i = floatTiles(out, x, w, i, hi, t0, t1, &rows3)
			}
			for ; i < hi; i++ {
				switch w.kind {
				case kindQ8:
					wq, wd := rq8[i*cols:(i+1)*cols], rd[i*nb:(i+1)*nb]
					for s := t0; s < t1; s++ {
						out[s*w.rows+i] = dotQ8(wq, x.q[s*cols:(s+1)*cols], wd, x.d[s*nb:(s+1)*nb])
					}
				case kindQ4:
					wq, wd := w.q4[i*cols/2:(i+1)*cols/2], rd[i*nb:(i+1)*nb]
					for s := t0; s < t1; s++ {
						out[s*w.rows+i] = dotQ4(wq, x.q[s*cols:(s+1)*cols], wd, x.d[s*nb:(s+1)*nb])
					}
				case kindF32:
					wr := w.f32[i*cols : (i+1)*cols]
					for s := t0; s < t1; s++ {
						out[s*w.rows+i] = dotF32(wr, x.f[s*cols:(s+1)*cols])
					}
				case kindF16:
					wr := w.f16[i*cols : (i+1)*cols]
					if t1-t0 == 1 {
						out[t0*w.rows+i] = dotF16(wr, x.f[t0*cols:(t0+1)*cols])
						continue
					}
					f16Row(row, wr) // decoded once for the tile's rows
					for s := t0; s < t1; s++ {
						out[s*w.rows+i] = dotF32(row, x.f[s*cols:(s+1)*cols])
					}
				case kindRows:
					w.src.Row(i, row)
					for s := t0; s < t1; s++ {
						out[s*w.rows+i] = dotF32(row, x.f[s*cols:(s+1)*cols])
					}
				}
			}
		}
	})
}

// floatTiles runs a float matrix's rows i.. of hi three at a time over
// tokens t0..t1 in groups of four (dotF32x3x4), decoding F16 and other
// rows into rows3 once for the tile; it returns the first row it left (at
// most two, or all of them with fewer than four tokens).
func floatTiles(out []float32, x *acts, w *matrix, i, hi, t0, t1 int, rows3 *[]float32) int {
	if t1-t0 < 4 {
		return i
	}
	cols := w.cols
	var twelve [12]float32
	for ; i+3 <= hi; i += 3 {
		var wr []float32
		switch w.kind {
		case kindF32:
			wr = w.f32[i*cols : (i+3)*cols]
		case kindF16:
			*rows3 = grow(*rows3, 3*cols)
			wr = *rows3
			f16Row(wr, w.f16[i*cols:(i+3)*cols])
		default:
			*rows3 = grow(*rows3, 3*cols)
			wr = *rows3
			for k := range 3 {
				w.src.Row(i+k, wr[k*cols:(k+1)*cols])
			}
		}
		s := t0
		for ; s+4 <= t1; s += 4 {
			dotF32x3x4(wr, x.f[s*cols:(s+4)*cols], cols, &twelve)
			for t := range 4 {
				copy(out[(s+t)*w.rows+i:(s+t)*w.rows+i+3], twelve[3*t:3*t+3])
			}
		}
		for ; s < t1; s++ {
			for k := range 3 {
				out[s*w.rows+i+k] = dotF32(wr[k*cols:(k+1)*cols], x.f[s*cols:(s+1)*cols])
			}
		}
	}
	return i
}

// q8Tiles runs Q8_0 weight rows i..i+3 (wq, wd) over x's tokens t0.. in
// groups of four (dotQ8x4x4: each weight loaded once for the four with
// VNNI), writing out[s][i..i+3]; it returns the first token it left (the
// last t1-t0 mod 4).
func q8Tiles(out []float32, rows, i int, wq []int8, wd []float32, x *acts, t0, t1 int) int {
	cols, nb := x.cols, x.cols/blockLen
	var sixteen [16]float32
	s := t0
	for ; s+4 <= t1; s += 4 {
		dotQ8x4x4(wq, wd, x.q[s*cols:(s+4)*cols], x.d[s*nb:(s+4)*nb], cols, &sixteen)
		for t := range 4 {
			copy(out[(s+t)*rows+i:(s+t)*rows+i+4], sixteen[4*t:4*t+4])
		}
	}
	return s
}

// unpackQ4 writes Q4_0 quants (16 bytes a block: element j in the low
// nibble of byte j, element j+16 in its high one, both offset by 8) as
// int8 values, 32 a block, for the Q8_0 kernels. Eight nibbles at a time:
// y = nibble ^ 8 is the value + 8 mod 16, whose bit 3 is set for the
// negative values, which then take 0xF0 as well (y | 0xF0 = value as a
// byte); (y & 8) * 0x1E is that 0xF0, with no carry between bytes.
func unpackQ4(dst []int8, q4 []byte) {
	const nib, bit3 = 0x0F0F0F0F0F0F0F0F, 0x0808080808080808
	le := binary.LittleEndian
	out := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(dst))), len(dst))
	for b := 0; b+16 <= len(q4); b += 16 {
		d := out[2*b : 2*b+32]
		for h := 0; h < 2; h++ {
			v := le.Uint64(q4[b+8*h:])
			lo, hi := v&nib^bit3, v>>4&nib^bit3
			le.PutUint64(d[8*h:], lo|(lo&bit3)*0x1E)
			le.PutUint64(d[16+8*h:], hi|(hi&bit3)*0x1E)
		}
	}
}
