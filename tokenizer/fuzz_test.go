package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/internal/shared"
)

// fuzzTokenizer is the Llama 2 vocab when the shared data is present, else
// a small synthetic vocab, so the seed corpus runs everywhere.
func fuzzTokenizer(f *testing.F) *Tokenizer {
	if _, err := os.Stat(filepath.Join(shared.Dir(), llamaVocabGGUF)); err == nil {
		return llamaVocab(f)
	}
	f.Logf("shared data absent: fuzzing a synthetic vocab")
	tok, err := New(testVocab(testPiece{text: "▁"}, testPiece{text: "a"}, testPiece{text: "b"},
		testPiece{text: "▁a", score: -1}, testPiece{text: "ab", score: -2}, testPiece{text: "▁ab", score: -3}))
	require.NoError(f, err)
	return tok
}

// FuzzEncode checks, for any input: no panic; invalid UTF-8 is an error;
// valid text decodes back to itself, except that a literal U+2581 comes back
// as a space (SentencePiece cannot tell the two apart); with special tokens
// parsed, ids stay in range; the stream decoder agrees with Decode and cuts
// no character in two.
func FuzzEncode(f *testing.F) {
	tok := fuzzTokenizer(f)
	for _, s := range []string{"", " ", "Hello world", " Hello  world\n", "\u2581x", "<s>", "é\U0001f999", "\xff", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		ids, back, ok := encodeDecode(t, tok, text, EncodeOptions{})
		if !ok {
			return
		}
		assert.Equal(t, strings.ReplaceAll(text, spaceSymbol, " "), string(back))

		withBOS, err := tok.Encode(text, true)
		require.NoError(t, err)
		assert.Equal(t, append([]int32{tok.BOS()}, ids...), withBOS)
		encodeDecode(t, tok, text, EncodeOptions{ParseSpecial: true})

		d := tok.NewStreamDecoder()
		var streamed []byte
		for _, id := range withBOS {
			chunk, err := d.Push(id)
			require.NoError(t, err)
			assert.True(t, utf8.Valid(chunk), "chunk %q", chunk)
			streamed = append(streamed, chunk...)
		}
		assert.Empty(t, d.Flush())
		assert.Equal(t, string(back), string(streamed))
	})
}

// encodeDecode encodes text, checks that invalid UTF-8 is refused (ok is
// false then) and that every id is in range, and decodes the ids.
func encodeDecode(t *testing.T, tok *Tokenizer, text string, o EncodeOptions) (ids []int32, back []byte, ok bool) {
	t.Helper()
	ids, err := tok.EncodeWith(text, o)
	if !utf8.ValidString(text) {
		assert.Error(t, err)
		return nil, nil, false
	}
	require.NoError(t, err)
	for _, id := range ids {
		require.True(t, id >= 0 && int(id) < tok.NVocab(), "id %d out of range", id)
	}
	back, err = tok.Decode(ids)
	require.NoError(t, err)
	return ids, back, true
}

// FuzzDecode feeds arbitrary id sequences (two bytes each) to both
// decoders: no panic, and the stream decoder's output equals Decode's.
func FuzzDecode(f *testing.F) {
	tok := fuzzTokenizer(f)
	f.Add([]byte{1, 0, 0xC6, 0, 0xA5, 0})
	f.Add([]byte{0xF3, 0, 0xA2, 0, 0x0F, 0x01})
	f.Fuzz(func(t *testing.T, raw []byte) {
		ids := make([]int32, len(raw)/2)
		for i := range ids {
			ids[i] = int32(raw[2*i]) | int32(raw[2*i+1])<<8
		}
		want, err := tok.Decode(ids)
		d := tok.NewStreamDecoder()
		var got []byte
		for _, id := range ids {
			chunk, perr := d.Push(id)
			if perr != nil {
				require.Error(t, err, "Push failed on id %d where Decode did not", id)
				return
			}
			got = append(got, chunk...)
		}
		require.NoError(t, err)
		got = append(got, d.Flush()...)
		assert.Equal(t, string(want), string(got))
	})
}

// bpeFuzzTokenizer is Llama 3's vocabulary when the shared data is
// present, else a small synthetic byte-level one.
func bpeFuzzTokenizer(f *testing.F) *Tokenizer {
	if _, err := os.Stat(filepath.Join(shared.Dir(), llama3VocabGGUF)); err == nil {
		return llama3Vocab(f)
	}
	f.Logf("shared data absent: fuzzing a synthetic byte-level vocab")
	tok, err := New(testBPEVocab("llama-bpe", "Ġ a", "a b", "Ġa b"))
	require.NoError(f, err)
	return tok
}

// FuzzEncodeBPE checks, for any input: no panic; invalid UTF-8 is an
// error; plain text decodes back to itself byte for byte (byte-level BPE
// loses nothing); with special tokens parsed, ids stay in range and the
// decoded text is the input less the control tokens' text.
func FuzzEncodeBPE(f *testing.F) {
	tok := bpeFuzzTokenizer(f)
	for _, s := range []string{"", " ", "Hello world", "  12345\n\n\tx", "I'M don't", "<|eot_id|>", "a<|begin_of_text|>b",
		"é\U0001f999 ٣٤", "\xff", "a\x00b", "\r\n \u00a0\u3000x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		_, back, ok := encodeDecode(t, tok, text, EncodeOptions{})
		if !ok {
			return
		}
		assert.Equal(t, text, string(back))

		_, back, _ = encodeDecode(t, tok, text, EncodeOptions{ParseSpecial: true, AddSpecial: true})
		var want strings.Builder
		for _, f := range tok.special.split(text, tok.cutter(true), nil) {
			if typ, _ := tok.Type(f.id); f.id < 0 || typ == TypeUserDefined {
				want.WriteString(f.text)
				if f.id >= 0 {
					want.WriteString(tok.pieces[f.id])
				}
			}
		}
		assert.Equal(t, want.String(), string(back))
	})
}
