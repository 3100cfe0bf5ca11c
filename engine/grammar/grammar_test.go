package grammar

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// byteVocab has one token per byte and an end token (256): the matcher on
// it is the grammar's recognizer over bytes, with no trie in the way.
var byteVocab = func() *Vocab {
	tokens := make([][]byte, 257)
	for i := 0; i < 256; i++ {
		tokens[i] = []byte{byte(i)}
	}
	v, err := NewVocab(tokens, []int32{256})
	if err != nil {
		panic(err)
	}
	return v
}()

// prefixOK says whether s is a prefix of some sentence of g, and whole
// whether it is a sentence, by feeding its bytes one at a time.
func prefixOK(g *Grammar, s string) (prefix, whole bool) {
	m := NewMatcher(g, byteVocab)
	for i := 0; i < len(s); i++ {
		if m.Accept(int32(s[i])) != nil {
			return false, false
		}
	}
	return true, m.CanEnd()
}

func matches(g *Grammar, s string) bool {
	_, whole := prefixOK(g, s)
	return whole
}

func mustParse(t testing.TB, src string) *Grammar {
	t.Helper()
	g, err := Parse(src)
	require.NoError(t, err, "grammar:\n%s", src)
	return g
}

func TestLanguage(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		yes, no   []string
	}{
		{"literal escapes", `root ::= "a\n\t\"\\\x41\u00e9\U0001F600"`, []string{"a\n\t\"\\Aé😀"}, []string{"", "a", "a\n\t\"\\Aé"}},
		{"alternation and grouping", `root ::= ("ab" | "c") "d" | "e"`, []string{"abd", "cd", "e"}, []string{"ab", "d", "abde", "ce"}},
		{"star plus optional", `root ::= "a"* "b"+ "c"?`, []string{"b", "aab", "abbbc", "bc"}, []string{"", "a", "c", "abcc", "ba"}},
		{"counted", `root ::= "x"{2} "y"{1,3} "z"{2,} "w"{,1}`, []string{"xxyzz", "xxyyyzzzzw"}, []string{"xyzz", "xxyyyyzz", "xxyz", "xxyzzww"}},
		{"classes", `root ::= [a-cx] [^a-z] [\x00-\x1F\]]`, []string{"aA\n", "xé]", "c😀\x01"}, []string{"dA\n", "ab\n", "aA^", "aAb"}},
		{"multibyte range", `root ::= [α-ω]+`, []string{"α", "βγω"}, []string{"", "a", "Α", "αa"}},
		{"negated multibyte", `root ::= [^α-ω"]`, []string{"a", "Α", "€", "😀"}, []string{"α", "\"", "ω", "", "ab"}},
		{"any char", `root ::= . "!"`, []string{"a!", "é!", "😀!"}, []string{"!", "ab!", "\xff!"}},
		{"recursion", `root ::= "(" root ")" | ""`, []string{"", "()", "((()))"}, []string{"(", "())", ")("}},
		{"comments and newlines", "# head\nroot ::= a | # first\n  b # second\na ::= \"a\"\nb ::= (\n \"b\"\n \"c\" )\n", []string{"a", "bc"}, []string{"b", "ab"}},
		{"rule names", `root ::= my-rule_2 ; my-rule_2 ::= "q"`, nil, nil},
		{"nullable rules", `root ::= e e "x" e
e ::= "" | "y"`, []string{"x", "yyxy", "yx"}, []string{"yyyx", "xyy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "rule names" {
				_, err := Parse(tc.src)
				require.Error(t, err, "a ; is not GBNF")
				g := mustParse(t, "root ::= my-rule_2\nmy-rule_2 ::= \"q\"")
				assert.True(t, matches(g, "q"))
				return
			}
			g := mustParse(t, tc.src)
			for _, s := range tc.yes {
				assert.True(t, matches(g, s), "%q should match", s)
			}
			for _, s := range tc.no {
				assert.False(t, matches(g, s), "%q should not match", s)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`a ::= "x"`, "no rule named root"},
		{`root ::= b`, `rule "b" is used but never defined`},
		{"root ::= \"x\"\nroot ::= \"y\"", `rule "root" is defined twice`},
		{`root ::= "x`, "line 1 column 12: unterminated literal"},
		{`root ::= [a-`, "unterminated character class"},
		{`root ::= [z-a]`, "backwards"},
		{`root ::= ("x"`, "expected ) to close the group"},
		{`root ::= * "x"`, "follows nothing"},
		{`root ::= "x"{3,2}`, "maximum is below the minimum"},
		{`root ::= "x"{99999}`, "at most 1000"},
		{`root ::= "\q"`, `unknown escape \q`},
		{`root ::= "\uD800"`, "not a Unicode scalar value"},
		{`root ::= root "x" | "y"`, `rule "root" is left-recursive`},
		{"root ::= a\na ::= (\"x\"?)*", `rule "a" is left-recursive`},
		{`root = "x"`, "expected ::="},
		{`root ::= <[1000]>`, "token references"},
		{"root ::= \"x\" )", "expected the end of rule"},
		{"root ::= \"\xff\"", "not valid UTF-8"},
	} {
		_, err := Parse(tc.src)
		if assert.Error(t, err, "%q", tc.src) {
			assert.Contains(t, err.Error(), tc.want, "%q", tc.src)
		}
	}
}

// TestJSONGrammarAgreesWithEncodingJSON: whatever the JSON grammar accepts
// is JSON (encoding/json, an independent parser, says so), and JSON as
// encoding/json writes it, compact and indented, is accepted; every prefix
// of it is a prefix of the language.
func TestJSONGrammarAgreesWithEncodingJSON(t *testing.T) {
	g := JSON()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 120; i++ {
		v := map[string]any{}
		for k := rng.IntN(4); k > 0; k-- {
			v[randString(rng)] = randValue(rng, 3)
		}
		for _, b := range [][]byte{must(json.Marshal(v)), must(json.MarshalIndent(v, "", "  "))} {
			s := string(b)
			require.True(t, matches(g, s), "valid JSON refused: %s", s)
			for j := 0; j < len(s); j++ {
				p, _ := prefixOK(g, s[:j])
				require.True(t, p, "prefix %q of %s refused", s[:j], s)
			}
			// Mutants: whatever the grammar still accepts must be JSON.
			for k := 0; k < 20; k++ {
				m := []byte(s)
				at := rng.IntN(len(m))
				switch rng.IntN(3) {
				case 0:
					m = append(m[:at], m[at+1:]...)
				case 1:
					m[at] = `{}[]",:0-.eE \\u"tfn`[rng.IntN(19)]
				default:
					m = append(m[:at], append([]byte{`{}[]",:1 `[rng.IntN(9)]}, m[at:]...)...)
				}
				if matches(g, string(m)) {
					assert.True(t, json.Valid(m), "the grammar accepts invalid JSON %q", m)
				}
			}
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func randString(rng *rand.Rand) string {
	alphabet := []rune("ab Z\"\\/\n\té€😀\x01")
	var b strings.Builder
	for n := rng.IntN(5); n > 0; n-- {
		b.WriteRune(alphabet[rng.IntN(len(alphabet))])
	}
	return b.String()
}

func randValue(rng *rand.Rand, depth int) any {
	switch k := rng.IntN(7); {
	case k == 0 && depth > 0:
		v := map[string]any{}
		for n := rng.IntN(3); n > 0; n-- {
			v[randString(rng)] = randValue(rng, depth-1)
		}
		return v
	case k == 1 && depth > 0:
		var v []any
		for n := rng.IntN(3); n > 0; n-- {
			v = append(v, randValue(rng, depth-1))
		}
		return v
	case k == 2:
		return randString(rng)
	case k == 3:
		return rng.NormFloat64() * 1e3
	case k == 4:
		return rng.IntN(2) == 0
	case k == 5:
		return nil
	default:
		return rng.IntN(100000) - 50000
	}
}

// smallVocab is a vocabulary of short pieces over JSON's and arithmetic's
// bytes, with multi-byte characters whole and split (a token that ends
// inside é or 😀), and an end token.
func smallVocab(t testing.TB, rng *rand.Rand) (*Vocab, [][]byte) {
	pieces := []string{"{", "}", "[", "]", "\"", ":", ",", " ", "\n", "\\", "u", "a", "b", "x", "0", "1", "9", "-", "+", "*", "/", "(", ")", ".", "e",
		"é", "\xc3", "\xa9", "😀", "\xf0\x9f", "\x98\x80", "\x9f\x98\x80", "\xff",
		"{\"", "\":", "\",", "\"}", "true", "null", "fal", "se", "12", "3.5", "(1", "+2)", "ab", "a\"", "\\\"", "\\u00", "e9", "é\"", "\xa9\"", "ααω", "Z",
	}
	for len(pieces) < 200 { // random joins of the above
		pieces = append(pieces, pieces[rng.IntN(len(pieces))]+pieces[rng.IntN(len(pieces))])
	}
	tokens := make([][]byte, len(pieces)+2)
	for i, p := range pieces {
		tokens[i] = []byte(p)
	}
	// tokens[len(pieces)] is a control token (nil bytes), the last the end.
	v, err := NewVocab(tokens, []int32{int32(len(tokens) - 1)})
	require.NoError(t, err)
	return v, tokens
}

const arithGBNF = `root   ::= expr
expr   ::= term (ws [-+] ws term)*
term   ::= factor (ws [*/] ws factor)*
factor ::= number | "(" ws expr ws ")"
number ::= ("0" | [1-9] [0-9]{0,3}) ("." [0-9]{1,3})?
ws     ::= " "?
`

// repGBNF has counted repetition, classes with ranges, negation and
// multi-byte characters; wordRE is the same language as a regular
// expression (the independent check).
const repGBNF = `root ::= word ("," " "? word){0,5} "."
word ::= [a-zA-Z_] [a-zA-Z0-9_]{0,7} | [α-ω]{1,3} | "<" [^<>\n]{1,10} ">"
`
const repRE = `^(?:W)(?:, ?(?:W)){0,5}\.$`
const wordRE = `[a-zA-Z_][a-zA-Z0-9_]{0,7}|[α-ω]{1,3}|<[^<>\n]{1,10}>`

// TestMaskEqualsBruteForce walks random paths through each grammar over a
// small vocabulary and checks, at every step, that the mask (trie, cached
// masks) is exactly the tokens whose text keeps the whole text a prefix of
// the language, asked of a fresh byte-at-a-time recognizer per token.
func TestMaskEqualsBruteForce(t *testing.T) {
	for name, src := range map[string]string{"json": JSONGBNF, "arith": arithGBNF, "repetition": repGBNF} {
		t.Run(name, func(t *testing.T) {
			g := mustParse(t, src)
			rng := rand.New(rand.NewPCG(3, 4))
			v, tokens := smallVocab(t, rng)
			end := int32(len(tokens) - 1)
			mask := make([]uint64, (v.Len()+63)/64)
			for walk := 0; walk < 12; walk++ {
				m := NewMatcher(g, v)
				text := ""
				for step := 0; step < 40; step++ {
					n := m.Mask(mask)
					var allowed []int32
					for id := range tokens {
						want := false
						switch {
						case int32(id) == end:
							_, want = prefixOK(g, text)
						case tokens[id] != nil:
							want, _ = prefixOK(g, text+string(tokens[id]))
						}
						got := mask[id>>6]&(1<<(id&63)) != 0
						require.Equal(t, want, got, "after %q, token %d %q", text, id, tokens[id])
						require.Equal(t, want, m.Allowed(int32(id)), "Allowed after %q, token %q", text, tokens[id])
						if got {
							allowed = append(allowed, int32(id))
						}
					}
					require.Equal(t, len(allowed), n)
					if len(allowed) == 0 {
						break
					}
					id := allowed[rng.IntN(len(allowed))]
					require.NoError(t, m.Accept(id))
					if id == end {
						assert.True(t, matches(g, text))
						break
					}
					text += string(tokens[id])
				}
			}
		})
	}
}

func TestAcceptRefusesAndEnds(t *testing.T) {
	g := mustParse(t, `root ::= "ab"`)
	m := NewMatcher(g, byteVocab)
	require.Error(t, m.Accept('b'))
	require.Error(t, m.Accept(256), "the end before the grammar can end")
	require.NoError(t, m.Accept('a'))
	require.NoError(t, m.Accept('b'))
	assert.True(t, m.CanEnd())
	require.NoError(t, m.Accept(256))
	assert.True(t, m.Ended())
	assert.False(t, m.Allowed('a'))
	mask := make([]uint64, 5)
	assert.Equal(t, 0, m.Mask(mask))
}

func ExampleParse() {
	g, err := Parse(`root ::= "yes" | "no"`)
	if err != nil {
		panic(err)
	}
	fmt.Println(matches(g, "yes"), matches(g, "maybe"))
	// Output: true false
}

// FuzzParse: no GBNF text makes Parse panic or loop, and a grammar it
// accepts can be matched against the text's own bytes without either.
func FuzzParse(f *testing.F) {
	for _, s := range []string{JSONGBNF, arithGBNF, repGBNF, `root ::= "a"{2,5} [^\n]* .`, "root ::= (\"x\" | [a-c\\]-])+\n# c\n", `root ::= [\u00e9-\U0001F600]?`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		g, err := Parse(src)
		if err != nil {
			return
		}
		m := NewMatcher(g, byteVocab)
		for i := 0; i < len(src) && i < 64; i++ {
			if m.Accept(int32(src[i])) != nil {
				break
			}
		}
		m.CanEnd()
	})
}
