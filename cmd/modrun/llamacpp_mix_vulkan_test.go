package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/internal/shared"
	"github.com/modrun/modrun/vk"
)

// TestGreedyLlamaCppMixesVulkan: `modrun -m kq-T.gguf -p "Once upon" -n 24
// --backend vulkan` prints llama.cpp's greedy text for every file llama.cpp
// quantized, as TestGreedyLlamaCppMixes on the CPU (the prompt printed as
// given: llama-cli's leading space is the one difference allowed).
func TestGreedyLlamaCppMixesVulkan(t *testing.T) {
	if err := vk.Load(); err != nil {
		t.Skipf("no Vulkan loader: %v", err)
	}
	raw, err := os.ReadFile(shared.Path(t, "quant/llama.cpp-greedy-once-upon-24.txt"))
	require.NoError(t, err)
	want := strings.TrimPrefix(string(raw), " ")
	for _, mix := range []string{"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"} {
		model := shared.Path(t, "quant/kq-"+mix+".gguf")
		code, out, stderr := modrun(t, "-m", model, "-p", "Once upon", "-n", "24", "--backend", "vulkan")
		if code != 0 && strings.Contains(stderr, "no Vulkan device") {
			t.Skipf("no Vulkan device: %s", stderr)
		}
		require.Equal(t, 0, code, "%s: %s", mix, stderr)
		assert.Equal(t, want, out, "%s on Vulkan", mix)
	}
}
