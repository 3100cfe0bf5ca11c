package tokenizer

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// llama.cpp's test-tokenizer-0 vectors: cases in .inp separated by this line,
// and one line of space-separated ids (no BOS) per case in .out.
const vocabTestSeparator = "\n__ggml_vocab_test__\n"

func TestLlamaCppVocabVectors(t *testing.T) {
	for _, vc := range []struct {
		file string
		load func(testing.TB) *Tokenizer
	}{
		{llamaVocabGGUF, llamaVocab},   // Llama 2's SentencePiece
		{llama3VocabGGUF, llama3Vocab}, // Llama 3's byte-level BPE
	} {
		t.Run(vc.file, func(t *testing.T) {
			tok := vc.load(t)
			inp, err := os.ReadFile(sharedData(t, vc.file+".inp"))
			require.NoError(t, err)
			out, err := os.ReadFile(sharedData(t, vc.file+".out"))
			require.NoError(t, err)

			// The .inp ends with a separator and the .out with a newline, so both
			// split into 47 entries whose last is the empty string.
			cases := strings.Split(string(inp), vocabTestSeparator)
			lines := strings.Split(string(out), "\n")
			require.Len(t, cases, 47)
			require.Len(t, lines, len(cases))

			for i, text := range cases {
				want := parseIDs(t, lines[i])
				got, err := tok.Encode(text, false)
				require.NoError(t, err, "case %d %q", i, text)
				assert.Equal(t, want, got, "case %d %q", i, text)

				back, err := tok.Decode(got)
				require.NoError(t, err)
				assert.Equal(t, text, string(back), "decode of case %d", i)
			}
		})
	}
}

func parseIDs(t testing.TB, line string) []int32 {
	t.Helper()
	ids := []int32{}
	for _, f := range strings.Fields(line) {
		n, err := strconv.ParseInt(f, 10, 32)
		require.NoError(t, err, "id %q", f)
		ids = append(ids, int32(n))
	}
	return ids
}
