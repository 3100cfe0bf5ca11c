package gguf

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestF16ToF32KnownValues(t *testing.T) {
	cases := map[uint16]float32{
		0x0000: 0, 0x3c00: 1, 0xc000: -2, 0x3800: 0.5, 0x7bff: 65504,
		0x0001: 1.0 / (1 << 24), 0x03ff: 1023.0 / (1 << 24), 0x0400: 1.0 / (1 << 14),
		0x7c00: float32(math.Inf(1)), 0xfc00: float32(math.Inf(-1)),
	}
	for h, want := range cases {
		assert.Equal(t, want, F16ToF32(h), "half 0x%04x", h)
	}
	assert.True(t, math.Signbit(float64(F16ToF32(0x8000))), "negative zero keeps its sign")
	assert.True(t, math.IsNaN(float64(F16ToF32(0x7e00))))
}

func TestF32ToF16RoundTripsEveryHalf(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		if math.IsNaN(float64(f)) {
			assert.True(t, math.IsNaN(float64(F16ToF32(F32ToF16(f)))), "NaN 0x%04x stays NaN", h)
			continue
		}
		require.Equal(t, uint16(h), F32ToF16(f), "half 0x%04x (%g)", h, f)
	}
}

func TestF32ToF16RoundsToNearestEven(t *testing.T) {
	ulp := float32(1.0 / 1024) // spacing of halves in [1, 2)
	assert.Equal(t, uint16(0x3c00), F32ToF16(1+ulp/2), "a tie rounds to the even 1.0")
	assert.Equal(t, uint16(0x3c02), F32ToF16(1+3*ulp/2), "a tie rounds to the even 1+2ulp")
	assert.Equal(t, uint16(0x3c01), F32ToF16(1+ulp/2+ulp/64), "above the tie rounds up")
	assert.Equal(t, uint16(0x7c00), F32ToF16(65520), "past the largest half is infinity")
	assert.Equal(t, uint16(0x7bff), F32ToF16(65519))
	assert.Equal(t, uint16(0x0000), F32ToF16(1.0/(1<<25)), "half the smallest subnormal ties to zero")
	assert.Equal(t, uint16(0x0001), F32ToF16(1.5/(1<<25)))
	assert.Equal(t, uint16(0x8000), F32ToF16(-1e-30))
}

func TestBF16(t *testing.T) {
	assert.Equal(t, uint16(0x3f80), F32ToBF16(1))
	assert.Equal(t, uint16(0xc040), F32ToBF16(-3))
	assert.Equal(t, uint16(0x3f80), F32ToBF16(math.Float32frombits(0x3f808000)), "a tie rounds to even")
	assert.Equal(t, uint16(0x3f82), F32ToBF16(math.Float32frombits(0x3f818000)), "a tie rounds to even")
	dst := make([]float32, 2)
	require.NoError(t, Dequantize(TypeBF16, []byte{0x80, 0x3f, 0x40, 0xc0}, dst))
	assert.Equal(t, []float32{1, -3}, dst)
}

// TestDequantizeHandBuiltBlocks checks the block layouts against bytes written
// out by hand from ggml's block_q8_0 and block_q4_0 definitions.
func TestDequantizeHandBuiltBlocks(t *testing.T) {
	q8 := make([]byte, 34)
	binary.LittleEndian.PutUint16(q8, 0x3800) // d = 0.5
	for j := 0; j < 32; j++ {
		q8[2+j] = byte(int8(j*8 - 128)) // -128, -120, ..., 120
	}
	got := make([]float32, 32)
	require.NoError(t, Dequantize(TypeQ8_0, q8, got))
	for j := range got {
		assert.Equal(t, 0.5*float32(j*8-128), got[j], "Q8_0 element %d", j)
	}

	q4 := make([]byte, 18)
	binary.LittleEndian.PutUint16(q4, 0xc000) // d = -2
	for j := 0; j < 16; j++ {
		q4[2+j] = byte(j) | byte(15-j)<<4 // low nibble: element j; high nibble: element j+16
	}
	require.NoError(t, Dequantize(TypeQ4_0, q4, got))
	for j := 0; j < 16; j++ {
		assert.Equal(t, -2*float32(j-8), got[j], "Q4_0 element %d (low nibble)", j)
		assert.Equal(t, -2*float32(15-j-8), got[j+16], "Q4_0 element %d (high nibble)", j+16)
	}

	f16 := []byte{0x00, 0x3c, 0x00, 0xc0}
	require.NoError(t, Dequantize(TypeF16, f16, got[:2]))
	assert.Equal(t, []float32{1, -2}, got[:2])
}

func TestQuantizeMatchesGGMLRounding(t *testing.T) {
	// Q8_0: d = 127/127 = 1, so q = round(x) with halves away from zero (roundf).
	x := make([]float32, 32)
	x[0], x[1], x[2], x[3] = 127, 2.5, -2.5, 0.49
	b, err := Quantize(TypeQ8_0, x)
	require.NoError(t, err)
	assert.Equal(t, uint16(0x3c00), binary.LittleEndian.Uint16(b))
	assert.Equal(t, []int8{127, 3, -3, 0}, []int8{int8(b[2]), int8(b[3]), int8(b[4]), int8(b[5])})

	// Q4_0: the largest magnitude (-16) fixes d = -16/-8 = 2; 14 clamps to nibble 15.
	x = make([]float32, 32)
	x[0], x[1], x[16] = -16, 14, 3
	b, err = Quantize(TypeQ4_0, x)
	require.NoError(t, err)
	assert.Equal(t, uint16(0x4000), binary.LittleEndian.Uint16(b))
	assert.Equal(t, byte(0), b[2]&0x0f, "-16/2+8.5 = 0.5 -> 0")
	assert.Equal(t, byte(15), b[3]&0x0f, "14/2+8.5 = 15.5 -> clamped to 15")
	assert.Equal(t, byte(10), b[2]>>4, "3/2+8.5 = 10 -> 10 (element 16 in the high nibble of byte 0)")

	zero, err := Quantize(TypeQ4_0, make([]float32, 32))
	require.NoError(t, err)
	back := make([]float32, 32)
	require.NoError(t, Dequantize(TypeQ4_0, zero, back))
	assert.Equal(t, make([]float32, 32), back, "an all-zero block stays zero")
}

func TestDequantizeRefusesBadInput(t *testing.T) {
	dst := make([]float32, 32)
	assert.ErrorContains(t, Dequantize(TypeQ8_0, make([]byte, 33), dst), "need 34 bytes, got 33")
	assert.ErrorContains(t, Dequantize(TypeQ8_0, make([]byte, 34), dst[:31]), "not a whole number")
	assert.ErrorContains(t, Dequantize(TensorType(16), make([]byte, 66), make([]float32, 256)), "dequantizing IQ2_XXS is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K are)")
	assert.ErrorContains(t, Dequantize(TypeQ4_K, make([]byte, 144), dst), "not a whole number of Q4_K blocks of 256")
	assert.ErrorContains(t, Dequantize(TypeQ6_K, make([]byte, 209), make([]float32, 256)), "need 210 bytes, got 209")
	assert.ErrorContains(t, Dequantize(TensorType(99), nil, nil), "unknown tensor type 99")
	_, err := Quantize(TypeQ4_0, make([]float32, 33))
	assert.ErrorContains(t, err, "not a whole number")
}
