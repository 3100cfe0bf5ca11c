package modrun

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParallelPromptReused: a fresh session whose prompt begins with
// blocks another sequence ran (a server's shared system prompt, a
// benchmark's one prompt) takes them from the prefix cache instead of
// running them, and still delivers every prompt token with its routing:
// the tokens, and the routing, of the first session's turn. With
// Options.PrefixCache the same holds for sessions taking turns (Parallel 1).
func TestParallelPromptReused(t *testing.T) {
	for name, opts := range map[string]Options{"parallel 2": {Backend: BackendCPU, Parallel: 2}, "prefix cache": {Backend: BackendCPU, PrefixCache: true}} {
		t.Run(name, func(t *testing.T) { testPromptReused(t, opts) })
	}
}

func testPromptReused(t *testing.T, opts Options) {
	m, err := Open("models/tinystories-mod.gguf", opts)
	require.NoError(t, err)
	require.True(t, m.loop.Batched(), "the sessions run on the page pool")
	defer func() { assert.NoError(t, m.Close()) }()
	const prompt = "Once upon a time there was a little girl named Lily. She loved to play in the park with her dog."
	turn := func() ([]Token, Result) {
		s := m.NewSession()
		defer s.Close()
		var out []Token
		res, err := s.Generate(context.Background(), prompt, GenerateOptions{MaxTokens: 6}, func(tk Token) error {
			out = append(out, tk)
			return nil
		})
		require.NoError(t, err)
		return out, res
	}
	first, res := turn()
	assert.Zero(t, res.CachedTokens, "nothing was cached before")
	before := m.loop.Stats().ReusedTokens
	second, res := turn()
	reused := m.loop.Stats().ReusedTokens - before
	assert.GreaterOrEqual(t, reused, 16, "the prompt's full blocks came from the cache")
	assert.Equal(t, reused, res.CachedTokens, "the result says how many")
	assert.Less(t, res.CachedTokens, res.PromptTokens)
	require.Equal(t, len(first), len(second))
	for i := range first {
		assert.Equal(t, first[i].ID, second[i].ID, "token %d", i)
		assert.Equal(t, first[i].Prompt, second[i].Prompt, "token %d", i)
		if first[i].Prompt {
			require.NotNil(t, second[i].Routes, "prompt token %d has its routing", i)
			assert.Equal(t, first[i].Routes, second[i].Routes, "prompt token %d", i)
		}
	}
}
