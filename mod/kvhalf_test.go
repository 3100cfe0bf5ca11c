package mod

import (
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKVHalf: a State with KVHalf caches halves (every key and value is a
// half's value exactly), its logits move from the F32 cache's by about the
// half's relative step and no more than a few of them, and it is
// independent of chunking as the F32 cache is (each entry is rounded before
// any attention reads it, the token's own included).
func TestKVHalf(t *testing.T) {
	m := defaultTestModel().open(t)
	tokens := randomTokens(29, m.Config.NVocab, 3)
	want, _ := chunkedLogits(t, m, tokens, len(tokens), func(*State) {}) // f32
	logits := func(chunk int) ([]float32, *State) {
		return chunkedLogits(t, m, tokens, chunk, func(s *State) { s.KVHalf = true })
	}
	whole, s := logits(len(tokens))
	for l := 0; l < m.Config.NLayer; l++ {
		k, v, _ := s.KV(l)
		for _, x := range append(append([]float32(nil), k...), v...) {
			require.Equal(t, x, gguf.F16ToF32(gguf.F32ToF16(x)), "layer %d: a cached value that is not a half", l)
		}
	}
	var diff, biggest float64
	for i := range want {
		diff = max(diff, float64(abs32(whole[i]-want[i])))
		biggest = max(biggest, float64(abs32(want[i])))
	}
	assert.Positive(t, diff, "the halves moved the logits")
	assert.Less(t, diff, 16*biggest/2048, "by a few of the half's relative steps (2^-11) of the largest logit")
	byToken, _ := logits(1)
	assert.Equal(t, whole, byToken, "token by token as in one call")
}

// chunkedLogits feeds tokens to a new State (router routing) set up by set,
// chunk tokens a call, and returns every token's logits and the State.
func chunkedLogits(t *testing.T, m *Model, tokens []int32, chunk int, set func(*State)) ([]float32, *State) {
	t.Helper()
	s, err := m.NewState(RoutingRouter)
	require.NoError(t, err)
	set(s)
	var out []float32
	for i := 0; i < len(tokens); i += chunk {
		got, err := s.Forward(tokens[i:min(i+chunk, len(tokens))], true)
		require.NoError(t, err)
		out = append(out, got...)
	}
	return out, s
}
