package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goldenPath is written by scripts/gen_tokenizer_fixture.py with SentencePiece
// 0.1.97 and llama_tokenizer.model, whose pieces and scores equal those in
// ggml-vocab-llama-spm.gguf.
var goldenPath = filepath.Join("..", "testdata", "tokenizer", "sentencepiece_golden.json")

type goldenCase struct {
	Src     string  `json:"src"`
	Text    string  `json:"text"`
	IDs     string  `json:"ids"`
	Decoded *string `json:"decoded"` // set only where it differs from Text
}

func loadGolden(t *testing.T) []goldenCase {
	t.Helper()
	raw, err := os.ReadFile(goldenPath)
	require.NoError(t, err)
	var doc struct {
		Format string       `json:"format"`
		Cases  []goldenCase `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Equal(t, "modrun-tokenizer-golden/1", doc.Format)
	require.GreaterOrEqual(t, len(doc.Cases), 2000)
	return doc.Cases
}

func (c goldenCase) wantText() string {
	if c.Decoded != nil {
		return *c.Decoded
	}
	return c.Text
}

func TestSentencePieceGoldenEncode(t *testing.T) {
	tok := llamaVocab(t)
	cases := loadGolden(t)
	failed := 0
	for i, c := range cases {
		got, err := tok.Encode(c.Text, false)
		require.NoError(t, err, "case %d (%s) %q", i, c.Src, c.Text)
		if !assert.Equal(t, parseIDs(t, c.IDs), got, "case %d (%s) %q", i, c.Src, c.Text) {
			if failed++; failed == 10 {
				t.Fatal("stopping after 10 mismatches")
			}
		}
	}
}

func TestSentencePieceGoldenDecode(t *testing.T) {
	tok := llamaVocab(t)
	for i, c := range loadGolden(t) {
		got, err := tok.Decode(parseIDs(t, c.IDs))
		require.NoError(t, err)
		assert.Equal(t, c.wantText(), string(got), "case %d (%s)", i, c.Src)
	}
}

// TestStreamDecoderGolden pushes every golden case token by token: the
// chunks must join to Decode's output and each must be valid UTF-8 on its
// own, since every case is valid text.
func TestStreamDecoderGolden(t *testing.T) {
	tok := llamaVocab(t)
	for i, c := range loadGolden(t) {
		ids := parseIDs(t, c.IDs)
		want, err := tok.Decode(ids)
		require.NoError(t, err)

		d := tok.NewStreamDecoder()
		var got []byte
		for _, id := range ids {
			chunk, err := d.Push(id)
			require.NoError(t, err)
			assert.True(t, utf8.Valid(chunk), "case %d (%s): chunk %q after id %d is not valid UTF-8", i, c.Src, chunk, id)
			got = append(got, chunk...)
		}
		assert.Empty(t, d.Flush(), "case %d: bytes held back at the end", i)
		assert.Equal(t, string(want), string(got), "case %d (%s)", i, c.Src)
	}
}

// TestSegmentedMergeEqualsGlobalQueue checks the claim mergeSegments rests
// on: merging independent stretches apart gives the same ids as one global
// queue over the whole text (which is what vocabularies with unused pieces
// get). It runs over the golden cases and 256 KiB of TinyStories in one piece.
func TestSegmentedMergeEqualsGlobalQueue(t *testing.T) {
	tok := llamaVocab(t)
	require.False(t, tok.hasUnused, "the Llama vocab should take the segmented path")
	global := *tok
	global.hasUnused = true

	texts := []string{strings.ToValidUTF8(readShared(t, tinyStoriesV1)[:256<<10], "")}
	for _, c := range loadGolden(t) {
		texts = append(texts, c.Text)
	}
	for i, text := range texts {
		want, err := global.Encode(text, false)
		require.NoError(t, err)
		got, err := tok.Encode(text, false)
		require.NoError(t, err)
		require.Equal(t, want, got, "text %d", i)
	}
}
