package engine

import (
	"context"
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
// or sampled. The GPU's max, softmax and argmax must not drop the NaN, nor
// the fast CPU's 8-bit activation blocks.
func TestNonFiniteNeverHides(t *testing.T) {
	for _, c := range []struct {
		tensor string
		v      float64
	}{
		{"blk.0.attn_q.weight", math.NaN()}, // one head's scores: attention's max and softmax
		{"blk.0.attn_v.weight", math.Inf(1)},
		{"blk.0.ffn_down.weight", math.NaN()},
	} {
		poisoned(t, c.tensor, c.v, func(m *mod.Model, backend string) {
			name := c.tensor + "=" + fmtFloat(c.v) + "/" + backend
			assertPerplexityNaN(t, m, backend, name, mod.RoutingTopK, mod.RoutingRouter)
			b, _, err := OpenBackend(m, mod.RoutingRouter, BackendOptions{Name: backend, Device: -1})
			require.NoError(t, err, name)
			assertGenerateStops(t, b, m.Config.NVocab, name)
			b.Close()
		})
	}
}

// TestRouterNaNNeverHides: a NaN or an Inf in a router (or predictor)
// weight makes the causal score non-finite, which never selects (mod.Selects,
// DESIGN.md §3) and so would skip the block silently; instead the token's
// residual row becomes NaN (mod.PoisonRows), on every backend and on both of
// Vulkan's paths (route_decode for one token, compact_positive for a batch,
// topk in eval mode): perplexity is NaN, causal and top-k, and generation
// stops with "non-finite logits at token N".
func TestRouterNaNNeverHides(t *testing.T) {
	for _, c := range []struct {
		tensor  string
		v       float64
		routing mod.Routing
	}{
		{"blk.1.mod_router.weight", math.NaN(), mod.RoutingRouter},
		{"blk.3.mod_router.weight", math.Inf(1), mod.RoutingRouter}, // r = ±Inf, or NaN
		{"blk.3.mod_pred_down.weight", math.NaN(), mod.RoutingPredictor},
	} {
		poisoned(t, c.tensor, c.v, func(m *mod.Model, backend string) {
			name := c.tensor + "=" + fmtFloat(c.v) + "/" + c.routing.String() + "/" + backend
			scoring := []mod.Routing{c.routing}
			if c.routing == mod.RoutingRouter {
				scoring = append(scoring, mod.RoutingTopK) // eval mode ranks the same scores
			}
			assertPerplexityNaN(t, m, backend, name, scoring...)

			b, _, err := OpenBackend(m, c.routing, BackendOptions{Name: backend, Device: -1})
			require.NoError(t, err, name)
			for _, prompt := range [][]int32{{1}, {1, 30, 40}} { // Vulkan: the decode step, then a batch
				b.Reset()
				logits, err := b.Feed(prompt)
				require.NoError(t, err, name)
				assert.False(t, mod.Finite(logits), "%s: %d-token prompt: finite logits", name, len(prompt))
			}
			assertGenerateStops(t, b, m.Config.NVocab, name)
			b.Close()
		})
	}
}

// poisoned runs f on a copy of the trained MoD model whose tensor's element
// 5 is v, with each backend: the reference, the fast CPU and Vulkan (when a
// loader exists; lavapipe counts).
func poisoned(t *testing.T, tensor string, v float64, f func(m *mod.Model, backend string)) {
	t.Helper()
	m, err := mod.Open(poison.Copy(t, benchModel, tensor, 5, float32(v)))
	require.NoError(t, err)
	defer m.Close()
	for _, backend := range []string{BackendReference, BackendCPU, BackendVulkan} {
		if backend == BackendVulkan && vk.Load() != nil {
			t.Log("no Vulkan loader: the CPU backends only")
			continue
		}
		f(m, backend)
	}
}

// assertPerplexityNaN: m scored on backend with each routing has NLL NaN.
func assertPerplexityNaN(t *testing.T, m *mod.Model, backend, name string, routings ...mod.Routing) {
	t.Helper()
	for _, r := range routings {
		sc, _, err := OpenScorer(m, r, BackendOptions{Name: backend, Device: -1})
		require.NoError(t, err, name)
		res, err := Perplexity(sc, []int32{30, 40, 50, 60, 70, 80, 90}, 1, 8, nil)
		sc.Close()
		require.NoError(t, err, name)
		assert.True(t, math.IsNaN(res.NLL), "%s, scored with %s: NLL %v", name, r, res.NLL)
	}
}

// assertGenerateStops: generating from a 3-token prompt, greedy (a
// GreedyFeeder's own argmax) or sampled, stops at the prompt's last token
// with ErrNonFinite and yields no token.
func assertGenerateStops(t *testing.T, b *Backend, nVocab int, name string) {
	t.Helper()
	for _, temp := range []float32{0, 0.8} {
		o := DefaultSampler()
		o.Temperature = temp
		res, err := Generate(context.Background(), b, nVocab, []int32{1, 30, 40}, GenerateOptions{Sampler: o, MaxTokens: 5, EOS: -1})
		assert.ErrorIs(t, err, mod.ErrNonFinite, "%s, temperature %v", name, temp)
		assert.ErrorContains(t, err, "non-finite logits at token 2", name)
		assert.Empty(t, res.Tokens, name)
	}
}

func fmtFloat(v float64) string {
	if math.IsNaN(v) {
		return "NaN"
	}
	return "Inf"
}
