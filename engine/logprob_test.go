package engine

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLogProbs(t *testing.T) {
	logits := []float32{1, 3, 2, 3, -1} // [nVocab]
	var z float64
	for _, v := range logits {
		z += math.Exp(float64(v))
	}
	want := func(i int) float32 { return float32(float64(logits[i]) - math.Log(z)) }
	lp, top := LogProbs(logits, 2, 3)
	// float32 logits and a float64 sum: 1e-6 is a few ulps at these magnitudes.
	assert.InDelta(t, want(2), lp, 1e-6)
	require.Len(t, top, 3)
	// Most likely first; the tie between ids 1 and 3 keeps the lower id first.
	assert.Equal(t, []int32{1, 3, 2}, []int32{top[0].ID, top[1].ID, top[2].ID})
	for _, tl := range top {
		assert.InDelta(t, want(int(tl.ID)), tl.LogProb, 1e-6)
	}
	_, none := LogProbs(logits, 0, 0)
	assert.Nil(t, none)
	_, all := LogProbs(logits, 0, 99)
	assert.Len(t, all, len(logits), "top is capped at the vocabulary")
	lp, _ = LogProbs(logits, 7, 0)
	assert.True(t, math.IsInf(float64(lp), -1), "an id outside the vocabulary has probability 0")
}

// A large logit does not overflow the normaliser.
func TestLogProbsStable(t *testing.T) {
	lp, _ := LogProbs([]float32{1000, 0}, 0, 0)
	assert.InDelta(t, 0, lp, 1e-6)
}
