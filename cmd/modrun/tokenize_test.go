package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/internal/shared"
)

// tokenizeRun calls tokenizeMain with stdin and returns stdout and the error.
func tokenizeRun(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := tokenizeMain(args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), err
}

func TestTokenizeEncodeDecode(t *testing.T) {
	model := shared.Path(t, "vocab/ggml-vocab-llama-spm.gguf")

	out, err := tokenizeRun(t, "Hello world", "-m", model)
	require.NoError(t, err)
	assert.Equal(t, "15043 3186\n", out)

	out, err = tokenizeRun(t, "Hello world", "-m", model, "--bos")
	require.NoError(t, err)
	assert.Equal(t, "1 15043 3186\n", out)

	out, err = tokenizeRun(t, "1 15043 3186\n", "-m", model, "--decode")
	require.NoError(t, err)
	assert.Equal(t, "Hello world", out)

	text := " this is 🦙.cpp\nsecond line\n"
	ids, err := tokenizeRun(t, text, "-m", model)
	require.NoError(t, err)
	back, err := tokenizeRun(t, ids, "-m", model, "--decode")
	require.NoError(t, err)
	assert.Equal(t, text, back, "tokenize | tokenize --decode gives back stdin")
}

func TestTokenizeOutFile(t *testing.T) {
	model := shared.Path(t, "vocab/ggml-vocab-llama-spm.gguf")
	path := filepath.Join(t.TempDir(), "ids.bin")
	out, err := tokenizeRun(t, "Hello world", "-m", model, "--bos", "--out", path)
	require.NoError(t, err)
	assert.Empty(t, out)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	want := binary.LittleEndian.AppendUint16(nil, 1)
	want = binary.LittleEndian.AppendUint16(want, 15043)
	want = binary.LittleEndian.AppendUint16(want, 3186)
	assert.Equal(t, want, raw, "uint16 ids for a 32000-token vocab")
}

func TestWriteIDFileWidth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ids.bin")
	require.NoError(t, writeIDFile(path, []int32{70000, 1}, 1<<16+1))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, []byte{0x70, 0x11, 0x01, 0x00, 0x01, 0, 0, 0}, raw)

	require.NoError(t, writeIDFile(path, []int32{65535}, 1<<16))
	raw, err = os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, []byte{0xff, 0xff}, raw)
}

func TestTokenizeErrors(t *testing.T) {
	model := shared.Path(t, "vocab/ggml-vocab-llama-spm.gguf")
	missing := filepath.Join(t.TempDir(), "missing.gguf")
	tests := []struct {
		name  string
		stdin string
		args  []string
		want  string
		usage bool
	}{
		{"no model", "x", nil, "-m FILE.gguf is required", true},
		{"stray argument", "x", []string{"-m", model, "text"}, `unexpected argument "text"`, true},
		{"decode with out", "1", []string{"-m", model, "--decode", "--out", "x.bin"}, "--decode takes none of --out", true},
		{"unknown flag", "x", []string{"--nope"}, "flag provided but not defined", true},
		{"missing file", "x", []string{"-m", missing}, "-m " + missing, false},
		{"bad id", "1 two", []string{"-m", model, "--decode"}, `stdin: word 2, "two", is not a token id: want a whole number in [0, 32000)`, false},
		{"id out of range", "32000", []string{"-m", model, "--decode"}, `stdin: word 1, "32000", is not a token id`, false},
		{"invalid UTF-8", "a\xffb", []string{"-m", model}, "stdin: tokenizer: invalid UTF-8 at byte 1", false},
		{"unwritable out", "x", []string{"-m", model, "--out", filepath.Join(missing, "ids.bin")}, "--out " + filepath.Join(missing, "ids.bin") + ": directory " + missing + " does not exist", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tokenizeRun(t, tt.stdin, tt.args...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.Equal(t, tt.usage, errors.Is(err, errUsage), "usage error: %v", err)
		})
	}
}

// TestTokenizeSpecial: --parse-special reads "<s>" and "</s>" as BOS and
// EOS (plain text otherwise), --bos adds no second BOS, --decode --special
// writes control tokens out, and --pieces prints id and text per line.
func TestTokenizeSpecial(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	for _, c := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"<s>Once</s> upon", []string{"--parse-special", "--bos"}, "1 403 2 410 407\n"},
		{"<s>Once</s> upon", []string{"--bos"}, "1 410 504 419 505 441 416 331 504 492 419 505 407\n"},
		{"1 403 2 407", []string{"--decode", "--special"}, "<s>Once</s> upon"},
		{"1 403 2 407", []string{"--decode"}, "Once upon"},
		{"Once upon a time\n", []string{"--pieces"}, "403\t\" Once\"\n407\t\" upon\"\n261\t\" a\"\n378\t\" time\"\n13\t\"\\n\"\n"},
		{"<s>Hi", []string{"--pieces", "--parse-special"}, "1\t\"<s>\"\n320\t\" H\"\n417\t\"i\"\n"},
	} {
		out, err := tokenizeRun(t, c.stdin, append([]string{"-m", model}, c.args...)...)
		require.NoError(t, err, "%q", c.args)
		assert.Equal(t, c.want, out, "%q", c.args)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--special"}, "--special goes with --decode"},
		{[]string{"--decode", "--parse-special"}, "--decode takes none of --out, --bos, --parse-special, --pieces"},
		{[]string{"--pieces", "--out", filepath.Join(t.TempDir(), "ids.bin")}, "--pieces prints, --out writes a file: use one"},
	} {
		_, err := tokenizeRun(t, "x", append([]string{"-m", model}, c.args...)...)
		assert.ErrorIs(t, err, errUsage)
		assert.ErrorContains(t, err, c.want)
	}
}
