package tokenizer

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Ids of the synthetic vocabulary: <unk>, <s>, </s>, then 256 byte tokens,
// then the normal pieces each test lists.
const (
	tUNK       = 0
	tBOS       = 1
	tEOS       = 2
	firstByte  = 3
	firstPiece = firstByte + 256
)

type testPiece struct {
	text  string
	score float32
	typ   int32
}

// testVocab builds a llama vocab with control tokens, all 256 byte tokens
// and the given pieces (normal unless typ says otherwise).
func testVocab(pieces ...testPiece) Vocab {
	v := Vocab{Model: "llama", BOS: tBOS, EOS: tEOS, UNK: tUNK, AddBOS: true, AddSpacePrefix: true}
	add := func(text string, score float32, typ int32) {
		v.Tokens = append(v.Tokens, text)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, typ)
	}
	add("<unk>", 0, TypeUnknown)
	add("<s>", 0, TypeControl)
	add("</s>", 0, TypeControl)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), 0, TypeByte)
	}
	for _, p := range pieces {
		typ := p.typ
		if typ == 0 {
			typ = TypeNormal
		}
		add(p.text, p.score, typ)
	}
	return v
}

func mustNew(t *testing.T, v Vocab) *Tokenizer {
	t.Helper()
	tok, err := New(v)
	require.NoError(t, err)
	return tok
}

// encodePieces encodes text and returns the pieces, which reads better in
// assertions than ids.
func encodePieces(t *testing.T, tok *Tokenizer, text string) []string {
	t.Helper()
	ids, err := tok.Encode(text, false)
	require.NoError(t, err)
	pieces := make([]string, len(ids))
	for i, id := range ids {
		pieces[i], err = tok.Piece(id)
		require.NoError(t, err)
	}
	return pieces
}

func TestMergeOrder(t *testing.T) {
	chars := []testPiece{{text: "a"}, {text: "b"}, {text: "c"}}
	tests := []struct {
		name   string
		pieces []testPiece
		text   string
		want   []string
	}{
		{"higher score first", []testPiece{{text: "ab", score: -2}, {text: "bc", score: -1}}, "abc", []string{"a", "bc"}},
		{"higher score first, mirrored", []testPiece{{text: "ab", score: -1}, {text: "bc", score: -2}}, "abc", []string{"ab", "c"}},
		{"tie goes to the leftmost pair", []testPiece{{text: "ab", score: -1}, {text: "bc", score: -1}}, "abc", []string{"ab", "c"}},
		{"overlapping pairs of one piece", []testPiece{{text: "aa", score: -1}}, "aaaaa", []string{"aa", "aa", "a"}},
		{"merges chain into longer pieces", []testPiece{{text: "ab", score: -1}, {text: "abc", score: -3}}, "abc", []string{"abc"}},
		{"a long piece needs a merge path", []testPiece{{text: "abc", score: 0}}, "abc", []string{"a", "b", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := testVocab(append(append([]testPiece{}, chars...), tt.pieces...)...)
			v.AddSpacePrefix = false
			assert.Equal(t, tt.want, encodePieces(t, mustNew(t, v), tt.text))
		})
	}
}

func TestSpacesAndDummyPrefix(t *testing.T) {
	tok := mustNew(t, testVocab(testPiece{text: "▁"}, testPiece{text: "a"}, testPiece{text: "▁a", score: 1}, testPiece{text: "▁▁", score: -1}))
	assert.Equal(t, []string{"▁a"}, encodePieces(t, tok, "a"))
	assert.Equal(t, []string{"▁", "▁a"}, encodePieces(t, tok, " a"), "▁a outscores ▁▁")
	assert.Equal(t, []string{"▁a", "▁a"}, encodePieces(t, tok, "a a"))
	assert.Equal(t, []string{"▁a", "▁▁"}, encodePieces(t, tok, "a  "))
	assert.Empty(t, encodePieces(t, tok, ""), "no dummy prefix on empty text")

	v := testVocab(testPiece{text: "▁"}, testPiece{text: "a"}, testPiece{text: "▁a", score: 1})
	v.AddSpacePrefix = false
	assert.Equal(t, []string{"a", "▁a"}, encodePieces(t, mustNew(t, v), "a a"))
}

func TestByteFallback(t *testing.T) {
	tok := mustNew(t, testVocab(testPiece{text: "▁"}, testPiece{text: "a"}))
	ids, err := tok.Encode("é", false)
	require.NoError(t, err)
	assert.Equal(t, []int32{firstPiece, firstByte + 0xC3, firstByte + 0xA9}, ids)

	text, err := tok.Decode(ids)
	require.NoError(t, err)
	assert.Equal(t, "é", string(text))
}

// Control and byte pieces are never merge targets: text that spells them is
// plain text.
func TestSpecialTextIsPlainText(t *testing.T) {
	tok := mustNew(t, testVocab(testPiece{text: "<"}, testPiece{text: "s"}, testPiece{text: ">"}, testPiece{text: "<s", score: -1}))
	assert.Equal(t, []string{"<0xE2>", "<0x96>", "<0x81>", "<s", ">"}, encodePieces(t, tok, "<s>"))
}

func TestUnusedPiecesAreResegmented(t *testing.T) {
	v := testVocab(testPiece{text: "a"}, testPiece{text: "b"}, testPiece{text: "c"},
		testPiece{text: "bc", score: 0, typ: TypeUnused}, testPiece{text: "ab", score: -1})
	v.AddSpacePrefix = false
	// "bc" wins the merge and blocks "ab", then is split back, as SentencePiece does.
	assert.Equal(t, []string{"a", "b", "c"}, encodePieces(t, mustNew(t, v), "abc"))
}

func TestUserDefinedPiecesStayWhole(t *testing.T) {
	v := testVocab(testPiece{text: "a"}, testPiece{text: "<"}, testPiece{text: "<|", score: 5},
		testPiece{text: "<|x|>", typ: TypeUserDefined}, testPiece{text: "<|x|>y", typ: TypeUserDefined})
	v.AddSpacePrefix = false
	tok := mustNew(t, v)
	assert.Equal(t, []string{"a", "<|x|>", "a"}, encodePieces(t, tok, "a<|x|>a"))
	assert.Equal(t, []string{"<|x|>y"}, encodePieces(t, tok, "<|x|>y"), "longest match wins")
	assert.Equal(t, []string{"<|", "a"}, encodePieces(t, tok, "<|a"))
}

func TestUnknownWithoutByteTokens(t *testing.T) {
	v := Vocab{Model: "llama", Tokens: []string{"<unk>", "▁", "a"}, BOS: -1, EOS: -1, UNK: 0, AddSpacePrefix: true}
	tok := mustNew(t, v)
	ids, err := tok.Encode("aéa", false)
	require.NoError(t, err)
	assert.Equal(t, []int32{1, 2, 0, 2}, ids, "one UNK per unknown character")
	text, err := tok.Decode(ids)
	require.NoError(t, err)
	assert.Equal(t, "a ⁇ a", string(text))

	v.UNK = -1
	v.Types = nil
	_, err = mustNew(t, v).Encode("é", false)
	assert.ErrorContains(t, err, "neither byte tokens nor UNK")
}

func TestMissingByteTokenFallsBackToUNK(t *testing.T) {
	v := testVocab()
	v.Tokens[firstByte+0xA9] = "<0xA9-missing>"
	v.Types[firstByte+0xA9] = TypeNormal
	ids, err := mustNew(t, v).Encode("é", false)
	require.NoError(t, err)
	assert.Equal(t, []int32{firstByte + 0xE2, firstByte + 0x96, firstByte + 0x81, firstByte + 0xC3, tUNK}, ids)

	v.UNK = -1
	_, err = mustNew(t, v).Encode("é", false)
	assert.ErrorContains(t, err, "byte 0xA9")
}

func TestEncodeSpecialTokens(t *testing.T) {
	v := testVocab(testPiece{text: "▁a"})
	tok := mustNew(t, v)
	ids, err := tok.Encode("a", true)
	require.NoError(t, err)
	assert.Equal(t, []int32{tBOS, firstPiece}, ids)
	ids, err = tok.Encode("", true)
	require.NoError(t, err)
	assert.Equal(t, []int32{tBOS}, ids, "like llama.cpp: BOS even for empty text")

	v.AddBOS, v.AddEOS = false, true
	ids, err = mustNew(t, v).Encode("a", true)
	require.NoError(t, err)
	assert.Equal(t, []int32{firstPiece, tEOS}, ids)
}

func TestEncodeRejectsInvalidUTF8(t *testing.T) {
	tok := mustNew(t, testVocab())
	_, err := tok.Encode("ok\xffno", false)
	assert.ErrorIs(t, err, ErrInvalidUTF8)
	assert.ErrorContains(t, err, "invalid UTF-8 at byte 2")
	_, err = tok.Encode("\xed\xa0\x80", false) // a UTF-16 surrogate
	assert.ErrorContains(t, err, "invalid UTF-8 at byte 0")
}

func TestNewRejectsBadVocab(t *testing.T) {
	good := func() Vocab { return testVocab(testPiece{text: "a"}) }
	tests := []struct {
		name   string
		mutate func(v *Vocab)
		want   string
	}{
		{"wrong model", func(v *Vocab) { v.Model = "bert" }, `model "bert" is not supported`},
		{"gpt2 without merges", func(v *Vocab) { v.Model = ModelBPE }, "needs merges"},
		{"empty", func(v *Vocab) { v.Tokens, v.Scores, v.Types = nil, nil, nil }, "empty vocabulary"},
		{"scores length", func(v *Vocab) { v.Scores = v.Scores[:3] }, "3 scores for 260 tokens"},
		{"types length", func(v *Vocab) { v.Types = v.Types[1:] }, "259 token types for 260 tokens"},
		{"NaN score", func(v *Vocab) { v.Scores[259] = float32(math.NaN()) }, "score is NaN"},
		{"bad type", func(v *Vocab) { v.Types[259] = 9 }, "unknown token type 9"},
		{"BOS range", func(v *Vocab) { v.BOS = 260 }, "BOS id 260 out of range"},
		{"EOS range", func(v *Vocab) { v.EOS = -2 }, "EOS id -2 out of range"},
		{"UNK range", func(v *Vocab) { v.UNK = 1000 }, "UNK id 1000 out of range"},
		{"AddBOS without BOS", func(v *Vocab) { v.BOS = -1 }, "no BOS token"},
		{"AddEOS without EOS", func(v *Vocab) { v.AddEOS, v.EOS = true, -1 }, "no EOS token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := good()
			tt.mutate(&v)
			_, err := New(v)
			assert.ErrorContains(t, err, tt.want)
		})
	}
	_, err := New(Vocab{Model: "llama"})
	assert.ErrorIs(t, err, ErrEmptyVocab)
}

func TestNewInfersTypes(t *testing.T) {
	v := testVocab(testPiece{text: "▁a"})
	v.Types = nil
	tok := mustNew(t, v)
	for id, want := range map[int32]int32{tUNK: TypeUnknown, tBOS: TypeControl, tEOS: TypeControl, firstByte + 7: TypeByte, firstPiece: TypeNormal} {
		got, err := tok.Type(id)
		require.NoError(t, err)
		assert.Equal(t, want, got, "id %d", id)
	}
}

func TestNewCopiesVocab(t *testing.T) {
	v := testVocab(testPiece{text: "▁a"})
	tok := mustNew(t, v)
	v.Tokens[firstPiece] = "changed"
	p, err := tok.Piece(firstPiece)
	require.NoError(t, err)
	assert.Equal(t, "▁a", p)
}

func TestDecode(t *testing.T) {
	tok := mustNew(t, testVocab(testPiece{text: "▁a"}, testPiece{text: "▁"}, testPiece{text: "b"}))
	a, space, b := int32(firstPiece), int32(firstPiece+1), int32(firstPiece+2)
	tests := []struct {
		name string
		ids  []int32
		want string
	}{
		{"dummy prefix stripped at start", []int32{a, a}, "a a"},
		{"and after BOS", []int32{tBOS, a, a}, "a a"},
		{"only once", []int32{space, a}, " a"},
		{"not after text", []int32{b, a}, "b a"},
		{"EOS is silent", []int32{a, tEOS}, "a"},
		{"UNK is visible", []int32{a, tUNK, a}, "a ⁇  a"},
		{"bytes", []int32{firstByte + 'x', firstByte + 0xC3, firstByte + 0xA9}, "xé"},
		{"byte space is kept", []int32{firstByte + ' ', a}, "  a"},
		{"invalid bytes pass through", []int32{firstByte + 0xFF}, "\xff"},
		{"empty", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tok.Decode(tt.ids)
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(got))
		})
	}
	_, err := tok.Decode([]int32{a, int32(tok.NVocab())})
	assert.ErrorContains(t, err, "token id 262 out of range")
	_, err = tok.Decode([]int32{-1})
	assert.ErrorContains(t, err, "token id -1 out of range")
}

func TestDecodeWithoutSpacePrefix(t *testing.T) {
	v := testVocab(testPiece{text: "▁a"})
	v.AddSpacePrefix = false
	got, err := mustNew(t, v).Decode([]int32{firstPiece})
	require.NoError(t, err)
	assert.Equal(t, " a", string(got))
}

func TestStreamDecoder(t *testing.T) {
	tok := mustNew(t, testVocab(testPiece{text: "▁a"}))
	d := tok.NewStreamDecoder()
	push := func(id int32) string {
		out, err := d.Push(id)
		require.NoError(t, err)
		return string(out)
	}
	assert.Equal(t, "", push(tBOS))
	assert.Equal(t, "a", push(firstPiece), "dummy prefix stripped after BOS")
	assert.Equal(t, "", push(firstByte+0xF0), "4-byte sequence held back")
	assert.Equal(t, "", push(firstByte+0x9F))
	assert.Equal(t, "", push(firstByte+0x98))
	assert.Equal(t, "😀", push(firstByte+0x80))
	assert.Equal(t, "\xff", push(firstByte+0xFF), "an invalid byte is passed on at once")
	assert.Equal(t, "", push(firstByte+0xC3))
	assert.Equal(t, "\xc3 a", push(firstPiece), "a broken sequence is released once it cannot complete")
	assert.Equal(t, "", push(firstByte+0xE2))

	_, err := d.Push(999)
	assert.ErrorContains(t, err, "out of range")
	assert.Equal(t, "\xe2", string(d.Flush()), "an error leaves the held bytes alone")
	assert.Empty(t, d.Flush())
}
