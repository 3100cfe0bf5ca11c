package engine

import (
	"math"
	"os"
	"strings"
	"testing"

	"github.com/modrun/modrun/internal/shared"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/tokenizer"
	"github.com/stretchr/testify/require"
)

// TestCausalPerplexityOnVulkan: the shipped MoD model's NLL with causal
// routing (router, predictor) on Vulkan (the batched prefill) equals the
// CPU's within 1e-4 nats/token (the bound), over 6,000 bytes of the
// TinyStories validation text in windows of the model's context.
func TestCausalPerplexityOnVulkan(t *testing.T) {
	m, err := mod.Open("../models/tinystories-mod.gguf")
	require.NoError(t, err)
	defer m.Close()
	raw, err := os.ReadFile(shared.Path(t, "tinystories/TinyStories-validation.head-hf.txt"))
	require.NoError(t, err)
	tk, err := tokenizer.FromGGUF(m.File)
	require.NoError(t, err)
	ids, err := tk.Encode(string(raw[:6000]), false)
	require.NoError(t, err)
	for _, r := range []mod.Routing{mod.RoutingRouter, mod.RoutingPredictor} {
		sb, _, err := OpenScorer(m, r, BackendOptions{Name: BackendVulkan, Device: -1})
		if err != nil && strings.Contains(err.Error(), "no Vulkan") {
			t.Skipf("no Vulkan device: %v", err)
		}
		require.NoError(t, err)
		gpu, err := Perplexity(sb, ids, tk.BOS(), m.Config.ContextLen, nil)
		sb.Close()
		require.NoError(t, err)
		cpuSc, err := NewCPUScorer(m, r)
		require.NoError(t, err)
		cpu, err := Perplexity(cpuSc, ids, tk.BOS(), m.Config.ContextLen, nil)
		require.NoError(t, err)
		require.Equal(t, cpu.Tokens, gpu.Tokens)
		require.LessOrEqual(t, math.Abs(gpu.NLL-cpu.NLL), 1e-4, "%s: NLL GPU %.7f CPU %.7f", r, gpu.NLL, cpu.NLL)
		t.Logf("%s: %d tokens, NLL GPU %.7f CPU %.7f (|diff| %.2g)", r, gpu.Tokens, gpu.NLL, cpu.NLL, math.Abs(gpu.NLL-cpu.NLL))
	}
}
