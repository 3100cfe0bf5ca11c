package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/shared"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// modrun runs the CLI in-process and returns its exit status, stdout and stderr.
func modrun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestInspectStories260K(t *testing.T) {
	path := shared.Path(t, "models/stories260K.gguf")
	code, out, stderr := modrun(t, "inspect", path)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "architecture:  llama")
	assert.Regexp(t, `block_count\s+5\n`, out)
	assert.Regexp(t, `embedding_length\s+64\n`, out)
	assert.Contains(t, out, "tokenizer: llama, 512 tokens")
	assert.Regexp(t, `bos\s+1\s+"<s>"`, out)
	assert.Contains(t, out, "tensors: 48,")
	assert.Regexp(t, `token_embd\.weight\s+F32\s+\[64, 512\]\s+131072\n`, out)
	assert.Regexp(t, `blk\.4\.ffn_down\.weight\s+F32\s+\[172, 64\]\s+44032\n`, out)
	assert.Len(t, regexp.MustCompile(`(?m)^  \S+\.weight\s+F32\s+\[`).FindAllString(out, -1), 48, "one row per tensor")

	code, out, stderr = modrun(t, "inspect", "--json", path)
	require.Equal(t, 0, code, stderr)
	var r report
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Equal(t, "llama", r.Architecture)
	require.Len(t, r.Tensors, 48)
	f, err := gguf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	for i, tr := range r.Tensors {
		assert.Equal(t, f.Tensors[i].Name, tr.Name)
		assert.Equal(t, f.Tensors[i].Dims, tr.Shape, tr.Name)
		assert.Equal(t, "F32", tr.Type)
	}
	require.NotNil(t, r.Tokenizer)
	assert.Equal(t, 512, r.Tokenizer.Tokens)
}

func TestInspectVocabOnly(t *testing.T) {
	path := shared.Path(t, "vocab/ggml-vocab-llama-spm.gguf")
	code, out, stderr := modrun(t, "inspect", path)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "tokenizer: llama, 32000 tokens (256 byte, 2 control, 31741 normal, 1 unknown)")
	assert.Contains(t, out, "tensors: 0, 0 bytes")

	code, out, stderr = modrun(t, "inspect", "--json", path)
	require.Equal(t, 0, code, stderr)
	var r report
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Empty(t, r.Tensors)
	assert.Equal(t, "llama", r.Tokenizer.Model)
	assert.Equal(t, 32000, r.Tokenizer.Tokens)
	for _, kv := range r.Metadata {
		if kv.Key == "tokenizer.ggml.tokens" {
			assert.Nil(t, kv.Value, "long arrays are summarised without --full")
			assert.Equal(t, 32000, *kv.Len)
		}
	}
}

func TestInspectJSONHoldsEveryValue(t *testing.T) {
	w := gguf.NewWriter()
	require.NoError(t, w.SetKV("general.architecture", gguf.Scalar("llama-mod")))
	require.NoError(t, w.SetKV("llama-mod.mod.routed_layers", gguf.Array([]uint32{1, 3})))
	require.NoError(t, w.SetKV("x.nan", gguf.Scalar(float32(0)/zero())))
	require.NoError(t, w.SetKV("x.nested", gguf.Arrays(gguf.Array([]string{"a"}))))
	path := filepath.Join(t.TempDir(), "m.gguf")
	require.NoError(t, w.WriteFile(path))
	code, out, stderr := modrun(t, "inspect", "--json", path)
	require.Equal(t, 0, code, stderr)
	var r report
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	require.Len(t, r.Hyperparameters, 1)
	assert.Equal(t, []any{1.0, 3.0}, r.Hyperparameters[0].Value)
	assert.Equal(t, "NaN", r.Metadata[2].Value)
	assert.Equal(t, []any{[]any{"a"}}, r.Metadata[3].Value)
}

func zero() float32 { return 0 }

func TestInspectErrors(t *testing.T) {
	code, _, stderr := modrun(t, "inspect")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "want one GGUF file")

	code, _, stderr = modrun(t, "inspect", "--bogus", "x.gguf")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "-bogus")

	code, _, stderr = modrun(t, "inspect", filepath.Join(t.TempDir(), "absent.gguf"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "absent.gguf")

	bad := filepath.Join(t.TempDir(), "bad.gguf")
	require.NoError(t, os.WriteFile(bad, []byte("GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff"), 0o644))
	code, _, stderr = modrun(t, "inspect", bad)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "bad.gguf")
	assert.Contains(t, stderr, "tensor count")

	code, _, stderr = modrun(t, "frobnicate")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `unknown command "frobnicate"`)
}
