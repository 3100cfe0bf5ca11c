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

func TestConvertRefusesMetaMoD(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.gguf")
	code, _, stderr := modrun(t, "convert", "-i", cv("meta-mod-llama2.pt"), "-c", cv("tiny-mod.config.json"),
		"--vocab", cv("vocab512.gguf"), "-o", out)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "public MoD Llama 2 implementation")
	assert.Contains(t, stderr, "only the MLP")
	assert.Contains(t, stderr, "residual twice")
	assert.Contains(t, stderr, "compact positions")
	_, err := os.Stat(out)
	assert.True(t, os.IsNotExist(err), "no output file on failure")
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
		{"no config beside", []string{"-i", junk, "--vocab", cv("vocab512.gguf"), "-o", out}, 2, "config.json does not exist"},
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
