package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
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

// `modrun bench --type q4_k_m` builds a synthetic model in llama.cpp's
// Q4_K_M mix, benches it on the CPU and saves it; the saved file runs.
func TestBenchSyntheticMix(t *testing.T) {
	out := filepath.Join(t.TempDir(), "k.gguf")
	code, stdout, stderr := modrun(t, "bench", "--synthetic", "d=256,L=2,h=4,kv=2,ff=768,vocab=1024,ctx=256", "--type", "q4_k_m",
		"--backends", "cpu", "--prompt", "4", "-n", "2", "--repeats", "1", "--save", out)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "| d256-L2-h4-kv2-ff768-v1024-q4_k_m | dense | cpu")
	f, err := gguf.Open(out)
	require.NoError(t, err)
	defer f.Close()
	for name, want := range map[string]gguf.TensorType{
		"token_embd.weight": gguf.TypeQ4_K, "output.weight": gguf.TypeQ6_K,
		"blk.0.attn_v.weight": gguf.TypeQ4_K, "blk.1.attn_v.weight": gguf.TypeQ6_K, // the last eighth of the blocks
		"blk.0.ffn_down.weight": gguf.TypeQ4_K, "blk.1.ffn_down.weight": gguf.TypeQ6_K,
	} {
		info, ok := f.Tensor(name)
		require.True(t, ok, name)
		assert.Equal(t, want, info.Type, name)
	}
	code, stdout, stderr = modrun(t, "-m", out, "-p", "Once upon", "-n", "8", "--backend", "cpu")
	require.Equal(t, 0, code, stderr)
	assert.True(t, strings.HasPrefix(stdout, "Once upon"), stdout)
}
