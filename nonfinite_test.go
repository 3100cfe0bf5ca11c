package modrun_test

import (
	"context"
	"math"
	"testing"

	"github.com/modrun/modrun"
	"github.com/modrun/modrun/internal/poison"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNonFiniteLogits: with one NaN weight in the shipped model, Generate
// stops with ErrNonFinite at the prompt's last token on every backend,
// greedy or sampled, and delivers no generated token.
func TestNonFiniteLogits(t *testing.T) {
	path := poison.Copy(t, shipped, "blk.0.attn_q.weight", 5, float32(math.NaN()))
	for _, backend := range []string{modrun.BackendCPU, modrun.BackendVulkan} {
		if backend == modrun.BackendVulkan && vk.Load() != nil {
			t.Skip("no Vulkan loader")
		}
		m, err := modrun.Open(path, modrun.Options{Backend: backend})
		require.NoError(t, err, backend)
		for _, temp := range []float32{0, 0.8} {
			var generated int
			_, err := m.NewSession().Generate(context.Background(), "Once upon", modrun.GenerateOptions{MaxTokens: 5, Temperature: temp},
				func(tk modrun.Token) error {
					if !tk.Prompt {
						generated++
					}
					return nil
				})
			assert.ErrorIs(t, err, modrun.ErrNonFinite, "%s, temperature %v", backend, temp)
			assert.ErrorContains(t, err, "non-finite logits at token 2", "BOS, Once, upon: upon's logits")
			assert.Zero(t, generated)
		}
		require.NoError(t, m.Close())
	}
}
