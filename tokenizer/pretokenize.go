package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// A byte-level BPE vocabulary first splits text into words with a regular
// expression (the tokenizer.json "pre_tokenizer" of Hugging Face, named by
// tokenizer.ggml.pre in GGUF); merges never cross a word boundary. Go's
// regexp has no lookahead, which these expressions need (\s+(?!\S)), so
// each is written out by hand below as a scanner over the text's runes.
// Each scanner tries the expression's alternatives in order at the current
// position, as a backtracking regex engine does, and the comment above each
// case quotes the alternative it implements.

// preTokenizer is one tokenizer.ggml.pre value.
type preTokenizer struct {
	// split appends the end (a rune index) of each word of rs[start:end].
	split func(rs []rune, start, end int, ends []int) []int
	// ignoreMerges: a word that is a token as a whole is emitted as that
	// token without merging (Llama 3's tokenizer.json sets
	// "ignore_merges": true).
	ignoreMerges bool
	// addBOS is the default of tokenizer.ggml.add_bos_token.
	addBOS bool
}

var (
	preLlama3 = &preTokenizer{split: splitLlama3, ignoreMerges: true, addBOS: true}
	preGPT2   = &preTokenizer{split: splitGPT2}
	preDef    = &preTokenizer{split: splitDefault}
)

// preTokenizers maps the tokenizer.ggml.pre names llama.cpp writes to their
// split. "" (a file without the key) means "default", as in llama.cpp.
var preTokenizers = map[string]*preTokenizer{
	"":            preDef,
	"default":     preDef,
	"llama-bpe":   preLlama3,
	"llama3":      preLlama3,
	"llama-v3":    preLlama3,
	"gpt-2":       preGPT2,
	"gpt2":        preGPT2,
	"phi-2":       preGPT2,
	"roberta-bpe": preGPT2,
}

// PreTokenizers lists the tokenizer.ggml.pre values a "gpt2" vocabulary may
// name.
func PreTokenizers() []string {
	var names []string
	for name := range preTokenizers {
		if name != "" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func lookupPre(name string) (*preTokenizer, error) {
	p, ok := preTokenizers[name]
	if !ok {
		return nil, fmt.Errorf("tokenizer: pre-tokenizer %q (tokenizer.ggml.pre) is not supported (supported: %s)",
			name, strings.Join(PreTokenizers(), ", "))
	}
	return p, nil
}

// The character classes of the expressions. \s is Unicode White_Space, as
// in the Rust and Python regex engines the expressions were written for.
func isL(r rune) bool     { return unicode.IsLetter(r) }
func isN(r rune) bool     { return unicode.IsNumber(r) }
func isS(r rune) bool     { return unicode.IsSpace(r) }
func isOther(r rune) bool { return !isS(r) && !isL(r) && !isN(r) } // [^\s\p{L}\p{N}]
func isCRLF(r rune) bool  { return r == '\r' || r == '\n' }

// runEnd is the end of the run of runes from p that satisfy class.
func runEnd(rs []rune, p, end int, class func(rune) bool) int {
	for p < end && class(rs[p]) {
		p++
	}
	return p
}

// contraction matches 's 't 're 've 'm 'll 'd at p (ASCII case folded with
// fold) and returns its end, or p.
func contraction(rs []rune, p, end int, fold bool) int {
	if rs[p] != '\'' || p+1 >= end {
		return p
	}
	lower := func(r rune) rune {
		if fold && r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	switch c1 := lower(rs[p+1]); c1 {
	case 's', 't', 'm', 'd':
		return p + 2
	case 'r', 'v', 'l':
		if p+2 < end {
			c2 := lower(rs[p+2])
			if (c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l') {
				return p + 3
			}
		}
	}
	return p
}

// spaceRun matches `\s+(?!\S)|\s+` at a whitespace rune p: the run, less its
// last rune when a non-space follows and the run is longer than one (that
// last space then joins the next word).
func spaceRun(rs []rune, p, end int) int {
	e := runEnd(rs, p, end, isS)
	if e < end && e-p > 1 {
		return e - 1
	}
	return e
}

// wordsOf makes a split from a function that returns the end of the word
// starting at p.
func wordsOf(word func(rs []rune, p, end int) int) func(rs []rune, p, end int, ends []int) []int {
	return func(rs []rune, p, end int, ends []int) []int {
		for p < end {
			p = word(rs, p, end)
			ends = append(ends, p)
		}
		return ends
	}
}

// splitLlama3 is Llama 3's expression:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
var splitLlama3 = wordsOf(llama3Word)

func llama3Word(rs []rune, p, end int) int {
	r := rs[p]
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if e := contraction(rs, p, end, true); e > p {
		return e
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+ : a letter run, with one leading rune that
	// is neither a newline, a letter nor a number.
	if isL(r) {
		return runEnd(rs, p, end, isL)
	}
	if !isCRLF(r) && !isN(r) && p+1 < end && isL(rs[p+1]) {
		return runEnd(rs, p+1, end, isL)
	}
	// \p{N}{1,3}
	if isN(r) {
		return min(runEnd(rs, p, end, isN), p+3)
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	q := p
	if r == ' ' && p+1 < end && isOther(rs[p+1]) {
		q++
	}
	if isOther(rs[q]) {
		return runEnd(rs, runEnd(rs, q, end, isOther), end, isCRLF)
	}
	// \s*[\r\n]+ : the whitespace run up to its last newline.
	e := runEnd(rs, p, end, isS)
	for i := e - 1; i >= p; i-- {
		if isCRLF(rs[i]) {
			return i + 1
		}
	}
	// \s+(?!\S)|\s+ (every rune is a letter, number, space or other, so
	// r is a space here)
	return spaceRun(rs, p, end)
}

// splitGPT2 is GPT-2's expression:
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
var splitGPT2 = wordsOf(gpt2Word)

func gpt2Word(rs []rune, p, end int) int {
	if e := contraction(rs, p, end, false); e > p {
		return e
	}
	//  ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+
	q := p
	if rs[p] == ' ' && p+1 < end {
		q++
	}
	for _, class := range []func(rune) bool{isL, isN, isOther} {
		if class(rs[q]) {
			return runEnd(rs, q, end, class)
		}
	}
	// \s+(?!\S)|\s+
	return spaceRun(rs, p, end)
}

// splitDefault is llama.cpp's "default" pre-tokenizer (what it uses for a
// "gpt2" vocabulary without tokenizer.ggml.pre): four expressions, each
// splitting the pieces the one before left, with the text between two
// matches kept as a piece of its own:
//
//	[\p{P}\$\+<=>\^~\|]+
//	GPT-2's expression
//	\p{N}+
//	[0-9][0-9][0-9]
func splitDefault(rs []rune, start, end int, ends []int) []int {
	pieces := refine(rs, []int{start, end}, func(rs []rune, p, end int) int {
		return runEnd(rs, p, end, isDefaultPunct)
	})
	words := []int{start}
	for i := 0; i+1 < len(pieces); i++ {
		words = splitGPT2(rs, pieces[i], pieces[i+1], words)
	}
	words = refine(rs, words, func(rs []rune, p, end int) int { return runEnd(rs, p, end, isN) })
	words = refine(rs, words, func(rs []rune, p, end int) int {
		if p+3 <= end && isDigit(rs[p]) && isDigit(rs[p+1]) && isDigit(rs[p+2]) {
			return p + 3
		}
		return p
	})
	return append(ends, words[1:]...)
}

// isDefaultPunct is [\p{P}\$\+<=>\^~\|].
func isDefaultPunct(r rune) bool {
	return unicode.IsPunct(r) || strings.ContainsRune("$+<=>^~|", r)
}

func isDigit(r rune) bool { return r >= '0' && r <= '9' }

// refine splits each piece bounds[i]..bounds[i+1] (bounds holds the first
// start, then every end) around the matches of match, which returns the end
// of a match starting at p, or p for none. Matches are found left to right
// without overlap, as a regex search iterator finds them.
func refine(rs []rune, bounds []int, match func(rs []rune, p, end int) int) []int {
	out := []int{bounds[0]}
	for i := 0; i+1 < len(bounds); i++ {
		gap, end := bounds[i], bounds[i+1]
		for p := gap; p < end; {
			e := match(rs, p, end)
			if e == p {
				p++
				continue
			}
			if p > gap {
				out = append(out, p)
			}
			out = append(out, e)
			gap, p = e, e
		}
		if gap < end {
			out = append(out, end)
		}
	}
	return out
}
