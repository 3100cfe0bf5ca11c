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
