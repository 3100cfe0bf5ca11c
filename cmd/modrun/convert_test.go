package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
)

const convertData = "../../testdata/convert"

func cv(name string) string { return filepath.Join(convertData, name) }

func TestConvertCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tiny-mod.gguf")
	code, stdout, stderr := modrun(t, "convert", "-i", cv("tiny-mod.pt"), "-c", cv("tiny-mod.config.json"),
		"--vocab", cv("vocab512.gguf"), "-o", out, "--type", "q8_0")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "llama-mod, routed layers [1 2]")

	f, err := gguf.Open(out)
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, mod.ArchMoD, f.Architecture())
	name, err := f.String(mod.KeyName)
	require.NoError(t, err)
	assert.Equal(t, "tiny-mod", name)
	ft, err := f.Uint(mod.KeyFileType)
	require.NoError(t, err)
	assert.Equal(t, uint64(7), ft, "MOSTLY_Q8_0")
	q, ok := f.Tensor(mod.BlockTensor(0, mod.TensorAttnQ))
	require.True(t, ok)
	assert.Equal(t, gguf.TypeF16, q.Type, "rows of 16 are not whole Q8_0 blocks: F16")
	r, ok := f.Tensor(mod.BlockTensor(1, mod.TensorRouterWeight))
	require.True(t, ok)
	assert.Equal(t, gguf.TypeF32, r.Type)

	// The dense safetensors checkpoint becomes a plain llama file.
	out2 := filepath.Join(t.TempDir(), "dense.gguf")
	code, stdout, stderr = modrun(t, "convert", "-i", cv("tiny-dense.safetensors"), "-c", cv("tiny-dense.config.json"),
		"--vocab", cv("vocab512.gguf"), "-o", out2)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "(llama, ")
}

// TestConvertPublicLayouts: each public layout converts, with its config
// found beside the checkpoint, and the command names the layout it found.
func TestConvertPublicLayouts(t *testing.T) {
	for _, tc := range []struct{ dir, ckpt, layout string }{
		{"modllama2-aux", "consolidated.00.pth", "layout mod-llama2: MoD Llama 2"},
		{"mixtureai-hf", "pytorch_model.bin", "layout mixture-ai: Mixture-AI MoD wrapper"},
		{"hf-dense", "model.safetensors", "layout hf-llama"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.gguf")
			code, stdout, stderr := modrun(t, "convert", "-i", cv(filepath.Join(tc.dir, tc.ckpt)), "--vocab", cv("vocab512.gguf"), "-o", out)
			require.Equal(t, 0, code, stderr)
			assert.Contains(t, stdout, tc.layout)
			_, err := os.Stat(out)
			assert.NoError(t, err)
		})
	}
}

func TestConvertErrors(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pt")
	require.NoError(t, os.WriteFile(junk, []byte("junk"), 0o644))
	out := filepath.Join(dir, "out.gguf")
	ok := []string{"-i", cv("tiny-mod.pt"), "-c", cv("tiny-mod.config.json"), "--vocab", cv("vocab512.gguf"), "-o", out}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no flags", nil, 2, "-i, --vocab and -o are required"},
		{"bad type", append(append([]string{}, ok...), "--type", "q4_k_xl"), 2, `--type: type "q4_k_xl": want one of f32, f16, q8_0`},
		{"no config beside", []string{"-i", junk, "--vocab", cv("vocab512.gguf"), "-o", out}, 2, "neither config.json nor params.json exists beside"},
		{"overwrite input", []string{"-i", cv("tiny-mod.pt"), "-c", cv("tiny-mod.config.json"), "--vocab", cv("vocab512.gguf"), "-o", cv("tiny-mod.pt")}, 2, "would overwrite"},
		{"junk checkpoint", []string{"-i", junk, "-c", cv("tiny-mod.config.json"), "--vocab", cv("vocab512.gguf"), "-o", out}, 1, junk},
		{"wrong config", []string{"-i", cv("tiny-mod.pt"), "-c", cv("tiny-dense.config.json"), "--vocab", cv("vocab512.gguf"), "-o", out}, 1, "tiny-mod.pt"},
		{"vocab not gguf", []string{"-i", cv("tiny-mod.pt"), "-c", cv("tiny-mod.config.json"), "--vocab", cv("tiny-mod.config.json"), "-o", out}, 1, "--vocab"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := modrun(t, append([]string{"convert"}, tc.args...)...)
			assert.Equal(t, tc.code, code, stderr)
			assert.Contains(t, stderr, tc.want)
		})
	}
}

// TestPublicModelRunsItsTrainedRouting: a converted MoD Llama 2 checkpoint
// with an aux router generates with predictor routing unless told
// otherwise (llama-mod.mod.causal_routing), on the CPU and on Vulkan, and
// --stats and perplexity name its capacity as a token count.
func TestPublicModelRunsItsTrainedRouting(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "m.gguf")
	code, _, stderr := modrun(t, "convert", "-i", cv("modllama2-aux/consolidated.00.pth"), "--vocab", cv("vocab512.gguf"), "-o", out)
	require.Equal(t, 0, code, stderr)
	code, _, stderr = modrun(t, "-m", out, "--backend", "cpu", "-p", "Once upon a time", "-n", "4", "--stats")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "routing: predictor, capacity 9 tokens")
	code, _, stderr = modrun(t, "-m", out, "--backend", "vulkan", "-p", "Once upon a time", "-n", "4", "--stats", "--routing", "router")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "routing: router")

	text := filepath.Join(dir, "text.txt")
	require.NoError(t, os.WriteFile(text, []byte("Once upon a time, there was a little girl named Lily."), 0o644))
	code, stdout, stderr := modrun(t, "perplexity", "-m", out, "--backend", "cpu", "-f", text, "--quiet")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "routing topk (capacity 9 tokens)")
}
