package modrun

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The penalties and logit bias that OpenAI's and llama.cpp's clients send
// change what is drawn on every backend, alone and in shared steps: a
// bias of +100 makes every new token that token, a strong frequency and
// presence penalty changes the greedy text, and the shared steps give what
// the session alone gives.
func TestPenaltiesOnEveryBackend(t *testing.T) {
	prompt := "Once upon a time there was a little girl named Lily. She"
	plain := GenerateOptions{MaxTokens: 24}
	biased := GenerateOptions{MaxTokens: 6, LogitBias: map[int32]float32{300: 100}}
	penalised := GenerateOptions{MaxTokens: 24, FrequencyPenalty: 2, PresencePenalty: 2, RepeatPenalty: 1.5}
	ids := func(out []turnOut) (new []int32) {
		for _, tk := range out[0].tokens {
			if !tk.Prompt {
				new = append(new, tk.ID)
			}
		}
		return new
	}
	for _, backend := range []string{BackendReference, BackendCPU, BackendVulkan} {
		t.Run(backend, func(t *testing.T) {
			for _, parallel := range []int{0, 2} {
				m, err := Open("models/tinystories-mod.gguf", Options{Backend: backend, Parallel: parallel})
				if backend == BackendVulkan && err != nil {
					t.Skipf("no Vulkan device: %v", err)
				}
				if parallel > 0 && backend == BackendReference { // it has no shared steps
					if err == nil {
						require.NoError(t, m.Close())
					}
					continue
				}
				require.NoError(t, err)
				name := fmt.Sprintf("parallel %d (shared steps: %v)", parallel, m.loop.Batched())
				if parallel > 0 {
					require.True(t, m.loop.Batched(), "%s: the sessions share the scheduler's steps", backend)
				}
				greedy := ids(converse(t, m, []turn{{prompt, plain}}))
				assert.Equal(t, []int32{300, 300, 300, 300, 300, 300}, ids(converse(t, m, []turn{{prompt, biased}})), name)
				pen := ids(converse(t, m, []turn{{prompt, penalised}}))
				assert.NotEqual(t, greedy, pen, name)
				seen := map[int32]bool{}
				for _, id := range pen {
					assert.False(t, seen[id], "%s: token %d repeats under a penalty of 2: %v", name, id, pen)
					seen[id] = true
				}
				require.NoError(t, m.Close())
			}
		})
	}
}
