package engine

import (
	"cmp"
	"math"
	"slices"

	"github.com/modrun/modrun/internal/stats"
)

// TokenLogProb is one token's log-probability (natural log) under the
// model: the log-softmax of the raw logits, before the sampler's penalty,
// truncation and temperature (what OpenAI's logprobs report).
type TokenLogProb struct {
	ID      int32
	LogProb float32
}

// LogProbs is the log-probability of token id under logits [nVocab], and
// the top most likely tokens (most likely first, ties to the lower id).
func LogProbs(logits []float32, id int32, top int) (float32, []TokenLogProb) {
	norm := float32(stats.LogSumExp(logits)) // log p(i) = logits[i] - log Σ exp(logits)
	lp := float32(math.Inf(-1))
	if id >= 0 && int(id) < len(logits) {
		lp = logits[id] - norm
	}
	top = min(top, len(logits))
	if top <= 0 {
		return lp, nil
	}
	best := make([]TokenLogProb, 0, top+1)
	for i, v := range logits {
		if len(best) == top && v <= best[top-1].LogProb {
			continue // not above the current last (a tie keeps the lower id)
		}
		at, _ := slices.BinarySearchFunc(best, v, func(t TokenLogProb, v float32) int { return cmp.Compare(v, t.LogProb) })
		for at < len(best) && best[at].LogProb == v {
			at++ // after equal logits: the lower id stays first
		}
		best = slices.Insert(best, at, TokenLogProb{ID: int32(i), LogProb: v})
		if len(best) > top {
			best = best[:top]
		}
	}
	for i := range best {
		best[i].LogProb -= norm
	}
	return lp, best
}
