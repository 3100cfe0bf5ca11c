package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// A quantized type stores its elements in blocks; a codec decodes one block to
// float32 values and encodes values back into one block. The decoders follow
// ggml's reference dequantizers (ggml-quants.c, dequantize_row_*) operation by
// operation in float32, so that their results are bit-identical to llama.cpp's;
// each product whose result is then added to is wrapped in float32(...) so the
// Go compiler may not fuse it into an FMA, which would round differently.
type blockCodec struct {
	decode func(blk []byte, y []float32) // one block -> BlockSize values
	encode func(x []float32, blk []byte) // BlockSize values -> one block
}

var codecs = map[TensorType]blockCodec{
	TypeQ8_0: {decodeQ8_0, encodeQ8_0},
	TypeQ4_0: {decodeQ4_0, encodeQ4_0},
	TypeQ4_1: {decodeQ4_1, encodeQ4_1},
	TypeQ5_0: {decodeQ5_0, encodeQ5_0},
	TypeQ5_1: {decodeQ5_1, encodeQ5_1},
	TypeQ2_K: {decodeQ2_K, encodeQ2_K},
	TypeQ3_K: {decodeQ3_K, encodeQ3_K},
	TypeQ4_K: {decodeQ4_K, encodeQ4_K},
	TypeQ5_K: {decodeQ5_K, encodeQ5_K},
	TypeQ6_K: {decodeQ6_K, encodeQ6_K},
}

// SupportedTypes are the tensor types Dequantize and Quantize handle, plain
// types first, then ggml's 32-element types, then its 256-element K-quants.
var SupportedTypes = []TensorType{
	TypeF32, TypeF16, TypeBF16,
	TypeQ8_0, TypeQ4_0, TypeQ4_1, TypeQ5_0, TypeQ5_1,
	TypeQ2_K, TypeQ3_K, TypeQ4_K, TypeQ5_K, TypeQ6_K,
}

// Supported reports whether Dequantize and Quantize handle t.
func (t TensorType) Supported() bool {
	_, ok := codecs[t]
	return ok || t == TypeF32 || t == TypeF16 || t == TypeBF16
}

// SupportedTypeNames lists SupportedTypes for messages: "F32, F16, ...".
func SupportedTypeNames() string {
	names := make([]string, len(SupportedTypes))
	for i, t := range SupportedTypes {
		names[i] = t.String()
	}
	return strings.Join(names, ", ")
}

// checkBlocks validates n elements of type t held in nBytes bytes (nBytes < 0:
// not checked).
func checkBlocks(op string, t TensorType, n, nBytes int) error {
	if !t.Known() {
		return fmt.Errorf("unknown tensor type %d", uint32(t))
	}
	if !t.Supported() {
		return fmt.Errorf("%s %s is not supported (%s are)", op, t, SupportedTypeNames())
	}
	if n%t.BlockSize() != 0 {
		return fmt.Errorf("%d elements is not a whole number of %s blocks of %d", n, t, t.BlockSize())
	}
	if want := n / t.BlockSize() * t.BlockBytes(); nBytes >= 0 && nBytes != want {
		return fmt.Errorf("%d %s elements need %d bytes, got %d", n, t, want, nBytes)
	}
	return nil
}

// Dequantize converts src, the bytes of len(dst) elements of type t, to float32.
func Dequantize(t TensorType, src []byte, dst []float32) error {
	if err := checkBlocks("dequantizing", t, len(dst), len(src)); err != nil {
		return err
	}
	le := binary.LittleEndian
	switch t {
	case TypeF32:
		for i := range dst {
			dst[i] = math.Float32frombits(le.Uint32(src[4*i:]))
		}
	case TypeF16:
		for i := range dst {
			dst[i] = F16ToF32(le.Uint16(src[2*i:]))
		}
	case TypeBF16:
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(le.Uint16(src[2*i:])) << 16)
		}
	default:
		decode, bs, bb := codecs[t].decode, t.BlockSize(), t.BlockBytes()
		for b := 0; b < len(dst)/bs; b++ {
			decode(src[b*bb:(b+1)*bb], dst[b*bs:(b+1)*bs])
		}
	}
	return nil
}

// Quantize converts src to type t, with ggml's block layouts and the rounding
// of its reference quantizers (quantize_row_*_ref). len(src) must be a whole
// number of blocks.
func Quantize(t TensorType, src []float32) ([]byte, error) {
	if err := checkBlocks("quantizing to", t, len(src), -1); err != nil {
		return nil, err
	}
	out := make([]byte, len(src)/t.BlockSize()*t.BlockBytes())
	le := binary.LittleEndian
	switch t {
	case TypeF32:
		for i, x := range src {
			le.PutUint32(out[4*i:], math.Float32bits(x))
		}
	case TypeF16:
		for i, x := range src {
			le.PutUint16(out[2*i:], F32ToF16(x))
		}
	case TypeBF16:
		for i, x := range src {
			le.PutUint16(out[2*i:], F32ToBF16(x))
		}
	default:
		encode, bs, bb := codecs[t].encode, t.BlockSize(), t.BlockBytes()
		for b := 0; b < len(src)/bs; b++ {
			encode(src[b*bs:(b+1)*bs], out[b*bb:(b+1)*bb])
		}
	}
	return out, nil
}

// Legacy block layouts (ggml-common.h), 32 elements each; d and m are halves:
//
//	Q8_0 (34 B): d, 32 int8 q;                        x = q*d
//	Q4_0 (18 B): d, 16 bytes of nibbles;              x = (q-8)*d
//	Q4_1 (20 B): d, m, 16 bytes of nibbles;           x = q*d + m
//	Q5_0 (22 B): d, qh (4 B), 16 bytes of nibbles;    x = (q-16)*d
//	Q5_1 (24 B): d, m, qh (4 B), 16 bytes of nibbles; x = q*d + m
//
// Byte j of the nibbles holds element j in its low half and element j+16 in
// its high half; bit j of the little-endian uint32 qh is element j's fifth bit.
const qk = 32

func half(b []byte) float32 { return F16ToF32(binary.LittleEndian.Uint16(b)) }

func decodeQ8_0(blk []byte, y []float32) {
	d := half(blk)
	for j := 0; j < qk; j++ {
		y[j] = float32(int8(blk[2+j])) * d
	}
}

func decodeQ4_0(blk []byte, y []float32) {
	d := half(blk)
	for j, q := range blk[2:18] {
		y[j] = float32(int(q&0x0f)-8) * d
		y[j+qk/2] = float32(int(q>>4)-8) * d
	}
}

func decodeQ4_1(blk []byte, y []float32) {
	d, m := half(blk), half(blk[2:])
	for j, q := range blk[4:20] {
		y[j] = float32(float32(q&0x0f)*d) + m
		y[j+qk/2] = float32(float32(q>>4)*d) + m
	}
}

// fifthBits returns element j's and element j+16's fifth bit (0 or 16).
func fifthBits(qh uint32, j int) (lo, hi byte) {
	return byte(qh>>j<<4) & 0x10, byte(qh>>(j+12)) & 0x10
}

func decodeQ5_0(blk []byte, y []float32) {
	d, qh := half(blk), binary.LittleEndian.Uint32(blk[2:])
	for j, q := range blk[6:22] {
		h0, h1 := fifthBits(qh, j)
		y[j] = float32(int(q&0x0f|h0)-16) * d
		y[j+qk/2] = float32(int(q>>4|h1)-16) * d
	}
}

func decodeQ5_1(blk []byte, y []float32) {
	d, m, qh := half(blk), half(blk[2:]), binary.LittleEndian.Uint32(blk[4:])
	for j, q := range blk[8:24] {
		h0, h1 := fifthBits(qh, j)
		y[j] = float32(float32(q&0x0f|h0)*d) + m
		y[j+qk/2] = float32(float32(q>>4|h1)*d) + m
	}
}

// encodeQ8_0: d = max|x|/127, q = round(x/d).
func encodeQ8_0(x []float32, blk []byte) {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	d := amax / 127
	id := inverse(d)
	binary.LittleEndian.PutUint16(blk, F32ToF16(d))
	for j, v := range x {
		blk[2+j] = byte(int8(roundf(v * id)))
	}
}

// encodeQ4_0: the element of largest magnitude maps to -8, so d = max/-8
// keeps its sign; q = min(15, trunc(x/d + 8.5)).
func encodeQ4_0(x []float32, blk []byte) {
	d := signedMax(x) / -8
	id := inverse(d)
	binary.LittleEndian.PutUint16(blk, F32ToF16(d))
	q := func(v float32) byte { return byte(min(15, int8(float32(v*id)+8.5))) }
	for j := 0; j < qk/2; j++ {
		blk[2+j] = q(x[j]) | q(x[j+qk/2])<<4
	}
}

// encodeQ5_0: as Q4_0 with 32 levels: d = max/-16, q = min(31, trunc(x/d + 16.5)).
func encodeQ5_0(x []float32, blk []byte) {
	d := signedMax(x) / -16
	id := inverse(d)
	binary.LittleEndian.PutUint16(blk, F32ToF16(d))
	var q [qk]byte
	for j, v := range x {
		q[j] = byte(min(31, int8(float32(v*id)+16.5)))
	}
	packFifthBits(q[:], blk[2:6], blk[6:22])
}

// encodeQ4_1: d = (max-min)/15, m = min, q = min(15, trunc((x-min)/d + 0.5)).
func encodeQ4_1(x []float32, blk []byte) {
	lo, id := putScaleMin(x, 15, blk)
	q := func(v float32) byte { return byte(min(15, int8(float32((v-lo)*id)+0.5))) }
	for j := 0; j < qk/2; j++ {
		blk[4+j] = q(x[j]) | q(x[j+qk/2])<<4
	}
}

// encodeQ5_1: d = (max-min)/31, m = min, q = trunc((x-min)/d + 0.5), which
// ggml does not clamp: (x-min)/d is at most 31 up to rounding.
func encodeQ5_1(x []float32, blk []byte) {
	lo, id := putScaleMin(x, 31, blk)
	var q [qk]byte
	for j, v := range x {
		q[j] = byte(uint8(float32((v-lo)*id) + 0.5))
	}
	packFifthBits(q[:], blk[4:8], blk[8:24])
}

// putScaleMin writes the header of a Q4_1/Q5_1 block, d = (max-min)/levels
// and m = min, and returns min and 1/d.
func putScaleMin(x []float32, levels float32, blk []byte) (lo, id float32) {
	lo, hi := minMax(x)
	d := (hi - lo) / levels
	binary.LittleEndian.PutUint16(blk, F32ToF16(d))
	binary.LittleEndian.PutUint16(blk[2:], F32ToF16(lo))
	return lo, inverse(d)
}

// packFifthBits stores 32 five-bit q: low nibbles in qs (element j low, j+16
// high), fifth bits in the little-endian uint32 qh.
func packFifthBits(q []byte, qh, qs []byte) {
	var h uint32
	for j := 0; j < qk/2; j++ {
		qs[j] = q[j]&0x0f | (q[j+qk/2]&0x0f)<<4
		h |= uint32(q[j]>>4&1)<<j | uint32(q[j+qk/2]>>4&1)<<(j+qk/2)
	}
	binary.LittleEndian.PutUint32(qh, h)
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// roundf rounds half away from zero, as C's roundf.
func roundf(v float32) float32 { return float32(math.Round(float64(v))) }

// inverse is 1/d, or 0 for d == 0 (an all-zero block).
func inverse(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

// signedMax is the element of largest magnitude, sign kept (the first one on a tie).
func signedMax(x []float32) float32 {
	var amax, mx float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	return mx
}

// minMax is the smallest and largest element, as ggml's loop from ±FLT_MAX finds them.
func minMax(x []float32) (lo, hi float32) {
	lo, hi = math.MaxFloat32, -math.MaxFloat32
	for _, v := range x {
		if v < lo {
			lo = v
		}
		if v > hi {
			hi = v
		}
	}
	return lo, hi
}
