package engine

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/grammar"
)

// digitsVocab: tokens "0".."9", "a", "b", "12", "1a", an end token (14).
func digitsVocab(t *testing.T) *grammar.Vocab {
	var tokens [][]byte
	for c := '0'; c <= '9'; c++ {
		tokens = append(tokens, []byte{byte(c)})
	}
	tokens = append(tokens, []byte("a"), []byte("b"), []byte("12"), []byte("1a"), nil)
	v, err := grammar.NewVocab(tokens, []int32{14})
	require.NoError(t, err)
	return v
}

// TestSamplerConstrained: under a grammar, every option set draws only
// allowed tokens, the same seed draws the same ones, greedy draws the
// allowed tokens' argmax, and the end comes only where the grammar ends.
func TestSamplerConstrained(t *testing.T) {
	g, err := grammar.Parse(`root ::= [0-9]{2,5} "a"`)
	require.NoError(t, err)
	v := digitsVocab(t)
	opts := []SamplerOptions{
		DefaultSampler(),
		{Temperature: 1, TopP: 1, RepeatPenalty: 1},
		{Temperature: 0.7, TopK: 3, TopP: 0.9, MinP: 0.05, RepeatPenalty: 1.3, RepeatLastN: 8},
		{Temperature: 2, TopK: 1, TopP: 1, RepeatPenalty: 1},
	}
	for oi, o := range opts {
		for seed := uint64(0); seed < 40; seed++ {
			o.Seed = seed
			run := func() []int32 {
				s, err := NewSampler(o)
				require.NoError(t, err)
				check := grammar.NewMatcher(g, v) // the independent judge of each draw
				s.Constrain(grammar.NewMatcher(g, v))
				rng := rand.New(rand.NewPCG(seed, 1))
				var out []int32
				for len(out) < 20 {
					logits := make([]float32, 15)
					for i := range logits {
						logits[i] = float32(rng.NormFloat64() * 3)
					}
					id := s.Sample(logits)
					require.NoError(t, s.Err())
					require.True(t, check.Allowed(id), "options %d seed %d: token %d after %v", oi, seed, id, out)
					if o.Temperature == 0 && o.RepeatPenalty == 1 {
						best := int32(-1)
						for i := range logits {
							if check.Allowed(int32(i)) && (best < 0 || logits[i] > logits[best]) {
								best = int32(i)
							}
						}
						assert.Equal(t, best, id, "greedy draws the allowed argmax")
					}
					require.NoError(t, check.Accept(id))
					out = append(out, id)
					if id == 14 {
						break
					}
				}
				assert.Equal(t, int32(14), out[len(out)-1], "the grammar's text ends within 20 tokens")
				return out
			}
			assert.Equal(t, run(), run(), "options %d seed %d", oi, seed)
		}
	}
}

// TestSamplerConstrainedBanKeepsTheEnd: with the end banned (IgnoreEOS)
// where the grammar allows only the end, the grammar wins.
func TestSamplerConstrainedBanKeepsTheEnd(t *testing.T) {
	g, err := grammar.Parse(`root ::= "1"`)
	require.NoError(t, err)
	s, err := NewSampler(SamplerOptions{Temperature: 1, TopP: 1, RepeatPenalty: 1})
	require.NoError(t, err)
	s.Constrain(grammar.NewMatcher(g, digitsVocab(t)))
	s.Ban([]int32{14})
	logits := make([]float32, 15)
	logits[5] = 10
	assert.Equal(t, int32(1), s.Sample(logits))
	logits[14] = float32(math.Inf(-1))
	assert.Equal(t, int32(14), s.Sample(logits))
	require.NoError(t, s.Err())
}
