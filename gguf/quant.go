package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Block layouts (ggml-common.h):
//
//	Q8_0: 32 elements = f16 scale d, then 32 int8 q;   x = d*q
//	Q4_0: 32 elements = f16 scale d, then 16 bytes;    x = d*(nibble-8),
//	      byte j holds element j in its low nibble and element j+16 in its high.
const qk = 32 // elements per Q8_0 / Q4_0 block

// Dequantize converts src, the bytes of len(dst) elements of type t, to float32.
func Dequantize(t TensorType, src []byte, dst []float32) error {
	if !t.Known() {
		return fmt.Errorf("unknown tensor type %d", uint32(t))
	}
	n := len(dst)
	if n%t.BlockSize() != 0 {
		return fmt.Errorf("%d elements is not a whole number of %s blocks", n, t)
	}
	if want := n / t.BlockSize() * t.BlockBytes(); len(src) != want {
		return fmt.Errorf("%d %s elements need %d bytes, got %d", n, t, want, len(src))
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
	case TypeQ8_0:
		for b := 0; b < n/qk; b++ {
			blk := src[b*34 : b*34+34]
			d := F16ToF32(le.Uint16(blk))
			for j := 0; j < qk; j++ {
				dst[b*qk+j] = d * float32(int8(blk[2+j]))
			}
		}
	case TypeQ4_0:
		for b := 0; b < n/qk; b++ {
			blk := src[b*18 : b*18+18]
			d := F16ToF32(le.Uint16(blk))
			for j := 0; j < qk/2; j++ {
				dst[b*qk+j] = d * float32(int(blk[2+j]&0x0f)-8)
				dst[b*qk+j+qk/2] = d * float32(int(blk[2+j]>>4)-8)
			}
		}
	default:
		return fmt.Errorf("dequantizing %s is not supported (F32, F16, BF16, Q8_0, Q4_0 are)", t)
	}
	return nil
}

// Quantize converts src to type t (F32, F16, BF16, Q8_0 or Q4_0), rounding as
// ggml's reference quantizers do. len(src) must be a whole number of blocks.
func Quantize(t TensorType, src []float32) ([]byte, error) {
	if !t.Known() {
		return nil, fmt.Errorf("unknown tensor type %d", uint32(t))
	}
	n := len(src)
	if n%t.BlockSize() != 0 {
		return nil, fmt.Errorf("%d elements is not a whole number of %s blocks", n, t)
	}
	out := make([]byte, n/t.BlockSize()*t.BlockBytes())
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
	case TypeQ8_0:
		for b := 0; b < n/qk; b++ {
			quantizeQ8_0(src[b*qk:(b+1)*qk], out[b*34:(b+1)*34])
		}
	case TypeQ4_0:
		for b := 0; b < n/qk; b++ {
			quantizeQ4_0(src[b*qk:(b+1)*qk], out[b*18:(b+1)*18])
		}
	default:
		return nil, fmt.Errorf("quantizing to %s is not supported (F32, F16, BF16, Q8_0, Q4_0 are)", t)
	}
	return out, nil
}

// quantizeQ8_0: d = max|x|/127, q = round(x/d).
func quantizeQ8_0(x []float32, blk []byte) {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	id := float32(0)
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(blk, F32ToF16(d))
	for j, v := range x {
		blk[2+j] = byte(int8(math.Round(float64(v * id)))) // roundf: halves away from zero
	}
}

// quantizeQ4_0: the element of largest magnitude maps to -8, so d = max/-8
// keeps its sign; q = clamp(x/d + 8.5, 0, 15) truncated.
func quantizeQ4_0(x []float32, blk []byte) {
	var amax, mx float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, mx = a, v
		}
	}
	d := mx / -8
	id := float32(0)
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(blk, F32ToF16(d))
	q := func(v float32) byte { return byte(min(15, int8(v*id+8.5))) }
	for j := 0; j < qk/2; j++ {
		blk[2+j] = q(x[j]) | q(x[j+qk/2])<<4
	}
}

// F16ToF32 converts an IEEE 754 half-precision value to float32 exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0: // signed zero
		return math.Float32frombits(sign)
	}
	// Subnormal half: mant * 2^-24, exact in float32.
	f := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}

// F32ToF16 converts a float32 to half precision, rounding to nearest even,
// with overflow to infinity and NaN kept a (quiet) NaN.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // rebias
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal or zero in half: shift the full significand (with its
		// implicit 1) right, rounding to nearest even.
		if e < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := m >> shift
		rem := m & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, up to infinity: that is correct rounding
	}
	return sign | uint16(r)
}

// F32ToBF16 converts a float32 to bfloat16, rounding to nearest even.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}
