package gguf

import (
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomBlocks returns n values: normal ones, with every 7th block scaled by
// 1000 or 1/1000 and one block all equal, so the scales span a wide range.
func randomBlocks(seed int64, n, blockSize int) []float32 {
	r := rand.New(rand.NewSource(seed))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	for b := 0; b < n/blockSize; b += 7 {
		scale := float32(1000)
		if b%2 == 1 {
			scale = 1e-3
		}
		for i := b * blockSize; i < (b+1)*blockSize; i++ {
			x[i] *= scale
		}
	}
	if n/blockSize > 3 {
		for i := 3 * blockSize; i < 4*blockSize; i++ {
			x[i] = 0.25
		}
	}
	return x
}

// legacyBound is the largest error a 32-element block may show: half a step
// of the block's scale, a whole step where ggml clamps the level opposite the
// largest magnitude (Q4_0, Q5_0: max/-8 maps the max to -8, and -max would be
// +8, one past the top level 7), plus the half-precision rounding of d (and m)
// carried over every level.
func legacyBound(t TensorType, x []float32) float64 {
	lo, hi := minMax(x)
	amax := math.Max(math.Abs(float64(lo)), math.Abs(float64(hi)))
	const f16 = 1.0 / 1024 // relative rounding of a half, with a factor 2 to spare
	switch t {
	case TypeQ8_0:
		return amax/127*0.5 + amax*f16
	case TypeQ4_0:
		return amax/8 + amax*f16
	case TypeQ5_0:
		return amax/16 + amax*f16
	case TypeQ4_1, TypeQ5_1:
		levels := 15.0
		if t == TypeQ5_1 {
			levels = 31
		}
		d := float64(hi-lo) / levels
		return d*0.5 + float64(hi-lo)*f16 + math.Abs(float64(lo))*f16
	}
	panic(t)
}

func TestQuantizeLegacyRoundTrip(t *testing.T) {
	for _, typ := range []TensorType{TypeQ8_0, TypeQ4_0, TypeQ4_1, TypeQ5_0, TypeQ5_1} {
		t.Run(typ.String(), func(t *testing.T) {
			x := randomBlocks(int64(typ), 32*64, 32)
			b, err := Quantize(typ, x)
			require.NoError(t, err)
			require.Len(t, b, 64*typ.BlockBytes())
			y := make([]float32, len(x))
			require.NoError(t, Dequantize(typ, b, y))
			for blk := 0; blk < 64; blk++ {
				xs, ys := x[blk*32:(blk+1)*32], y[blk*32:(blk+1)*32]
				bound := legacyBound(typ, xs)
				for j := range xs {
					if err := math.Abs(float64(xs[j] - ys[j])); err > bound {
						t.Fatalf("block %d element %d: %g came back %g (error %g > bound %g)", blk, j, xs[j], ys[j], err, bound)
					}
				}
			}
			// Values already on the grid (what came back) are quantized again
			// to the same values: requantizing loses nothing more.
			b2, err := Quantize(typ, y)
			require.NoError(t, err)
			y2 := make([]float32, len(y))
			require.NoError(t, Dequantize(typ, b2, y2))
			maxDiff := 0.0
			for i := range y {
				maxDiff = math.Max(maxDiff, math.Abs(float64(y[i]-y2[i]))/math.Max(1e-30, float64(legacyBound(typ, y[i/32*32:i/32*32+32]))))
			}
			assert.Less(t, maxDiff, 0.05, "requantized values moved by more than 5%% of the bound")
		})
	}
}

// gaussianRMSE is the error of the best uniform quantizer of a unit normal
// with 2^bits levels (Max, 1960; one scale for all values). A K-quant adapts
// its scale every 16 or 32 values, so it must do at least this well.
var gaussianRMSE = map[TensorType]float64{
	TypeQ2_K: 0.345, // 2 bits
	TypeQ3_K: 0.193, // 3 bits
	TypeQ4_K: 0.107, // 4 bits
	TypeQ5_K: 0.059, // 5 bits
	TypeQ6_K: 0.032, // 6 bits
}

func TestQuantizeKRoundTrip(t *testing.T) {
	for _, typ := range []TensorType{TypeQ2_K, TypeQ3_K, TypeQ4_K, TypeQ5_K, TypeQ6_K} {
		t.Run(typ.String(), func(t *testing.T) {
			r := rand.New(rand.NewSource(int64(typ)))
			x := make([]float32, 256*64)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			b, err := Quantize(typ, x)
			require.NoError(t, err)
			require.Len(t, b, 64*typ.BlockBytes())
			y := make([]float32, len(x))
			require.NoError(t, Dequantize(typ, b, y))
			var se float64
			for i := range x {
				se += float64(x[i]-y[i]) * float64(x[i]-y[i])
			}
			rmse := math.Sqrt(se / float64(len(x)))
			assert.Less(t, rmse, gaussianRMSE[typ], "RMS error on unit normals")

			// Doubling the input doubles every step of the computation exactly
			// (powers of two commute with rounding), so the values come back doubled.
			x2 := make([]float32, len(x))
			for i := range x {
				x2[i] = 2 * x[i]
			}
			b2, err := Quantize(typ, x2)
			require.NoError(t, err)
			y2 := make([]float32, len(x))
			require.NoError(t, Dequantize(typ, b2, y2))
			for i := range y {
				require.Equal(t, 2*y[i], y2[i], "element %d: doubled input", i)
			}

			zero, err := Quantize(typ, make([]float32, 256))
			require.NoError(t, err)
			back := make([]float32, 256)
			require.NoError(t, Dequantize(typ, zero, back))
			for i, v := range back {
				require.Zero(t, v, "element %d of an all-zero block", i)
			}

			// Requantizing what came back moves it less than the first
			// quantization moved x: those values lie on a grid the search can
			// find again. (Not always exactly: Q3_K's and Q5_K's searches
			// settle on a neighbouring grid for some blocks.)
			b3, err := Quantize(typ, y)
			require.NoError(t, err)
			y3 := make([]float32, len(x))
			require.NoError(t, Dequantize(typ, b3, y3))
			var se3 float64
			for i := range y {
				se3 += float64(y[i]-y3[i]) * float64(y[i]-y3[i])
			}
			assert.Less(t, math.Sqrt(se3/float64(len(y))), rmse/2, "RMS change on requantizing")
		})
	}
}
