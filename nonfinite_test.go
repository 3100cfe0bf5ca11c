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

// TestNonFiniteLogits: with one NaN weight in the shipped model (in an
// attention matrix, or in a router, whose NaN score never selects but must
// not pass as a skip), Generate stops with ErrNonFinite at the prompt's last
// token on every backend, greedy or sampled, and delivers no generated
// token.
func TestNonFiniteLogits(t *testing.T) {
	for _, tensor := range []string{"blk.0.attn_q.weight", "blk.1.mod_router.weight"} {
		path := poison.Copy(t, shipped, tensor, 5, float32(math.NaN()))
		for _, backend := range []string{modrun.BackendReference, modrun.BackendCPU, modrun.BackendVulkan} {
			if backend == modrun.BackendVulkan && vk.Load() != nil {
				t.Log("no Vulkan loader: the CPU backends only")
				continue
			}
			assertGenerateNonFinite(t, path, backend, tensor+"/"+backend)
		}
	}
}

// assertGenerateNonFinite: the model at path, opened on backend, stops
// every generation at the prompt's last token.
func assertGenerateNonFinite(t *testing.T, path, backend, name string) {
	t.Helper()
	m, err := modrun.Open(path, modrun.Options{Backend: backend})
	require.NoError(t, err, name)
	defer m.Close()
	for _, temp := range []float32{0, 0.8} {
		var generated int
		_, err := m.NewSession().Generate(context.Background(), "Once upon", modrun.GenerateOptions{MaxTokens: 5, Temperature: temp},
			func(tk modrun.Token) error {
				if !tk.Prompt {
					generated++
				}
				return nil
			})
		assert.ErrorIs(t, err, modrun.ErrNonFinite, "%s, temperature %v", name, temp)
		assert.ErrorContains(t, err, "non-finite logits at token 2", "%s: BOS, Once, upon: upon's logits", name)
		assert.Zero(t, generated, name)
	}
}
