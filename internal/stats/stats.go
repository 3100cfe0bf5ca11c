// Package stats holds the arithmetic that engine's scoring and sampling and
// bench's measurements (validation against the CPU reference, perplexity
// --compare) both do: a logit vector's log-sum-exp and argmax, and a
// sample's mean with the standard error of that mean, and a generator's
// numbers ahead (Ahead). One copy, so that a
// figure bench reports is computed as engine computes it.
package stats

import (
	"math"
	"math/rand/v2"
)

// LogSumExp is log Σ exp(x_i), computed stably in float64.
func LogSumExp(x []float32) float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		// Not math.Max (its NaN and ±0 cases made this pass a third of the
		// call): a NaN is skipped here and makes the sum NaN below.
		if float64(v) > mx {
			mx = float64(v)
		}
	}
	var sum float64
	for _, v := range x {
		sum += math.Exp(float64(v) - mx)
	}
	return mx + math.Log(sum)
}

// Argmax is the index of x's largest element, the lowest of a tie.
func Argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// Moments accumulates a sample's mean and the standard error of that mean.
type Moments struct {
	N          int
	Sum, SumSq float64
}

func (m *Moments) Add(x float64) { m.N++; m.Sum += x; m.SumSq += x * x }
func (m *Moments) Mean() float64 { return m.Sum / float64(max(m.N, 1)) }

// Stderr is sqrt(variance / (n-1)), 0 for fewer than 2 values.
func (m *Moments) Stderr() float64 {
	if m.N < 2 {
		return 0
	}
	mean := m.Mean()
	return math.Sqrt(math.Max(m.SumSq/float64(m.N)-mean*mean, 0) / float64(m.N-1))
}

// Ahead is the next n numbers rand.New(src).Float64 will give, without
// taking them (a copy of src's state draws them): the uniform numbers a
// sampler hands out next (engine.Sampler.Peek).
func Ahead(src *rand.PCG, n int) []float64 {
	c := *src
	r := rand.New(&c)
	out := make([]float64, n)
	for i := range out {
		out[i] = r.Float64()
	}
	return out
}
