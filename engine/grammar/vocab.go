package grammar

import (
	"fmt"
	"sort"

	"github.com/modrun/modrun/tokenizer"
)

// A Vocab is a vocabulary as the grammar sees it: each token's bytes, in a
// trie, so that a mask walks shared prefixes once and drops a whole
// subtree of tokens at the first byte the grammar refuses. Build one per
// model; it is immutable and shared by every Matcher.
type Vocab struct {
	n     int
	bytes [][]byte // token id -> the bytes it adds to the text; nil: never allowed
	eog   []bool   // end-of-generation tokens: allowed when the grammar can end

	// The trie, node 0 its root: node i's edges are edges[edgeStart[i]:
	// edgeStart[i+1]], sorted by byte; the tokens whose bytes end at node
	// i are toks[tokStart[i]:tokStart[i+1]].
	edgeStart []int32
	edgeByte  []byte
	edgeChild []int32
	tokStart  []int32
	toks      []int32
}

// NewVocab builds the vocabulary of tokens (token id -> its bytes; an
// empty or nil entry marks a token the grammar never allows: control
// tokens, unknown) with eog the end-of-generation ids.
func NewVocab(tokens [][]byte, eog []int32) (*Vocab, error) {
	v := &Vocab{n: len(tokens), bytes: make([][]byte, len(tokens)), eog: make([]bool, len(tokens))}
	for _, id := range eog {
		if id < 0 || int(id) >= len(tokens) {
			return nil, fmt.Errorf("grammar: end-of-generation token %d is outside the vocabulary [0, %d)", id, len(tokens))
		}
		v.eog[id] = true
	}
	type tnode struct {
		kids map[byte]int32
		toks []int32
	}
	nodes := []tnode{{}}
	for id, b := range tokens {
		if len(b) == 0 || v.eog[id] {
			continue
		}
		v.bytes[id] = b
		at := int32(0)
		for _, c := range b {
			next, ok := nodes[at].kids[c]
			if !ok {
				next = int32(len(nodes))
				nodes = append(nodes, tnode{})
				if nodes[at].kids == nil {
					nodes[at].kids = map[byte]int32{}
				}
				nodes[at].kids[c] = next
			}
			at = next
		}
		nodes[at].toks = append(nodes[at].toks, int32(id))
	}
	// Lay the trie out flat, in node order (a child's index is always
	// greater than its parent's).
	v.edgeStart = make([]int32, len(nodes)+1)
	v.tokStart = make([]int32, len(nodes)+1)
	for i, nd := range nodes {
		v.edgeStart[i] = int32(len(v.edgeByte))
		v.tokStart[i] = int32(len(v.toks))
		keys := make([]int, 0, len(nd.kids))
		for c := range nd.kids {
			keys = append(keys, int(c))
		}
		sort.Ints(keys)
		for _, c := range keys {
			v.edgeByte = append(v.edgeByte, byte(c))
			v.edgeChild = append(v.edgeChild, nd.kids[byte(c)])
		}
		v.toks = append(v.toks, nd.toks...)
	}
	v.edgeStart[len(nodes)] = int32(len(v.edgeByte))
	v.tokStart[len(nodes)] = int32(len(v.toks))
	return v, nil
}

// Len is the number of tokens.
func (v *Vocab) Len() int { return v.n }

// FromTokenizer is tok's vocabulary as the grammar sees it: each token's
// bytes in the middle of a text (SentencePiece's ▁ as a space, <0xNN> as
// its byte, byte-level BPE's characters as their bytes); control, unknown
// and unused tokens are never allowed, and the end-of-generation tokens
// only where the grammar can end.
func FromTokenizer(tok *tokenizer.Tokenizer) (*Vocab, error) {
	tokens := make([][]byte, tok.NVocab())
	for id := range tokens {
		ty, err := tok.Type(int32(id))
		if err != nil {
			return nil, err
		}
		if ty != tokenizer.TypeNormal && ty != tokenizer.TypeByte && ty != tokenizer.TypeUserDefined {
			continue
		}
		if tokens[id], err = tok.Text(int32(id)); err != nil {
			return nil, err
		}
	}
	return NewVocab(tokens, tok.EndOfGeneration())
}
