package engine

import (
	"math"
	"testing"

	"github.com/modrun/modrun/internal/poison"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNonFiniteNeverHides: one NaN or Inf weight of a trained MoD model
// (in block 0's attention, before any routing) makes every backend's
// perplexity NaN, in eval (top-k) and causal routing alike, and stops
// generation with "non-finite logits at token N", greedy (the GPU's argmax)
// or sampled. The GPU's max, softmax and argmax must not drop the NaN.
func TestNonFiniteNeverHides(t *testing.T) {
	for _, c := range []struct {
		tensor string
		v      float64
	}{
		{"blk.0.attn_q.weight", math.NaN()}, // one head's scores: attention's max and softmax
		{"blk.0.attn_v.weight", math.Inf(1)},
		{"blk.0.ffn_down.weight", math.NaN()},
	} {
		path := poison.Copy(t, benchModel, c.tensor, 5, float32(c.v))
		m, err := mod.Open(path)
		require.NoError(t, err)
		defer m.Close()
		for _, backend := range []string{BackendCPU, BackendVulkan} {
			if backend == BackendVulkan && vk.Load() != nil {
				t.Skip("no Vulkan loader")
			}
			name := c.tensor + "=" + fmtFloat(c.v) + "/" + backend
			for _, r := range []mod.Routing{mod.RoutingTopK, mod.RoutingRouter} {
				sc, _, err := OpenScorer(m, r, BackendOptions{Name: backend, Device: -1})
				require.NoError(t, err, name)
				res, err := Perplexity(sc, []int32{30, 40, 50, 60, 70, 80, 90}, 1, 8, nil)
				sc.Close()
				require.NoError(t, err, name)
				assert.True(t, math.IsNaN(res.NLL), "%s, routing %s: NLL %v", name, r, res.NLL)
			}
			b, _, err := OpenBackend(m, mod.RoutingRouter, BackendOptions{Name: backend, Device: -1})
			require.NoError(t, err, name)
			for _, temp := range []float32{0, 0.8} {
				o := DefaultSampler()
				o.Temperature = temp
				res, err := Generate(b, []int32{1, 30, 40}, GenerateOptions{Sampler: o, MaxTokens: 5, EOS: -1})
				assert.ErrorIs(t, err, mod.ErrNonFinite, "%s, temperature %v", name, temp)
				assert.ErrorContains(t, err, "non-finite logits at token 2", name)
				assert.Empty(t, res.Tokens, name)
			}
			b.Close()
		}
	}
}

func fmtFloat(v float64) string {
	if math.IsNaN(v) {
		return "NaN"
	}
	return "Inf"
}
