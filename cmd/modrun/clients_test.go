package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What users of llama.cpp's CLI type works on modrun's (issue 45).

// --presence-penalty and --frequency-penalty (llama.cpp's names) change a
// greedy story the way llama.cpp's do, and a value outside OpenAI's range
// is refused naming the flag.
func TestPenaltyFlags(t *testing.T) {
	base := []string{"-m", shippedMoD, "-p", "Once upon a time", "-n", "60", "--backend", "cpu"}
	code, plain, stderr := modrun(t, base...)
	require.Equal(t, 0, code, stderr)
	code, pen, stderr := modrun(t, append(base, "--presence-penalty", "2", "--frequency-penalty", "2")...)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, shiny rock in the park. She wanted to see what was in\n", plain)
	assert.Equal(t, "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw something strange happened and down it went up!\n\"\n", pen)
	code, out, stderr := modrun(t, append(base, "--frequency-penalty", "3")...)
	assert.Equal(t, 2, code)
	assert.Empty(t, out)
	assert.Equal(t, "modrun run: usage: --frequency-penalty 3: must be in [-2, 2] (0 = off)\n", stderr)
}

// llama.cpp's long names (--model, --prompt, --n-predict, --ctx-size,
// --threads, --file, --batch-size, -ngl) work as modrun's own, -n -1 runs
// until the end, and an error names a flag as it was typed.
func TestLlamaCppFlags(t *testing.T) {
	want := "Once upon a time, there was a little girl\n"
	code, out, stderr := modrun(t, "-m", shippedMoD, "-p", "Once upon a time", "-n", "8", "--backend", "cpu")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, want, out)
	code, out, stderr = modrun(t, "--model", shippedMoD, "--prompt", "Once upon a time", "--n-predict", "8", "--ctx-size", "128",
		"--threads", "1", "-ngl", "0", "--batch-size", "64", "-ub", "32", "-s", "5")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, want, out)
	assert.Empty(t, stderr, "-ngl 0 is the CPU: no fallback notice")
	file := filepath.Join(t.TempDir(), "prompt.txt")
	require.NoError(t, os.WriteFile(file, []byte("Once upon a time"), 0o644))
	code, out, stderr = modrun(t, "--model="+shippedMoD, "--file", file, "--n-predict=8", "--backend", "cpu")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, want, out)

	code, _, stderr = modrun(t, "-m", shippedMoD, "-p", "Once", "-n", "-1", "--ctx", "32", "--backend", "cpu")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "modrun: stopped: the sequence filled the context length (32 tokens; --ctx sets it)\n", stderr)

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--modle", shippedMoD}, "modrun run: usage: flag provided but not defined: --modle (modrun run -h lists the flags)\n"},
		{[]string{"-m", shippedMoD, "--n-predict", "x"}, "modrun run: usage: invalid value \"x\" for flag --n-predict: parse error (modrun run -h lists the flags)\n"},
		{[]string{"-m", shippedMoD, "--ctx", "x"}, "modrun run: usage: invalid value \"x\" for flag --ctx: parse error (modrun run -h lists the flags)\n"},
		{[]string{"-m", shippedMoD, "-ctx", "x"}, "modrun run: usage: invalid value \"x\" for flag -ctx: parse error (modrun run -h lists the flags)\n"},
		{[]string{"-m", shippedMoD, "-n", "-3"}, "modrun run: usage: -n -3: must be -1 (until the end), 0 (the same) or positive\n"},
		{[]string{"-m", shippedMoD, "--n-predict", "-3"}, "modrun run: usage: --n-predict -3: must be -1 (until the end), 0 (the same) or positive\n"},
		{[]string{"-m", shippedMoD, "-ngl", "0", "--backend", "vulkan"}, "modrun run: usage: -ngl 0 (no GPU layers) and --backend vulkan: use one\n"},
		{[]string{"run", shippedMoD, "Once"}, "modrun run: usage: unexpected argument \"" + shippedMoD + "\": the model goes with -m: modrun run -m " + shippedMoD + " ...\n"},
		{[]string{"run", "-m", shippedMoD, "Once", "upon"}, "modrun run: usage: unexpected argument \"Once\" (quote the prompt: -p \"...\")\n"},
	} {
		code, out, stderr := modrun(t, c.args...)
		assert.Equal(t, 2, code, "%q", c.args)
		assert.Empty(t, out)
		assert.Equal(t, c.want, stderr, "%q", c.args)
	}
}

// Flags after a positional argument are read (`inspect FILE --json`), and
// "--" ends the flags.
func TestFlagsAfterArguments(t *testing.T) {
	code, before, stderr := modrun(t, "inspect", "--json", shippedMoD)
	require.Equal(t, 0, code, stderr)
	code, after, stderr := modrun(t, "inspect", shippedMoD, "--json")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, before, after)
	assert.True(t, strings.HasPrefix(after, "{"), after)
	code, _, stderr = modrun(t, "inspect", "--", "--json")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "--json", "after --, --json is the file's name")
}

// -h prints to stdout (`modrun -h | less` shows it) and exits 0; the
// flags' help lists llama.cpp's names.
func TestHelpToStdout(t *testing.T) {
	code, out, stderr := modrun(t, "-h")
	assert.Equal(t, 0, code)
	assert.Empty(t, stderr)
	assert.True(t, strings.HasPrefix(out, "modrun runs Mixture-of-Depths Llama models from GGUF files.\n"), out)
	code, out, stderr = modrun(t, "run", "-h")
	assert.Equal(t, 0, code)
	assert.Empty(t, stderr)
	assert.Contains(t, out, "  llama.cpp's names work too: -b (--ubatch), --batch-size (--ubatch), --ctx-size (--ctx), --file (-f), --gpu-layers (-ngl), --model (-m), --n-gpu-layers (-ngl), --n-predict (-n), --predict (-n), --prompt (-p), -s (--seed), --threads (-t), -ub (--ubatch), --ubatch-size (--ubatch)\n")
	code, _, stderr = modrun(t)
	assert.Equal(t, 2, code, "no command at all is a usage error")
	assert.NotEmpty(t, stderr)
}

// --stats says "greedy" where no seed is used, a missing prompt is a
// one-line notice (generation starts from BOS), and -t beyond the cores
// is clamped with a notice.
func TestRunNotices(t *testing.T) {
	code, out, stderr := modrun(t, "-m", shippedMoD, "-n", "4", "--backend", "cpu", "--stats")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "Once upon a time\n", out)
	lines := strings.Split(stderr, "\n")
	require.GreaterOrEqual(t, len(lines), 2)
	assert.Equal(t, "modrun run: no prompt (-p or -f): generating from BOS alone", lines[0])
	assert.Equal(t, "backend cpu, greedy, stop: max-tokens", lines[1])
	code, _, stderr = modrun(t, "-m", shippedMoD, "-p", "Once", "-n", "4", "--backend", "cpu", "--stats", "--temp", "1", "--seed", "3")
	require.Equal(t, 0, code, stderr)
	assert.True(t, strings.HasPrefix(stderr, "backend cpu, seed 3, stop: "), stderr)

	cores := runtime.NumCPU()
	code, _, stderr = modrun(t, "-m", shippedMoD, "-p", "Once", "-n", "1", "--backend", "cpu", "-t", "999")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, fmt.Sprintf("modrun run: -t 999: this machine has %d cores; using %d\n", cores, cores), stderr)
}

// A piped chat with one line that is not UTF-8 refuses that turn, naming
// the byte in what was typed, and goes on (exit 0).
func TestChatRefusesANonUTF8Line(t *testing.T) {
	code, out, stderr := chat(t, "Hi\ncaf\xe9 au lait\nBye\n", "-m", storyModel, "--chat-template", "chatml", "-n", "2", "--backend", "cpu")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "(the line is not valid UTF-8 at byte 3 of what was typed; the turn was not sent)\n", stderr)
	assert.Equal(t, 2, strings.Count(out, "\n"), "two replies: %q", out)
}

// Perplexity on a CPU emulation of Vulkan (lavapipe) warns first that a
// long text takes minutes there (the threshold lowered for a short text).
func TestPerplexityWarnsOnLavapipe(t *testing.T) {
	old := lavapipeQuick
	lavapipeQuick = 100
	t.Cleanup(func() { lavapipeQuick = old })
	text := filepath.Join(t.TempDir(), "story.txt")
	story, err := os.ReadFile("../../models/tinystories-valid.txt")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(text, story[:1000], 0o644))
	code, out, stderr := modrun(t, "perplexity", "-m", shippedMoD, "-f", text, "--backend", "vulkan", "--ctx", "128")
	if code != 0 && strings.Contains(stderr, "Vulkan") {
		t.Skipf("no Vulkan device: %s", stderr)
	}
	require.Equal(t, 0, code, stderr)
	first, _, _ := strings.Cut(stderr, "\n")
	if !strings.Contains(out, "llvmpipe") && !strings.Contains(out, "SwiftShader") {
		assert.NotContains(t, stderr, "CPU emulation", "a GPU: no warning")
		return
	}
	assert.Regexp(t, `^modrun perplexity: llvmpipe \(LLVM [0-9.]+, [0-9]+ bits\) is a CPU emulation: [0-9]+ tokens will take minutes there \(--backend cpu is much faster\)$`, first)
}

// The README's `modrun devices` example starts as the command prints it
// on lavapipe (the device it was taken on; a GPU machine prints its own).
func TestReadmeDevicesHeader(t *testing.T) {
	code, out, stderr := modrun(t, "devices")
	if code != 0 || !strings.HasPrefix(out, "* 0: llvmpipe") {
		t.Skipf("not lavapipe alone (exit %d): %s%s", code, out, stderr)
	}
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, example, ok := strings.Cut(string(readme), "$ bin/modrun devices\n")
	require.True(t, ok)
	lines := strings.Split(out, "\n")
	shown := strings.Split(example, "\n")
	for i := 0; i < 3; i++ { // the header, type and driver lines; the README elides the rest
		assert.Equal(t, shown[i], lines[i], "line %d", i)
	}
}

// tokenize --sep encodes each document on its own (BOS-first with --bos),
// as a process per document would, in one process (train.py's corpus).
func TestTokenizeSep(t *testing.T) {
	model := "../../models/stories260K.gguf"
	code, out, stderr := modrunStdin(t, "Once upon a time\x1eThe cat sat\x1e", "tokenize", "-m", model, "--bos", "--sep", "\x1e")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "1 403 407 261 378 1 291 280 294 262 294\n", out)
	code, _, stderr = modrunStdin(t, "1 2", "tokenize", "-m", model, "--decode", "--sep", ",")
	assert.Equal(t, 2, code)
	assert.Equal(t, "modrun tokenize: usage: --sep splits text to encode; --decode reads ids\n", stderr)
}
