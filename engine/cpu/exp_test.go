package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/mod"
)

// expf is within 3e-7 of math.Exp, relative, over float32's normal range
// (a step of 1/64 and the integers' neighbours, where n changes); its
// edges are 0, +Inf and NaN.
func TestExpf(t *testing.T) {
	var worst float64
	check := func(x float32) {
		want := math.Exp(float64(x))
		got := float64(expf(x))
		if x < -87 {
			require.Zero(t, got, "x = %g", x)
			return
		}
		rel := math.Abs(got-want) / want
		worst = math.Max(worst, rel)
		require.LessOrEqual(t, rel, 3e-7, "x = %g", x)
	}
	for x := float32(-90); x <= 88.7; x += 1.0 / 64 {
		check(x)
	}
	for n := -87; n <= 88; n++ {
		for _, d := range []float32{-1e-6, 0, 1e-6} {
			check(float32(n)*float32(math.Ln2) + d)
		}
	}
	t.Logf("largest relative error %.2g", worst)
	assert.Equal(t, float32(1), expf(0))
	assert.True(t, math.IsInf(float64(expf(89)), 1))
	assert.True(t, math.IsNaN(float64(expf(float32(math.NaN())))))
	assert.Zero(t, expf(float32(math.Inf(-1))))
}

// softmax and silu agree with mod's to float32 rounding, and a NaN score
// poisons the whole softmax row as mod's does.
func TestSoftmaxSilu(t *testing.T) {
	x := []float32{-3, 0.5, 2, 7.25, -40, 1e-3}
	want := append([]float32(nil), x...)
	mod.Softmax(want)
	got := append([]float32(nil), x...)
	softmax(got)
	for i := range x {
		assert.InDelta(t, want[i], got[i], 1e-6*math.Max(1, float64(want[i])), "softmax %d", i)
		assert.InDelta(t, mod.SiLU(x[i]), silu(x[i]), 1e-6*math.Max(1, math.Abs(float64(x[i]))), "silu %g", x[i])
	}
	nan := []float32{1, float32(math.NaN()), 2}
	softmax(nan)
	for _, v := range nan {
		assert.True(t, math.IsNaN(float64(v)))
	}
}

// expSumSIMD (AVX2 in blocks of 8, expf for the tail) against expf on
// every element and a float64 sum, for lengths around the blocks of 8,
// with values past -87 and -Inf (0) beside ordinary ones; and softmax on
// every path against mod's over long rows, where a +Inf or a NaN makes
// the row NaN.
func TestExpSum(t *testing.T) {
	g := rand.New(rand.NewPCG(21, 22))
	kernelPaths(t, func(t *testing.T) {
		for _, n := range []int{1, 7, 8, 9, 16, 31, 100} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(g.Float64()*100 - 95)
			}
			x[g.IntN(n)] = float32(math.Inf(-1))
			mx := float32(5)
			got := slices.Clone(x)
			sum := expSumSIMD(got, mx)
			var want float64
			for i, v := range x {
				e := expf(v - mx)
				want += float64(e)
				assert.InDelta(t, e, got[i], 4e-7*float64(e)+1e-45, "n=%d e^(%g)", n, v-mx)
			}
			assert.InDelta(t, want, float64(sum), 1e-6*want, "n=%d sum", n)

			row := make([]float32, n)
			for i := range row {
				row[i] = float32(g.NormFloat64() * 8)
			}
			row[g.IntN(n)] = float32(math.Inf(-1))
			wantRow := slices.Clone(row)
			mod.Softmax(wantRow)
			softmax(row)
			for i := range row {
				assert.InDelta(t, wantRow[i], row[i], 1e-6*math.Max(1e-3, float64(wantRow[i])), "n=%d softmax %d", n, i)
			}
			for _, bad := range []float32{float32(math.Inf(1)), float32(math.NaN())} {
				row := make([]float32, n)
				row[n-1] = bad
				softmax(row)
				for i, v := range row {
					assert.True(t, math.IsNaN(float64(v)), "n=%d softmax with %g: element %d is %g", n, bad, i, v)
				}
			}
		}
	})
}

// swiglu on every path against silu(g)·up, for lengths around the blocks
// of 8 and gates from -100 to 100 (past both ends of expf's range), and a
// NaN gate stays NaN.
func TestSwiglu(t *testing.T) {
	g := rand.New(rand.NewPCG(23, 24))
	kernelPaths(t, func(t *testing.T) {
		for _, n := range []int{1, 7, 8, 9, 33} {
			gate, up := make([]float32, n), make([]float32, n)
			for i := range gate {
				gate[i], up[i] = float32(g.Float64()*200-100), float32(g.NormFloat64())
			}
			gate[0] = -95
			gate[n-1] = float32(math.NaN())
			got := slices.Clone(gate)
			swiglu(got, up)
			for i, v := range gate[:n-1] {
				want := silu(v) * up[i]
				assert.InDelta(t, want, got[i], 1e-6*math.Abs(float64(want))+1e-30, "n=%d silu(%g)·%g", n, v, up[i])
			}
			assert.True(t, math.IsNaN(float64(got[n-1])), "n=%d: a NaN gate gives %g", n, got[n-1])
		}
	})
}
