package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/internal/shared"
)

// TestGreedyLlamaCppMixes: `modrun -m kq-T.gguf -p "Once upon" -n 24` prints
// llama.cpp's greedy text for every file llama.cpp quantized (and the F32
// original). llama-cli printed the prompt after the leading space its
// tokenizer adds; modrun prints the prompt as given, so that space is the one
// difference the comparison allows.
func TestGreedyLlamaCppMixes(t *testing.T) {
	raw, err := os.ReadFile(shared.Path(t, "quant/llama.cpp-greedy-once-upon-24.txt"))
	require.NoError(t, err)
	want := strings.TrimPrefix(string(raw), " ")
	for _, mix := range []string{"f32", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"} {
		model := shared.Path(t, "quant/kq-"+mix+".gguf")
		code, out, stderr := modrun(t, "-m", model, "-p", "Once upon", "-n", "24", "--backend", "cpu")
		require.Equal(t, 0, code, "%s: %s", mix, stderr)
		assert.Equal(t, want, out, "%s on the CPU", mix)
	}
}
