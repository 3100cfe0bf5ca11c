package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Ids of the synthetic byte-level vocabulary: the 256 byte characters in
// byte order, then three special tokens, then one piece per merge.
const (
	bBOS   = 256 // <|begin|>, control
	bEOT   = 257 // <|eot_id|>, control
	bTool  = 258 // <tool>, user-defined
	bFirst = 259
)

// testBPEVocab builds a "gpt2" vocab whose merges are given in stand-in
// characters ("Ġ" for a space); each merge's result becomes a piece.
func testBPEVocab(pre string, merges ...string) Vocab {
	v := Vocab{Model: ModelBPE, Pre: pre, BOS: bBOS, EOS: -1, UNK: -1, AddBOS: true, Merges: append([]string{}, merges...)}
	for b := 0; b < 256; b++ {
		v.Tokens = append(v.Tokens, string(byteChar[b]))
		v.Types = append(v.Types, TypeNormal)
	}
	v.Tokens = append(v.Tokens, "<|begin|>", "<|eot_id|>", "<tool>")
	v.Types = append(v.Types, TypeControl, TypeControl, TypeUserDefined)
	for _, m := range merges {
		v.Tokens = append(v.Tokens, strings.Replace(m, " ", "", 1))
		v.Types = append(v.Types, TypeNormal)
	}
	return v
}

func TestBPEMergeOrder(t *testing.T) {
	tests := []struct {
		name   string
		merges []string
		text   string
		want   []string
	}{
		{"rank decides", []string{"a b", "b c"}, "abc", []string{"ab", "c"}},
		{"rank decides, reversed", []string{"b c", "a b"}, "abc", []string{"a", "bc"}},
		{"ties go left", []string{"a a"}, "aaa", []string{"aa", "a"}},
		{"merges build on merges", []string{"l l", "h e", "he ll", "hell o"}, "hello", []string{"hello"}},
		{"space is Ġ", []string{"Ġ a"}, "a a", []string{"a", "Ġa"}},
		{"no merge across words", []string{"a Ġ"}, "a a", []string{"a", "Ġ", "a"}},
		{"bytes of a character", []string{"Ã ©"}, "é", []string{"Ã©"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := mustNew(t, testBPEVocab("gpt2", tt.merges...))
			assert.Equal(t, tt.want, encodePieces(t, tok, tt.text))
		})
	}
}

func TestBPEIgnoreMerges(t *testing.T) {
	// "xyz" is a piece no merge leads to: Llama 3 emits a whole-word piece
	// as it is, GPT-2 merges (and here cannot).
	for pre, want := range map[string][]string{"llama-bpe": {"xyz"}, "gpt2": {"x", "y", "z"}} {
		v := testBPEVocab(pre)
		v.Tokens = append(v.Tokens, "xyz")
		v.Types = append(v.Types, TypeNormal)
		assert.Equal(t, want, encodePieces(t, mustNew(t, v), "xyz"), pre)
	}
}

func TestBPESpecialTokens(t *testing.T) {
	tok := mustNew(t, testBPEVocab("llama-bpe"))
	plain, err := tok.Encode("a<|eot_id|>", false)
	require.NoError(t, err)
	assert.NotContains(t, plain, int32(bEOT), "special text is plain text by default")
	back, err := tok.Decode(plain)
	require.NoError(t, err)
	assert.Equal(t, "a<|eot_id|>", string(back))

	parsed, err := tok.EncodeWith("a<|eot_id|>b", EncodeOptions{ParseSpecial: true, AddSpecial: true})
	require.NoError(t, err)
	assert.Equal(t, []int32{bBOS, 'a', bEOT, 'b'}, parsed)
	back, err = tok.Decode(parsed)
	require.NoError(t, err)
	assert.Equal(t, "ab", string(back), "control tokens print nothing")

	// A user-defined piece is cut out of plain text too, and prints as itself.
	ids, err := tok.Encode("x<tool>y", false)
	require.NoError(t, err)
	assert.Equal(t, []int32{'x', bTool, 'y'}, ids)
	back, err = tok.Decode(ids)
	require.NoError(t, err)
	assert.Equal(t, "x<tool>y", string(back))
}

func TestBPEUnknownPreIsAnError(t *testing.T) {
	_, err := New(testBPEVocab("qwen9"))
	assert.ErrorContains(t, err, `pre-tokenizer "qwen9"`)
	assert.ErrorContains(t, err, "llama-bpe", "the error lists the supported names")
}

func TestBPEBadMerge(t *testing.T) {
	v := testBPEVocab("gpt2")
	v.Merges = []string{"ab"}
	_, err := New(v)
	assert.ErrorContains(t, err, `merge 0 "ab"`)
}

func TestBPEMissingByteToken(t *testing.T) {
	v := testBPEVocab("gpt2")
	v.Tokens[0x7A] = "zz" // no piece for "z" any more
	tok := mustNew(t, v)
	_, err := tok.Encode("z", false)
	assert.ErrorContains(t, err, "byte 0x7A has no token")
	v.UNK = bTool
	ids, err := mustNew(t, v).Encode("z", false)
	require.NoError(t, err)
	assert.Equal(t, []int32{bTool}, ids)
}

// words runs a pre-tokenizer and returns the words.
func words(pre *preTokenizer, text string) []string {
	rs := []rune(text)
	var out []string
	start := 0
	for _, end := range pre.split(rs, 0, len(rs), nil) {
		out = append(out, string(rs[start:end]))
		start = end
	}
	return out
}

// The expected words follow each expression by hand, alternative by
// alternative (see the comments in pretokenize.go).
func TestPreTokenizers(t *testing.T) {
	tests := []struct {
		pre  string
		text string
		want []string
	}{
		{"llama-bpe", "Hello world", []string{"Hello", " world"}},
		{"llama-bpe", "12345 1234567", []string{"123", "45", " ", "123", "456", "7"}},
		{"llama-bpe", "I'm I'M we'LL", []string{"I", "'m", " I", "'M", " we", "'LL"}},
		{"llama-bpe", "  hi", []string{" ", " hi"}},
		{"llama-bpe", "a  \n\n b", []string{"a", "  \n\n", " b"}},
		{"llama-bpe", "x !!!\n\ny", []string{"x", " !!!\n\n", "y"}},
		{"llama-bpe", "tab\tx .x,y", []string{"tab", "\tx", " .", "x", ",y"}},
		{"llama-bpe", "end  ", []string{"end", "  "}},
		{"llama-bpe", "über ٣٤", []string{"über", " ", "٣٤"}},
		{"gpt2", "I'M a 12345", []string{"I", "'", "M", " a", " 12345"}},
		{"gpt2", "x  y\n", []string{"x", " ", " y", "\n"}},
		{"gpt2", "don't ?!", []string{"don", "'t", " ?!"}},
		{"default", "a+b 12345!", []string{"a", "+", "b", " ", "123", "45", "!"}},
		{"default", "x`y", []string{"x", "`", "y"}},
	}
	for _, tt := range tests {
		pre, err := lookupPre(tt.pre)
		require.NoError(t, err)
		assert.Equal(t, tt.want, words(pre, tt.text), "%s %q", tt.pre, tt.text)
	}
}

func TestLlama3Special(t *testing.T) {
	tok := llama3Vocab(t)
	const bos, eos, eot = 128000, 128001, 128009
	assert.Equal(t, ModelBPE, tok.Model())
	ids, err := tok.Encode("Hi", true)
	require.NoError(t, err)
	assert.Equal(t, []int32{bos, 13347}, ids, "add_bos_token: BOS first")

	ids, err = tok.EncodeWith("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", EncodeOptions{ParseSpecial: true})
	require.NoError(t, err)
	assert.Equal(t, []int32{128006, 882, 128007, 271, 13347, eot}, ids)
	plain, err := tok.Encode("<|eot_id|>", false)
	require.NoError(t, err)
	assert.NotContains(t, plain, int32(eot))

	assert.True(t, tok.IsEndOfGeneration(eos))
	assert.True(t, tok.IsEndOfGeneration(eot), "<|eot_id|> ends a turn though the file names no eot_token_id")
	assert.False(t, tok.IsEndOfGeneration(bos))
	assert.False(t, tok.IsEndOfGeneration(13347))
}

func TestSentencePieceParseSpecial(t *testing.T) {
	tok := llamaVocab(t)
	rest, err := tok.Encode("[INST] Hi [/INST]", false)
	require.NoError(t, err)
	ids, err := tok.EncodeWith("<s>[INST] Hi [/INST]</s>", EncodeOptions{ParseSpecial: true})
	require.NoError(t, err)
	assert.Equal(t, append(append([]int32{1}, rest...), 2), ids, "each stretch of text gets its dummy prefix, as in llama.cpp")
	plain, err := tok.Encode("<s>", false)
	require.NoError(t, err)
	assert.NotContains(t, plain, int32(1))
	assert.True(t, tok.IsEndOfGeneration(2))
	assert.Equal(t, []int32{2}, tok.EndOfGeneration())
}

// TestByteLevel: GPT-2's stand-ins, as a Llama 3 vocabulary spells them:
// printable ASCII is itself, a space "Ġ" (U+0120), a newline "Ċ" (U+010A),
// NUL U+0100, and every byte decodes back.
func TestByteLevel(t *testing.T) {
	assert.Equal(t, "ĠHello,Ġworld!Ċ", ByteLevel([]byte(" Hello, world!\n")))
	assert.Equal(t, "\u0100", ByteLevel([]byte{0}))
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	s := ByteLevel(all)
	assert.Equal(t, 256, utf8.RuneCountInString(s))
	var back []byte
	for _, r := range s {
		back = append(back, charByte[r])
	}
	assert.Equal(t, all, back)
}
