package grammar

import (
	"encoding/json"
	goparser "go/parser"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/shared"
	"github.com/modrun/modrun/tokenizer"
)

// The shared data's llama.cpp vocabularies: Llama 2's SentencePiece (▁,
// <0xNN> byte tokens) and Llama 3's byte-level BPE.
var vocabs = map[string]*cachedVocab{
	"spm": {rel: "vocab/ggml-vocab-llama-spm.gguf"},
	"bpe": {rel: "vocab/ggml-vocab-llama-bpe.gguf"},
}

type cachedVocab struct {
	rel  string
	once sync.Once
	tok  *tokenizer.Tokenizer
	v    *Vocab
}

func (c *cachedVocab) get(t testing.TB) (*tokenizer.Tokenizer, *Vocab) {
	t.Helper()
	path := shared.Path(t, c.rel)
	c.once.Do(func() {
		f, err := gguf.Open(path)
		if err != nil {
			return
		}
		defer f.Close()
		if c.tok, err = tokenizer.FromGGUF(f); err == nil {
			c.v, _ = FromTokenizer(c.tok)
		}
	})
	require.NotNil(t, c.v, "loading %s failed", c.rel)
	return c.tok, c.v
}

// sampleText draws tokens under g from v until an end token, each from the
// allowed set with random weights (exp of a standard normal, a temperature
// 1 draw over random logits), tokens holding one of closers and the end
// weighted down for the first 30 tokens, so that texts grow some
// structure, and up after, so that they finish in a test's time. It returns the text
// as the tokenizer decodes the ids, and whether it ended.
func sampleText(t testing.TB, g *Grammar, tok *tokenizer.Tokenizer, v *Vocab, rng *rand.Rand, closers string, maxTokens int) (string, bool) {
	m := NewMatcher(g, v)
	mask := make([]uint64, (v.Len()+63)/64)
	var ids []int32
	weights := make([]float64, v.Len())
	closes := make([]bool, v.Len())
	for id, b := range v.bytes {
		closes[id] = v.eog[id] || strings.ContainsAny(string(b), closers)
	}
	for len(ids) < maxTokens {
		bias := 2000.0
		if len(ids) < 30 {
			bias = 0.001
		}
		require.Positive(t, m.Mask(mask), "no token allowed after %q", decode(t, tok, ids))
		total := 0.0
		for id := range weights {
			weights[id] = 0
			if mask[id>>6]&(1<<(id&63)) == 0 {
				continue
			}
			w := math.Exp(rng.NormFloat64())
			if closes[id] {
				w *= bias
			}
			weights[id] = w
			total += w
		}
		r := rng.Float64() * total
		id := int32(0)
		for ; int(id) < len(weights)-1; id++ {
			if r -= weights[id]; r < 0 && weights[id] > 0 {
				break
			}
		}
		require.True(t, m.Allowed(id))
		require.NoError(t, m.Accept(id))
		if v.eog[id] {
			return decode(t, tok, ids), true
		}
		ids = append(ids, id)
	}
	return decode(t, tok, ids), false
}

func decode(t testing.TB, tok *tokenizer.Tokenizer, ids []int32) string {
	var b []byte
	for _, id := range ids {
		text, err := tok.Text(id)
		require.NoError(t, err)
		b = append(b, text...)
	}
	return string(b)
}

// TestSampledTextsParse: texts sampled under each grammar over both real
// vocabularies, many seeds, are sentences of the language as independent
// parsers judge them: encoding/json, Go's expression parser for the
// arithmetic, a regular expression for the repetition grammar.
func TestSampledTextsParse(t *testing.T) {
	re := regexp.MustCompile(strings.ReplaceAll(repRE, "W", wordRE))
	grammars := []struct {
		name, src, closers string
		valid              func(string) bool
	}{
		{"json", JSONGBNF, `"]}`, func(s string) bool { return json.Valid([]byte(s)) && strings.HasPrefix(s, "{") }},
		{"arith", arithGBNF, ")", func(s string) bool { _, err := goparser.ParseExpr(s); return err == nil }},
		{"repetition", repGBNF, ".,>", re.MatchString},
	}
	for kind, cv := range vocabs {
		for _, gr := range grammars {
			t.Run(kind+"/"+gr.name, func(t *testing.T) {
				tok, v := cv.get(t)
				g := mustParse(t, gr.src)
				for seed := uint64(0); seed < 20; seed++ {
					text, ended := sampleText(t, g, tok, v, rand.New(rand.NewPCG(seed, 7)), gr.closers, 400)
					require.True(t, ended, "seed %d: no end in 400 tokens: %q", seed, text)
					assert.True(t, gr.valid(text), "seed %d: %q", seed, text)
				}
			})
		}
	}
}

// TestRealVocabMaskEqualsAllowed checks the trie's mask against each
// token's own byte walk over the whole Llama 2 and Llama 3 vocabularies,
// at the states of a sampled JSON text (inside strings, after an escape,
// inside a split character).
func TestRealVocabMaskEqualsAllowed(t *testing.T) {
	for kind, cv := range vocabs {
		t.Run(kind, func(t *testing.T) {
			_, v := cv.get(t)
			g := JSON()
			rng := rand.New(rand.NewPCG(5, 6))
			m := NewMatcher(g, v)
			mask := make([]uint64, (v.Len()+63)/64)
			prefix := `{"a\u00e9": [1.5e3, "x\"é`
			for i := 0; i <= len(prefix); i++ {
				m.Mask(mask)
				for id := 0; id < v.Len(); id += 1 + rng.IntN(3) {
					require.Equal(t, m.Allowed(int32(id)), mask[id>>6]&(1<<(id&63)) != 0, "after %q: token %d %q", prefix[:i], id, v.bytes[id])
				}
				if i < len(prefix) { // advance by a token of the next byte alone
					require.NoError(t, m.Accept(singleByteToken(t, v, prefix[i])))
				}
			}
		})
	}
}

func singleByteToken(t testing.TB, v *Vocab, c byte) int32 {
	for id, b := range v.bytes {
		if len(b) == 1 && b[0] == c {
			return int32(id)
		}
	}
	t.Fatalf("no token of the byte %#x alone", c)
	return -1
}
