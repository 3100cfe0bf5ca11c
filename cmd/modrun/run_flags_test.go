package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/internal/shared"
)

// modrunStdin runs modrun in-process with stdin.
func modrunStdin(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// The shipped stories260K model's greedy story from this prompt.
const (
	storyPrompt = "Once upon a time"
	storyText   = "Once upon a time, there was a little girl named Lily."
)

// TestRunPromptFile: -f FILE and -f - give the prompt as -p does, its text
// exactly (a newline at the end is part of it).
func TestRunPromptFile(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	file := filepath.Join(t.TempDir(), "prompt.txt")
	require.NoError(t, os.WriteFile(file, []byte(storyPrompt), 0o644))
	code, want, stderr := modrun(t, "-m", model, "-p", storyPrompt, "-n", "12")
	require.Equal(t, 0, code, stderr)
	require.True(t, strings.HasPrefix(want, storyText), want)
	code, out, stderr := modrun(t, "-m", model, "-f", file, "-n", "12")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, want, out)
	code, out, stderr = modrunStdin(t, storyPrompt, "-m", model, "-f", "-", "-n", "12")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, want, out)

	code, out, stderr = modrun(t, "-m", model, "-f", file, "-p", "x")
	assert.Equal(t, 2, code)
	assert.Empty(t, out)
	assert.Equal(t, "modrun run: usage: -p and -f both give the prompt: use one\n", stderr)
	bad := filepath.Join(t.TempDir(), "latin1.txt")
	require.NoError(t, os.WriteFile(bad, []byte("caf\xe9"), 0o644))
	code, _, stderr = modrun(t, "-m", model, "-f", bad)
	assert.Equal(t, 1, code)
	assert.Equal(t, "modrun run: -f "+bad+": the prompt is not valid UTF-8\n", stderr)
	code, _, stderr = modrun(t, "-m", model, "-f", bad, "--top-p", "0")
	assert.Equal(t, 2, code, "a bad flag before the file: %s", stderr)
	code, _, stderr = modrun(t, "-m", model, "-f", filepath.Join(t.TempDir(), "none.txt"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "modrun run: -f ")
	assert.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
}

// TestRunStopAndNoDisplayPrompt: --stop cuts the text before the first stop
// string found, which is never printed; --no-display-prompt leaves out
// the prompt.
func TestRunStopAndNoDisplayPrompt(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--stop", "little"}, "Once upon a time, there was a \n"},
		{[]string{"--stop", " girl", "--stop", "was"}, "Once upon a time, there \n"},
		{[]string{"--stop", "Lily.", "--no-display-prompt"}, ", there was a little girl named \n"},
		{[]string{"--stop", "upon"}, "Once upon a time, there was a little girl named Lily.\n"}, // the prompt is not searched
		{[]string{"--no-display-prompt"}, ", there was a little girl named Lily.\n"},
	}
	for _, c := range cases {
		code, out, stderr := modrun(t, append([]string{"-m", model, "-p", storyPrompt, "-n", "11"}, c.args...)...)
		require.Equal(t, 0, code, stderr)
		assert.Equal(t, c.want, out, "%q", c.args)
	}
	code, _, stderr := modrun(t, "-m", model, "-p", "x", "--stop", "")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `--stop "" is empty: give some text`)
}

// TestRunStopNotUTF8: a --stop that is not UTF-8 (it could match inside a
// character) is a usage error naming the flag.
func TestRunStopNotUTF8(t *testing.T) {
	code, _, stderr := modrun(t, "-m", shared.Path(t, "models/stories260K.gguf"), "-p", "x", "--stop", "\xe2\x82")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `--stop "\xe2\x82" is not valid UTF-8`)
}

// runJSONOf runs modrun --json and decodes its one document.
func runJSONOf(t *testing.T, args ...string) runJSON {
	t.Helper()
	code, out, stderr := modrun(t, append(args, "--json")...)
	require.Equal(t, 0, code, stderr)
	var doc runJSON
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&doc), out)
	assert.False(t, dec.More(), "one document")
	return doc
}

// TestRunJSON: --json prints one document: the generated text (cut at a
// --stop), the ids, why it stopped, timings and routing.
func TestRunJSON(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	doc := runJSONOf(t, "-m", model, "-p", storyPrompt, "-n", "11", "--seed", "7")
	assert.Equal(t, storyPrompt, doc.Prompt)
	assert.Equal(t, strings.TrimPrefix(storyText, storyPrompt), doc.Text)
	assert.Len(t, doc.Tokens, 11)
	assert.Equal(t, int32(1), doc.PromptTokens[0], "BOS")
	assert.Equal(t, "max-tokens", doc.Stop)
	assert.Equal(t, uint64(7), doc.Seed)
	assert.Equal(t, len(doc.PromptTokens), doc.Timings.PromptTokens)
	assert.Equal(t, 10, doc.Timings.DecodeSteps)
	assert.Positive(t, doc.Timings.DecodePerSec)
	assert.Empty(t, doc.Routing, "a dense model")

	stopped := runJSONOf(t, "-m", model, "-p", storyPrompt, "-n", "11", "--stop", "girl")
	assert.Equal(t, ", there was a little ", stopped.Text)
	assert.Equal(t, "stop-string", stopped.Stop)

	mod := runJSONOf(t, "-m", "../../models/tinystories-mod.gguf", "-p", "Once", "-n", "4", "--backend", "cpu")
	require.NotEmpty(t, mod.Routing)
	for _, l := range mod.Routing {
		assert.Equal(t, len(mod.PromptTokens)+3, l.Seen, "layer %d: every token run (the last drawn is not)", l.Layer)
	}
}

// TestRunParseSpecial: special-token text in a prompt is plain text unless
// --parse-special; then "</s>" is EOS (2), and a prompt that starts with
// "<s>" gets one BOS (1), not two.
func TestRunParseSpecial(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	plain := runJSONOf(t, "-m", model, "-p", "<s>Once</s> upon", "-n", "1")
	assert.Equal(t, int32(1), plain.PromptTokens[0])
	assert.NotContains(t, plain.PromptTokens[1:], int32(1))
	assert.NotContains(t, plain.PromptTokens, int32(2))
	special := runJSONOf(t, "-m", model, "-p", "<s>Once</s> upon", "-n", "1", "--parse-special")
	assert.Equal(t, int32(1), special.PromptTokens[0])
	assert.NotEqual(t, int32(1), special.PromptTokens[1], "one BOS")
	eos := 0
	for _, id := range special.PromptTokens {
		if id == 2 {
			eos++
		}
	}
	assert.Equal(t, 1, eos, "</s> is EOS: %v", special.PromptTokens)
	assert.Less(t, len(special.PromptTokens), len(plain.PromptTokens))
}

// TestIgnoredFlags: a flag the named backend would ignore is refused in
// one line, before the model loads.
func TestIgnoredFlags(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-p", "x", "--backend", "reference", "--kv-type", "f16"}, "modrun run: usage: --kv-type sets the vulkan and cpu backends' KV cache; the reference's is float32\n"},
		{[]string{"run", "-p", "x", "--backend", "reference", "--profile"}, "modrun run: usage: --profile applies to the vulkan backend only, not to reference\n"},
		{[]string{"run", "-p", "x", "--backend", "vulkan", "-t", "2"}, "modrun run: usage: -t sets the CPU backends' threads; the vulkan backend runs on the GPU\n"},
		{[]string{"chat", "--chat-template", "chatml", "--backend", "reference", "--kv-type", "f32"}, "modrun chat: usage: --kv-type sets the vulkan and cpu backends' KV cache; the reference's is float32\n"},
		{[]string{"run", "-p", "x", "-t", "-1"}, "modrun run: usage: -t -1: must be 0 (one per core) or positive\n"},
		{[]string{"run", "-p", "x", "--backend", "reference", "--ubatch", "8"}, "modrun run: usage: --ubatch sets the vulkan and cpu backends' prompt batch; the reference runs a prompt 32 tokens at a time\n"},
	} {
		code, out, stderr := modrun(t, append(c.args, "-m", model)...)
		assert.Equal(t, 2, code, stderr)
		assert.Empty(t, out)
		assert.Equal(t, c.want, stderr)
	}

	// --backend auto that ends on the CPU warns instead, in one line.
	code, out, stderr := modrun(t, "-m", model, "-p", "Once", "-n", "2", "--profile")
	require.Equal(t, 0, code, stderr)
	assert.NotEmpty(t, out)
	if !strings.Contains(stderr, "running on the CPU") {
		t.Skipf("auto runs on a GPU here: %s", stderr)
	}
	assert.Contains(t, stderr, "\nmodrun run: warning: --profile applies to the vulkan backend only, not to cpu\n")
}

// TestRunThreads: -t N runs the CPU backend on N threads (a process of its
// own: the thread count is the process's).
func TestRunThreads(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd, stdout, stderr := modrunProcess(t, ctx, "-m", model, "-p", "Once", "-n", "2", "--backend", "cpu", "-t", "1", "--json")
	var out bytes.Buffer
	_, err := out.ReadFrom(stdout)
	require.NoError(t, err)
	require.NoError(t, cmd.Wait(), stderr.String())
	var doc runJSON
	require.NoError(t, json.Unmarshal(out.Bytes(), &doc), out.String())
	assert.True(t, strings.HasPrefix(doc.Device, "CPU (1 thread, "), doc.Device)
}

// TestVersion: --version prints the version and commit, Go's version and
// the Vulkan loader, one line each.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version"} {
		code, out, stderr := modrun(t, arg)
		require.Equal(t, 0, code, stderr)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		require.Len(t, lines, 3, out)
		assert.Regexp(t, `^modrun \S+, commit `, lines[0])
		assert.Regexp(t, `^go: go1\.\d+`, lines[1])
		assert.Regexp(t, `^vulkan loader: (none \(|libvulkan\.so\.1, Vulkan 1\.)`, lines[2])
	}
}

// TestWords: what --help and -h say, and --stats's counts, read right.
func TestWords(t *testing.T) {
	code, usage, _ := modrun(t, "--help")
	require.Equal(t, 0, code)
	assert.Contains(t, usage, "  convert    a checkpoint (train/'s, the public MoD code's, Meta's or Hugging Face's Llama) + its config -> GGUF\n")
	code, help, _ := modrun(t, "chat", "-h")
	require.Equal(t, 0, code)
	assert.NotContains(t, help, "--stats", "chat has no --stats")
	assert.Contains(t, help, "random seed; -1 picks one from the clock (default -1)\n")
	code, help, _ = modrun(t, "run", "-h")
	require.Equal(t, 0, code)
	assert.Contains(t, help, "random seed; -1 picks one from the clock (printed with --stats and --json) (default -1)\n")

	model := shared.Path(t, "models/stories260K.gguf")
	code, _, stderr := modrun(t, "-m", model, "-p", "", "-n", "2", "--stats", "--backend", "cpu")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `\nprefill: 1 token in \S+ \(`, stderr, "BOS alone")
	assert.Regexp(t, `\ndecode:  1 token in \S+ \(`, stderr)
}

// TestCPUKVType: --kv-type f16 gives the CPU backend a cache of halves
// (f32 without it), as --stats and bench's kv_type say.
func TestCPUKVType(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	for _, kv := range []string{"", "f16", "f32"} {
		args := []string{"-m", model, "-p", "Once", "-n", "4", "--backend", "cpu", "--stats"}
		if kv != "" {
			args = append(args, "--kv-type", kv)
		}
		code, out, stderr := modrun(t, args...)
		require.Equal(t, 0, code, stderr)
		assert.NotEmpty(t, out)
		assert.Contains(t, stderr, "KV cache: "+cmp.Or(kv, "f32")+", ", kv)
	}
	code, out, stderr := modrun(t, "bench", "-m", model, "--backends", "cpu", "--kv-type", "f16", "--prompt", "8", "-n", "4", "--repeats", "1", "--json")
	require.Equal(t, 0, code, stderr)
	var rep struct {
		Rows []struct {
			KVType string `json:"kv_type"`
		} `json:"rows"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.NotEmpty(t, rep.Rows, out)
	for _, r := range rep.Rows {
		assert.Equal(t, "f16", r.KVType)
	}
}
