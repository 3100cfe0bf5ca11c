// Package drawref is the reference of a draw at a temperature, for the
// tests of the kernels and runners that draw on a device (argmax_wide's
// draw, docs/sampling-cost.md) and for its self-check at device open: engine.Sampler's draw without filters in
// float64, with how far the draw is from the ends of its token's
// interval, so that a test asks a float32 device only for draws that
// rounding cannot move.
package drawref

import (
	"cmp"
	"math"
	"slices"
)

// Draw is the token a draw at temperature temp with the uniform number u
// takes from logits (all finite), as engine.Sampler's drawAll defines it,
// in float64: with M the largest logit and w_j = exp((l_j - M) / temp),
// the first j whose running sum of weights passes u*z, z their total; the
// last id when none does. margin is the distance of u*z from the nearer
// end of j's interval, a fraction of z; an end a device has exactly does
// not count: 0 before the first id, and past the last (a u*z rounding
// leaves past the total gives the last id too). A draw past the total has
// margin 0.
func Draw(logits []float32, temp float32, u float64) (id int, margin float64) {
	return DrawMinP(logits, temp, 0, u)
}

// DrawMinP is Draw among the tokens at least minP times as likely as the
// best (engine.Sampler's min-p: l_j - M >= ln(minP), in float64; minP 0:
// all), the others weighing 0; none passing gives the last kept id. A
// token within minPEdge of the floor (a float32 device's l_j - M may fall
// either side of it) makes the draw's margin 0.
func DrawMinP(logits []float32, temp, minP float32, u float64) (id int, margin float64) {
	return DrawFiltered(logits, temp, 1, minP, u)
}

// DrawFiltered is DrawMinP after top-p topP (in (0, 1); else none): the
// tokens at or above t, the largest logit whose tokens and those above it
// hold topP of the probability at temperature 1 or more (engine.Sampler's
// top-p, every token equal to its crossing kept). Where topP times the
// total lies within topPEdge of the mass above t or of that with t's
// tokens (a float32 device may cross at the next logit), the margin is 0.
func DrawFiltered(logits []float32, temp, topP, minP float32, u float64) (id int, margin float64) {
	return DrawTopK(logits, temp, 0, topP, minP, u)
}

// DrawTopK is DrawFiltered after top-k topK (in [1, len(logits)); else
// none): the topK largest logits, the lower ids first among equal ones
// (engine.Sampler's heap), top-p's probabilities then being those of the
// kept tokens. Top-k's cut is exact (a count), so it takes no margin:
// a caller whose device computes other logits asks TopKMargin too.
func DrawTopK(logits []float32, temp float32, topK int, topP, minP float32, u float64) (id int, margin float64) {
	w, z, pMargin := weightsTopK(logits, temp, topK, topP, minP)
	if pMargin < topPEdge {
		margin = -1
	}
	if minP > 0 {
		m, fl := maxOf(logits), math.Log(float64(minP))
		for _, v := range logits {
			if math.Abs(float64(v)-m-fl) < minPEdge*max(1, math.Abs(m)) {
				margin = -1
			}
		}
	}
	first, last := -1, -1
	for j, x := range w {
		if x > 0 {
			if first < 0 {
				first = j
			}
			last = j
		}
	}
	target, cum := u*z, 0.0
	for j, x := range w {
		if x > 0 && target < cum+x {
			lo, hi := target-cum, cum+x-target
			if j == first {
				lo = math.Inf(1)
			}
			if j == last {
				hi = math.Inf(1)
			}
			if margin < 0 {
				return j, 0
			}
			return j, min(lo, hi) / z
		}
		cum += x
	}
	return last, 0
}

// minPEdge is how near the min-p floor, relative to the largest logit
// (at least 1), a logit makes a draw unaskable: float32's rounding of
// l - M and of ln(MinP).
const minPEdge = 1e-5

func maxOf(logits []float32) float64 {
	m := math.Inf(-1)
	for _, v := range logits {
		m = max(m, float64(v))
	}
	return m
}

// Weights are the draw's weights exp((l_j - M) / temp) and their total.
func Weights(logits []float32, temp float32) ([]float64, float64) {
	return WeightsMinP(logits, temp, 0)
}

// WeightsMinP are Weights with min-p: 0 for the tokens below the floor.
func WeightsMinP(logits []float32, temp, minP float32) ([]float64, float64) {
	return WeightsFiltered(logits, temp, 1, minP)
}

// topPEdge is how near the crossing's ends, a fraction of the total, top-p's
// target makes a draw unaskable: float32 sums over 100,000 weights.
const topPEdge = 1e-5

// TopPMargin is how far top-p's target lies from either end of its cut's
// tokens' mass (the mass above the cut, and with the cut's tokens), a
// fraction of the total at temperature 1: what a device's rounding of the
// weights must stay under for its cut to be the same.
func TopPMargin(logits []float32, topP float32) float64 {
	return TopPMarginTopK(logits, 0, topP)
}

// TopPMarginTopK is TopPMargin among top-k topK's tokens.
func TopPMarginTopK(logits []float32, topK int, topP float32) float64 {
	_, margin := topPCutIn(logits, topKSet(logits, topK), topP)
	return margin
}

// TopKMargin is how far apart the topK-th largest logit and the next are
// (0 where they are equal): what a device's rounding of the logits must
// stay under for its top-k to keep the same tokens. topK outside [1,
// len(logits)) keeps them all: +Inf.
func TopKMargin(logits []float32, topK int) float64 {
	if topK <= 0 || topK >= len(logits) {
		return math.Inf(1)
	}
	vals := slices.Clone(logits)
	slices.SortFunc(vals, func(a, b float32) int { return cmp.Compare(b, a) })
	return float64(vals[topK-1]) - float64(vals[topK])
}

// topKSet marks top-k topK's tokens: the topK largest logits, the lower
// ids first among equal ones; nil (every token) where topK is outside
// [1, len(logits)).
func topKSet(logits []float32, topK int) []bool {
	if topK <= 0 || topK >= len(logits) {
		return nil
	}
	ids := make([]int, len(logits))
	for i := range ids {
		ids[i] = i
	}
	slices.SortStableFunc(ids, func(a, b int) int { return cmp.Compare(logits[b], logits[a]) })
	in := make([]bool, len(logits))
	for _, id := range ids[:topK] {
		in[id] = true
	}
	return in
}

// topPCutIn is top-p's cut (DrawTopK) among the tokens in marks (nil: all)
// and TopPMargin: the largest logit whose tokens in the set and those
// above it hold topP of the set's probability at temperature 1 or more.
func topPCutIn(logits []float32, in []bool, topP float32) (cut float32, margin float64) {
	m := maxOf(logits)
	vals := make([]float64, 0, len(logits))
	z := 0.0
	for i, v := range logits {
		if in == nil || in[i] {
			vals = append(vals, float64(v))
			z += math.Exp(float64(v) - m)
		}
	}
	slices.SortFunc(vals, func(a, b float64) int { return cmp.Compare(b, a) })
	target, above := float64(topP)*z, 0.0
	for i := 0; i < len(vals); {
		j, mass := i, 0.0
		for ; j < len(vals) && vals[j] == vals[i]; j++ {
			mass += math.Exp(vals[j] - m)
		}
		if above+mass >= target || j == len(vals) {
			return float32(vals[i]), min(target-above, above+mass-target) / z
		}
		above += mass
		i = j
	}
	return float32(m), 0
}

// WeightsFiltered are Weights after top-p topP (in (0, 1); else none) and
// min-p minP (above 0; else none): 0 for the tokens they drop.
func WeightsFiltered(logits []float32, temp, topP, minP float32) ([]float64, float64) {
	return WeightsTopK(logits, temp, 0, topP, minP)
}

// WeightsTopK are WeightsFiltered after top-k topK (DrawTopK): 0 for the
// tokens past its topK too.
func WeightsTopK(logits []float32, temp float32, topK int, topP, minP float32) ([]float64, float64) {
	w, z, _ := weightsTopK(logits, temp, topK, topP, minP)
	return w, z
}

// weightsTopK is WeightsTopK and top-p's margin among top-k's tokens
// (TopPMarginTopK; +Inf without top-p), the set and the cut made once.
func weightsTopK(logits []float32, temp float32, topK int, topP, minP float32) (w []float64, z, pMargin float64) {
	in := topKSet(logits, topK)
	m := maxOf(logits)
	fl := math.Inf(-1)
	if minP > 0 {
		fl = math.Log(float64(minP))
	}
	cut := float32(math.Inf(-1))
	pMargin = math.Inf(1)
	if topP > 0 && topP < 1 {
		cut, pMargin = topPCutIn(logits, in, topP)
	}
	inv := 1 / float64(temp)
	w = make([]float64, len(logits))
	for j, v := range logits {
		if float64(v)-m >= fl && v >= cut && (in == nil || in[j]) {
			w[j] = math.Exp((float64(v) - m) * inv)
			z += w[j]
		}
	}
	return w, z, pMargin
}

// Middle is the uniform number that draws token j at the middle of its
// interval, for the weights w and total z of Weights.
func Middle(w []float64, z float64, j int) float64 {
	cum := 0.0
	for _, x := range w[:j] {
		cum += x
	}
	return (cum + w[j]/2) / z
}
