package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod/synth"
)

// The saved Llama 3 synthetic model (llama3.2-1b's features at a cheap
// width) is a chat model: `modrun chat` renders Llama 3's exact header
// format from its tokenizer.chat_template and replies; `modrun inspect`
// shows its gpt2 vocabulary, RoPE base and factors, and no output.weight.
func TestSyntheticLlama3File(t *testing.T) {
	shape, err := synth.ParseShape("llama3.2-1b,d=256,L=2,h=4,kv=2,ff=512,ctx=256")
	require.NoError(t, err)
	m, err := synth.Build(shape, synth.Options{Type: gguf.TypeQ8_0, Seed: 1})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "llama3.gguf")
	require.NoError(t, m.Save(path))
	m.Close()

	code, out, stderr := chat(t, "Hi\n", "-m", path, "--system", "Be brief.", "--print-prompt", "-n", "4")
	require.Equal(t, 0, code, stderr)
	prompt := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>" +
		"<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	require.True(t, strings.HasPrefix(out, prompt), out)
	assert.Greater(t, len(strings.TrimSpace(out[len(prompt):])), 0, "a reply")

	code, out, stderr = modrun(t, "inspect", path)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "tokenizer: gpt2, 128256 tokens (256 control, 128000 normal)")
	assert.Regexp(t, `eot +128009 +"<\|eot_id\|>"`, out)
	assert.Regexp(t, `rope\.freq_base +500000\n`, out)
	assert.Regexp(t, `rope_freqs\.weight +F32 +\[32\]`, out)
	assert.NotRegexp(t, `\n  output\.weight `, out, "tied: no output.weight")
}
