package modrun_test

import (
	"context"
	"errors"
	"testing"

	"github.com/modrun/modrun"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLogProbs: a greedy generation's log-probabilities (GenerateOptions.
// LogProbs) equal LogProbs's scores of the same sequence teacher-forced,
// on the CPU backend (one batched pass) and the reference (a token at a
// time), and a session interleaved with scoring still continues right.
func TestLogProbs(t *testing.T) {
	for _, backend := range []string{modrun.BackendCPU, modrun.BackendReference} {
		t.Run(backend, func(t *testing.T) {
			m := open(t, modrun.Options{Backend: backend})
			s := m.NewSession()
			defer s.Close()
			var toks []modrun.Token
			_, err := s.Generate(context.Background(), "Once upon a time", modrun.GenerateOptions{MaxTokens: 8, LogProbs: true, TopLogProbs: 3},
				func(tk modrun.Token) error { toks = append(toks, tk); return nil })
			require.NoError(t, err)
			ids := make([]int32, len(toks))
			for i, tk := range toks {
				ids[i] = tk.ID
			}
			scored, err := m.LogProbs(context.Background(), ids, 3)
			require.NoError(t, err)
			require.Len(t, scored, len(ids)-1)
			newTokens := 0
			for i, tk := range toks[1:] {
				assert.Equal(t, tk.ID, scored[i].ID)
				require.Len(t, scored[i].Top, 3)
				if tk.Prompt {
					assert.Nil(t, tk.TopLogProbs)
					continue
				}
				newTokens++
				// Greedy: the drawn token is the most likely one.
				assert.Equal(t, tk.ID, tk.TopLogProbs[0].ID)
				assert.Equal(t, tk.LogProb, tk.TopLogProbs[0].LogProb)
				// The CPU backend's prompt pass and its decode step take
				// different kernels (8-bit activation tiles vs one row):
				// 2e-3 nats is their agreement on this F32 model.
				assert.InDelta(t, tk.LogProb, scored[i].LogProb, 2e-3, "token %d", i+1)
				assert.Less(t, tk.LogProb, float32(0))
			}
			assert.Equal(t, 8, newTokens)

			// The session's sequence survives the scoring pass in between.
			var more []int32
			_, err = s.Generate(context.Background(), "", modrun.GenerateOptions{MaxTokens: 4},
				func(tk modrun.Token) error { more = append(more, tk.ID); return nil })
			require.NoError(t, err)
			alone := m.NewSession()
			defer alone.Close()
			var want []int32
			_, err = alone.Generate(context.Background(), "Once upon a time", modrun.GenerateOptions{MaxTokens: 12},
				func(tk modrun.Token) error {
					if !tk.Prompt {
						want = append(want, tk.ID)
					}
					return nil
				})
			require.NoError(t, err)
			assert.Equal(t, want[8:], more, "the continuation (from the pending 8th token) is the uninterrupted run's")
		})
	}
}

func TestLogProbsErrors(t *testing.T) {
	m := open(t, modrun.Options{Backend: modrun.BackendCPU})
	ctx := context.Background()
	_, err := m.LogProbs(ctx, []int32{1}, 0)
	assert.ErrorContains(t, err, "give 2 or more")
	_, err = m.LogProbs(ctx, []int32{1, -4}, 0)
	assert.ErrorContains(t, err, "token -4 at index 1 is outside the vocabulary")
	_, err = m.LogProbs(ctx, []int32{1, 2}, modrun.MaxTopLogProbs+1)
	assert.ErrorContains(t, err, "top 21")
	_, err = m.LogProbs(ctx, make([]int32, m.Info().ContextLen+1), 0)
	var pl *modrun.PromptLengthError
	require.True(t, errors.As(err, &pl), "%v", err)
	assert.Equal(t, m.Info().ContextLen+1, pl.Tokens)

	long := ""
	for range m.Info().ContextLen {
		long += " once"
	}
	_, err = m.NewSession().Generate(ctx, long, modrun.GenerateOptions{}, nil)
	require.True(t, errors.As(err, &pl), "%v", err)
	assert.Equal(t, 0, pl.Held)

	_, err = m.NewSession().Generate(ctx, "x", modrun.GenerateOptions{LogProbs: true, TopLogProbs: 21}, nil)
	assert.ErrorContains(t, err, "TopLogProbs 21")

	ids, err := m.Tokenize("Once upon a time", true)
	require.NoError(t, err)
	text, err := m.Detokenize(ids)
	require.NoError(t, err)
	assert.Equal(t, "Once upon a time", text)
	nl, err := m.TokenText(13) // <0x0A>
	require.NoError(t, err)
	assert.Equal(t, "\n", string(nl))
}

// TestPromptTokens: a prompt given as token ids generates what its text
// does; ids outside the vocabulary, or ids and text both, are errors.
func TestPromptTokens(t *testing.T) {
	m := open(t, modrun.Options{Backend: modrun.BackendCPU})
	ctx := context.Background()
	gen := func(text string, ids []int32) []int32 {
		var out []int32
		_, err := m.NewSession().Generate(ctx, text, modrun.GenerateOptions{MaxTokens: 6, PromptTokens: ids},
			func(tk modrun.Token) error { out = append(out, tk.ID); return nil })
		require.NoError(t, err)
		return out
	}
	ids, err := m.Tokenize("Once upon a time", true)
	require.NoError(t, err)
	assert.Equal(t, gen("Once upon a time", nil), gen("", ids))
	_, err = m.NewSession().Generate(ctx, "", modrun.GenerateOptions{PromptTokens: []int32{1, 512}}, nil)
	assert.ErrorContains(t, err, "token 512 at index 1 is outside the vocabulary [0, 512)")
	_, err = m.NewSession().Generate(ctx, "x", modrun.GenerateOptions{PromptTokens: ids}, nil)
	assert.ErrorContains(t, err, "both")
}
