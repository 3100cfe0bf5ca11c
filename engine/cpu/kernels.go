package cpu

import (
	"math"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
)

// The dot products every matrix product reduces to. Each has a portable Go
// version here and, on amd64 with AVX2, an assembly one (kernels_avx2_amd64.s;
// with AVX-512 VNNI some have a second, kernels_vnni_amd64.s): which runs
// is chosen once, at start, from CPUID (simdName, hasVNNI), and tests run
// every path by switching useSIMD and useVNNI.
//
// Quantized weights are dotted with activations quantized the same way as
// Q8_0 (blocks of 32 int8 with a float32 scale, quantizeRow): the products
// of a block are summed exactly in integers, and only the block's sum is
// scaled and added in float32. Weights are repacked at load (weights.go)
// so that a row's quants are contiguous and its scales are float32.

// blockLen is the elements per quantized block (Q8_0, Q4_0, and the
// activations).
const blockLen = 32

// useSIMD selects the assembly kernels; false runs the Go ones. It is set
// at start from the CPU's features; tests flip it to cover both paths.
var useSIMD = simdName != ""

// useVNNI selects, within the SIMD kernels, the AVX-512 VNNI one of the
// Q8_0 products (q8x4VNNI), where the CPU has it; tests flip it too.
var useVNNI = hasVNNI

// Kernels names the kernels that run: "avx2", "avx2+avx512-vnni", or "go"
// for the portable ones.
func Kernels() string {
	switch {
	case useSIMD && useVNNI:
		return simdName + "+avx512-vnni"
	case useSIMD:
		return simdName
	}
	return "go"
}

// dotQ8 is Σ_b wd[b]·xd[b]·Σ_j w[32b+j]·x[32b+j]: a Q8_0 weight row
// (quants w, scales wd) dotted with quantized activations (x, xd).
func dotQ8(w, x []int8, wd, xd []float32) float32 {
	if useSIMD {
		return dotQ8SIMD(w, x, wd, xd)
	}
	return dotQ8Go(w, x, wd, xd)
}

// dotQ8x4 is dotQ8 of four consecutive weight rows (w and wd hold at
// least four rows of cols) with one row of activations: the activations
// are loaded once for the four.
func dotQ8x4(w []int8, wd []float32, x []int8, xd []float32, cols int, out *[4]float32) {
	if useSIMD {
		dotQ8x4SIMD(w, wd, x, xd, cols, out)
		return
	}
	dotQ8x4Go(w, wd, x, xd, cols, out)
}

// dotQ8x4x4 is dotQ8x4 of four consecutive activation rows (x and xd hold
// four rows of cols): out[4t+r] is weight row r with activation row t. The
// VNNI kernel loads each weight once for the four; the other paths run
// dotQ8x4 four times.
func dotQ8x4x4(w []int8, wd []float32, x []int8, xd []float32, cols int, out *[16]float32) {
	if useSIMD && useVNNI {
		dotQ8x4x4VNNI(w, wd, x, xd, cols, out)
		return
	}
	nb := cols / blockLen
	for t := range 4 {
		dotQ8x4(w, wd, x[t*cols:(t+1)*cols], xd[t*nb:(t+1)*nb], cols, (*[4]float32)(out[4*t:4*t+4]))
	}
}

func dotQ8x4Go(w []int8, wd []float32, x []int8, xd []float32, cols int, out *[4]float32) {
	nb := cols / blockLen
	for r := range out {
		out[r] = dotQ8Go(w[r*cols:(r+1)*cols], x, wd[r*nb:(r+1)*nb], xd)
	}
}

// dotQ4x4 is dotQ8x4 for Q4_0 rows (cols/2 bytes each).
func dotQ4x4(w []byte, wd []float32, x []int8, xd []float32, cols int, out *[4]float32) {
	if useSIMD {
		dotQ4x4SIMD(w, wd, x, xd, cols, out)
		return
	}
	dotQ4x4Go(w, wd, x, xd, cols, out)
}

func dotQ4x4Go(w []byte, wd []float32, x []int8, xd []float32, cols int, out *[4]float32) {
	nb := cols / blockLen
	for r := range out {
		out[r] = dotQ4Go(w[r*cols/2:(r+1)*cols/2], x, wd[r*nb:(r+1)*nb], xd)
	}
}

// dotQ4 is dotQ8 for a Q4_0 row: w holds 16 bytes per block, element j in
// the low nibble of byte j and element j+16 in its high nibble, each
// biased by 8 (ggml's layout).
func dotQ4(w []byte, x []int8, wd, xd []float32) float32 {
	if useSIMD {
		return dotQ4SIMD(w, x, wd, xd)
	}
	return dotQ4Go(w, x, wd, xd)
}

// dotF32 is w·x in float32.
func dotF32(w, x []float32) float32 {
	if useSIMD {
		return dotF32SIMD(w, x)
	}
	return mod.DotF32(w, x)
}

// dotF16 is w·x for a row of IEEE halves.
func dotF16(w []uint16, x []float32) float32 {
	if useSIMD {
		return dotF16SIMD(w, x)
	}
	return dotF16Go(w, x)
}

// scores is attention's out[e] = scale·q·k_e for the len(out) keys k_e =
// k[e·stride : e·stride+hd].
func scores(out, q, k []float32, stride, hd int, scale float32) {
	if useSIMD {
		scoresSIMD(out, q, k, stride, hd, scale)
		return
	}
	scoresGo(out, q, k, stride, hd, scale)
}

// mix is attention's out = Σ_e p[e]·v_e for the len(p) values v_e =
// v[e·stride : e·stride+len(out)].
func mix(out, v []float32, stride int, p []float32) {
	if useSIMD {
		mixSIMD(out, v, stride, p)
		return
	}
	mixGo(out, v, stride, p)
}

// f16Row decodes a row of halves.
func f16Row(dst []float32, src []uint16) {
	if useSIMD {
		f16RowSIMD(dst, src)
		return
	}
	f16RowGo(dst, src)
}

func scoresGo(out, q, k []float32, stride, hd int, scale float32) {
	for e := range out {
		out[e] = mod.DotF32(q, k[e*stride:e*stride+hd]) * scale
	}
}

func mixGo(out, v []float32, stride int, p []float32) {
	clear(out)
	for e, pe := range p {
		ve := v[e*stride : e*stride+len(out)]
		for j := range out {
			out[j] += pe * ve[j]
		}
	}
}

func f16RowGo(dst []float32, src []uint16) {
	for j, h := range src {
		dst[j] = f16Table[h]
	}
}

func dotQ8Go(w, x []int8, wd, xd []float32) float32 {
	var sum float32
	for b := range wd {
		ws, xs := w[b*blockLen:(b+1)*blockLen], x[b*blockLen:(b+1)*blockLen]
		var s int32
		for j, v := range ws {
			s += int32(v) * int32(xs[j])
		}
		sum += wd[b] * xd[b] * float32(s)
	}
	return sum
}

func dotQ4Go(w []byte, x []int8, wd, xd []float32) float32 {
	var sum float32
	for b := range wd {
		ws, xs := w[b*16:(b+1)*16], x[b*blockLen:(b+1)*blockLen]
		var s int32
		for j, v := range ws {
			s += (int32(v&0x0f)-8)*int32(xs[j]) + (int32(v>>4)-8)*int32(xs[j+16])
		}
		sum += wd[b] * xd[b] * float32(s)
	}
	return sum
}

// f16Table maps every half to its float32 value: a lookup beats bit
// fiddling in the Go inner loop.
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = gguf.F16ToF32(uint16(i))
	}
	return &t
}()

func dotF16Go(w []uint16, x []float32) float32 {
	var s0, s1 float32
	n := len(w) &^ 1
	for j := 0; j < n; j += 2 {
		s0 += f16Table[w[j]] * x[j]
		s1 += f16Table[w[j+1]] * x[j+1]
	}
	if n < len(w) {
		s0 += f16Table[w[n]] * x[n]
	}
	return s0 + s1
}

// quantizeRow writes x (a multiple of 32 long) as Q8_0-style blocks: for
// each block, d = max|x|/127 and q = x·(127/max|x|) rounded to the
// nearest integer, ties to even (the SIMD conversion's rounding, so both
// paths give the same bytes; ggml rounds ties away from zero, a
// difference only on exact halves). A block holding a NaN or an infinity
// gets a NaN scale (and q = -128, the SIMD conversion's answer to NaN), so
// that every dot product with it is NaN: x86's MAXPS would drop a NaN (it
// returns its second operand when either is NaN; the SIMD path takes the
// max of |x|'s bits as integers, where a NaN tops +Inf), and an infinity
// would scale the rest of its block to 0 and look finite.
func quantizeRow(q []int8, d []float32, x []float32) {
	if quantizeOverride != nil {
		quantizeOverride(q, d, x)
		return
	}
	if useSIMD {
		quantizeRowSIMD(q, d, x)
		return
	}
	quantizeRowGo(q, d, x)
}

// quantizeOverride, nil except in TestQ8LatticeNLL (q8lattice_test.go),
// replaces quantizeRow to measure how the NLL moves with the choice among
// equally fine 8-bit activation quantizers.
var quantizeOverride func(q []int8, d []float32, x []float32)

func quantizeRowGo(q []int8, d []float32, x []float32) {
	for b := range d {
		xs := x[b*blockLen : (b+1)*blockLen]
		var amax float32
		for _, v := range xs {
			amax = max(amax, v, -v) // Go's max keeps a NaN
		}
		amax += amax - amax // NaN for a NaN or +Inf: the block is not finite
		d[b] = amax / 127
		if amax != amax {
			for j := range blockLen {
				q[b*blockLen+j] = -128
			}
			continue
		}
		if amax == 0 {
			clear(q[b*blockLen : (b+1)*blockLen])
			continue
		}
		id := 127 / amax
		qs := q[b*blockLen : (b+1)*blockLen]
		for j, v := range xs {
			qs[j] = int8(math.RoundToEven(float64(v * id)))
		}
	}
}

// dotF32x3x4 is out[3t+r] = dotF32 of weight row r (w holds three rows of
// n) with activation row t (x holds four rows of n): in the AVX2 kernel
// each weight load serves the four tokens and each activation load the
// three rows.
func dotF32x3x4(w, x []float32, n int, out *[12]float32) {
	if useSIMD {
		dotF32x3x4SIMD(w, x, n, out)
		return
	}
	dotF32x3x4Go(w, x, n, out)
}

func dotF32x3x4Go(w, x []float32, n int, out *[12]float32) {
	for t := range 4 {
		for r := range 3 {
			out[3*t+r] = mod.DotF32(w[r*n:(r+1)*n], x[t*n:(t+1)*n])
		}
	}
}
