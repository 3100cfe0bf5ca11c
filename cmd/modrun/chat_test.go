package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	api "github.com/modrun/modrun"
	"github.com/modrun/modrun/gguf"
)

const storyModel = "../../models/tinystories-dense.gguf"

// chat runs `modrun chat` with stdin piped.
func chat(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(append([]string{"chat", "--backend", "cpu"}, args...), strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestChatPiped(t *testing.T) {
	code, out, stderr := chat(t, "Hi\n\nTell me more\n", "-m", storyModel, "--chat-template", "chatml", "--system", "Be brief.", "--print-prompt", "-n", "3")
	require.Equal(t, 0, code, stderr)
	// Each line is a turn: the first prompt is the whole conversation, the
	// second only what follows the first answer; the empty line is no turn.
	first := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	second := "<|im_end|>\n<|im_start|>user\nTell me more<|im_end|>\n<|im_start|>assistant\n"
	require.True(t, strings.HasPrefix(out, first), out)
	i := strings.Index(out, second)
	require.Positive(t, i, "the second turn's prompt: %q", out)
	assert.Equal(t, 1, strings.Count(out[len(first):i], "\n"), "the first reply is one line: %q", out[len(first):i])
	assert.True(t, strings.HasSuffix(out, "\n"))

	// Without --print-prompt only the replies come out, one line each.
	code, replies, stderr := chat(t, "Hi\nTell me more\n", "-m", storyModel, "--chat-template", "chatml", "--system", "Be brief.", "-n", "3")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, strings.ReplaceAll(strings.ReplaceAll(out, first, ""), second, ""), replies)
}

func TestChatBadInput(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-m", storyModel}, 1, "has no chat template (tokenizer.chat_template); name one (chatml, llama2, llama3, zephyr) with --chat-template"},
		{[]string{"-m", storyModel, "--chat-template", "alpaca"}, 2, `--chat-template "alpaca" is unknown (known: chatml, llama2, llama3, zephyr)`},
		{[]string{"--chat-template", "chatml"}, 2, "-m FILE.gguf is required"},
		{[]string{"-m", storyModel, "--chat-template", "chatml", "-n", "-1"}, 2, "-n -1: must be 0 or positive"},
		{[]string{"-m", storyModel, "--chat-template", "chatml", "hello"}, 2, `unexpected argument "hello"`},
	}
	for _, c := range cases {
		code, _, stderr := chat(t, "Hi\n", c.args...)
		assert.Equal(t, c.code, code, stderr)
		assert.Contains(t, stderr, c.want)
	}
}

// byteLevelStoryModel writes the story model with a Llama 3 style
// vocabulary in place of its own: the 256 byte characters of GPT-2's
// byte-level BPE, Llama 3's special tokens and chat template, and filler
// pieces up to the model's 512 tokens.
func byteLevelStoryModel(t *testing.T) string {
	t.Helper()
	src, err := gguf.Open(storyModel)
	require.NoError(t, err)
	defer src.Close()
	w := gguf.NewWriter()
	for _, kv := range src.KVs {
		if !strings.HasPrefix(kv.Key, "tokenizer.") {
			require.NoError(t, w.SetKV(kv.Key, kv.Value))
		}
	}
	// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for
	// themselves, the other 68 take U+0100 onwards.
	var tokens []string
	var types []int32
	next := rune(0x100)
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE) {
			r, next = next, next+1
		}
		tokens, types = append(tokens, string(r)), append(types, 1)
	}
	for _, s := range []string{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"} {
		tokens, types = append(tokens, s), append(types, 3)
	}
	for len(tokens) < 512 {
		tokens, types = append(tokens, fmt.Sprintf("\u0120w%d", len(tokens))), append(types, 1)
	}
	llama3 := "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
	for _, kv := range []gguf.KV{
		{Key: "tokenizer.ggml.model", Value: gguf.Scalar("gpt2")},
		{Key: "tokenizer.ggml.pre", Value: gguf.Scalar("llama-bpe")},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Array(tokens)},
		{Key: "tokenizer.ggml.token_type", Value: gguf.Array(types)},
		{Key: "tokenizer.ggml.merges", Value: gguf.Array([]string{"H i"})},
		{Key: "tokenizer.ggml.bos_token_id", Value: gguf.Scalar(uint32(256))},
		{Key: "tokenizer.ggml.eos_token_id", Value: gguf.Scalar(uint32(257))},
		{Key: "tokenizer.chat_template", Value: gguf.Scalar(llama3)},
	} {
		require.NoError(t, w.SetKV(kv.Key, kv.Value))
	}
	for _, ti := range src.Tensors {
		data, err := src.TensorData(ti.Name)
		require.NoError(t, err)
		require.NoError(t, w.AddTensor(ti.Name, ti.Type, ti.Dims, data))
	}
	path := filepath.Join(t.TempDir(), "story-llama3-vocab.gguf")
	require.NoError(t, w.WriteFile(path))
	return path
}

// TestChatLlama3Header is the acceptance command on a small model
// with Llama 3's vocabulary and template: the prompt comes out in Llama 3's
// header format, the template found from the file.
func TestChatLlama3Header(t *testing.T) {
	model := byteLevelStoryModel(t)
	code, out, stderr := chat(t, "Hi\n", "-m", model, "--system", "Be brief.", "--print-prompt", "-n", "4")
	require.Equal(t, 0, code, stderr)
	want := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	assert.True(t, strings.HasPrefix(out, want), "%q", out)

	// The markers are the special tokens, not their text: BOS (256),
	// <|start_header_id|> (258), "system" byte by byte (no merges for it),
	// <|end_header_id|> (259), "\n\n", "B".
	m, err := api.Open(model, api.Options{Backend: api.BackendCPU})
	require.NoError(t, err)
	defer m.Close()
	c, err := m.NewChat("")
	require.NoError(t, err)
	assert.Equal(t, "llama3", c.Template())
	_, err = c.Reply(context.Background(), []api.Message{{Role: api.RoleSystem, Content: "Be brief."}, {Role: api.RoleUser, Content: "Hi"}},
		api.ChatOptions{GenerateOptions: api.GenerateOptions{MaxTokens: 1}}, nil)
	require.NoError(t, err)
	ids, err := c.Tokens()
	require.NoError(t, err)
	require.Greater(t, len(ids), 12)
	assert.Equal(t, []int32{256, 258, 's', 'y', 's', 't', 'e', 'm', 259, '\n', '\n', 'B'}, ids[:12])
}
