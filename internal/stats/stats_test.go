package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// LogSumExp against the formula in float64 where it does not overflow, and
// a NaN or +Inf among the logits makes the result NaN, as before its max
// pass stopped calling math.Max.
func TestLogSumExp(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 7, 32000} {
		x := make([]float32, n)
		direct := 0.0
		for i := range x {
			x[i] = float32(r.NormFloat64() * 5)
			direct += math.Exp(float64(x[i]))
		}
		if got, want := LogSumExp(x), math.Log(direct); math.Abs(got-want) > 1e-12*math.Max(1, math.Abs(want)) {
			t.Errorf("n %d: %v, want %v", n, got, want)
		}
		big := append([]float32(nil), x...)
		big[n/2] = 1000 // exp(1000) overflows: the shift by the max does not
		if got := LogSumExp(big); math.Abs(got-1000) > 1e-9 {
			t.Errorf("n %d with 1000: %v, want 1000", n, got)
		}
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
			y := append([]float32(nil), x...)
			y[n-1] = bad
			if got := LogSumExp(y); !math.IsNaN(got) {
				t.Errorf("n %d with %v: %v, want NaN", n, bad, got)
			}
		}
	}
}
