package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Byte-level BPE (tokenizer.ggml.model "gpt2", as in GPT-2 and Llama 3).
// Text is split into words by the pre-tokenizer; each word's bytes are
// written as GPT-2's printable stand-in characters (byteChar), and
// neighbouring symbols merge in the order of tokenizer.ggml.merges (the
// lowest rank first, ties to the leftmost pair), as llama.cpp's
// llm_tokenizer_bpe and Hugging Face's BPE model do.

// byteChar is the character GPT-2's bytes_to_unicode gives each byte: the
// printable Latin-1 bytes stand for themselves, the other 68 bytes take
// U+0100 onwards in byte order, so that no piece holds a space or a
// control character.
var byteChar, charByte = byteCharTables()

func byteCharTables() ([256]rune, map[rune]byte) {
	var chars [256]rune
	inverse := make(map[rune]byte, 256)
	next := rune(256)
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			chars[b] = rune(b)
		} else {
			chars[b] = next
			next++
		}
		inverse[chars[b]] = byte(b)
	}
	return chars, inverse
}

// maxMerges keeps every rank exact as a float32 queue score.
const maxMerges = 1 << 24

// bpeModel is what a "gpt2" vocabulary adds to the token table.
type bpeModel struct {
	pre     *preTokenizer
	nTokens int32
	// ids maps every piece to its id (the highest for a duplicate, as in
	// llama.cpp) and every merge half or result that is no piece to an id
	// from nTokens up, so that merging compares integers.
	ids    map[string]int32
	merges map[uint64]bpeMerge // keyed by pairKey(left id, right id)
	charID [256]int32          // id of each byte's character, -1 when it is in no piece or merge
}

type bpeMerge struct {
	rank   int32 // position in tokenizer.ggml.merges: lower merges first
	result int32 // id of the merged string
}

func pairKey(left, right int32) uint64 { return uint64(uint32(left))<<32 | uint64(uint32(right)) }

func newBPEModel(pieces []string, types []int32, merges []string, pre string) (*bpeModel, error) {
	p, err := lookupPre(pre)
	if err != nil {
		return nil, err
	}
	if len(merges) > maxMerges {
		return nil, fmt.Errorf("tokenizer: %d merges is more than the %d supported", len(merges), maxMerges)
	}
	m := &bpeModel{pre: p, nTokens: int32(len(pieces)),
		ids: make(map[string]int32, len(pieces)+len(merges)/4), merges: make(map[uint64]bpeMerge, len(merges))}
	for i, piece := range pieces {
		m.ids[piece] = int32(i)
	}
	for rank, line := range merges {
		// llama.cpp splits at the first space after the first byte, so
		// a left half may itself be a space character.
		cut := strings.IndexByte(line[min(1, len(line)):], ' ') + 1
		if cut <= 0 || cut == len(line)-1 {
			return nil, fmt.Errorf("tokenizer: merge %d %q is not \"left right\"", rank, line)
		}
		left, right := line[:cut], line[cut+1:]
		key := pairKey(m.intern(left), m.intern(right))
		if _, dup := m.merges[key]; !dup { // the first (highest priority) wins, as in llama.cpp
			m.merges[key] = bpeMerge{rank: int32(rank), result: m.intern(left + right)}
		}
	}
	for b := range m.charID {
		m.charID[b] = -1
		if id, ok := m.ids[string(byteChar[b])]; ok {
			m.charID[b] = id
		}
	}
	return m, nil
}

func (m *bpeModel) intern(s string) int32 {
	if id, ok := m.ids[s]; ok {
		return id
	}
	id := int32(len(m.ids)) + m.nTokens // above every piece id
	m.ids[s] = id
	return id
}

// decodePiece turns a piece's stand-in characters back into bytes. A
// character outside the table (a malformed vocabulary) passes as it is.
func (m *bpeModel) decodePiece(p string) []byte {
	out := make([]byte, 0, len(p))
	for _, r := range p {
		if b, ok := charByte[r]; ok {
			out = append(out, b)
		} else {
			out = utf8.AppendRune(out, r)
		}
	}
	return out
}

// bpeEncoder holds one Encode call's scratch space, reused across words.
type bpeEncoder struct {
	m       *bpeModel
	runes   []rune
	ends    []int
	mapped  []byte   // the word in stand-in characters
	symbols []symbol // one per byte of the word at first
	symIDs  []int32  // [len(symbols)] id of each symbol's current string
	queue   pairQueue
}

// encode appends the tokens of one text fragment (no special tokens in it).
func (e *bpeEncoder) encode(ids []int32, text string, unk int32) ([]int32, error) {
	e.runes = append(e.runes[:0], []rune(text)...)
	e.ends = e.m.pre.split(e.runes, 0, len(e.runes), e.ends[:0])
	start, byteStart := 0, 0
	for _, end := range e.ends {
		n := 0
		for _, r := range e.runes[start:end] {
			n += utf8.RuneLen(r)
		}
		var err error
		if ids, err = e.word(ids, text[byteStart:byteStart+n], unk); err != nil {
			return nil, err
		}
		start, byteStart = end, byteStart+n
	}
	return ids, nil
}

// word appends the tokens of one pre-tokenized word.
func (e *bpeEncoder) word(ids []int32, w string, unk int32) ([]int32, error) {
	m := e.m
	e.mapped = e.mapped[:0]
	e.symbols = e.symbols[:0]
	e.symIDs = e.symIDs[:0]
	for i := 0; i < len(w); i++ {
		start := len(e.mapped)
		e.mapped = utf8.AppendRune(e.mapped, byteChar[w[i]])
		idx := int32(i)
		e.symbols = append(e.symbols, symbol{start: int32(start), n: int32(len(e.mapped) - start), prev: idx - 1, next: idx + 1})
		e.symIDs = append(e.symIDs, m.charID[w[i]])
	}
	e.symbols[len(e.symbols)-1].next = -1
	if m.pre.ignoreMerges {
		// The map lookup with a converted []byte key does not allocate.
		if id, ok := m.ids[string(e.mapped)]; ok && id < m.nTokens {
			return append(ids, id), nil
		}
	}
	e.queue = e.queue[:0]
	for i := 1; i < len(e.symbols); i++ {
		e.tryPair(int32(i-1), int32(i))
	}
	e.mergeAll()
	for i := int32(0); i != -1; i = e.symbols[i].next {
		var err error
		if ids, err = e.emit(ids, i, unk); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

func (e *bpeEncoder) tryPair(left, right int32) {
	if left < 0 || right < 0 {
		return
	}
	mg, ok := e.m.merges[pairKey(e.symIDs[left], e.symIDs[right])]
	if !ok {
		return
	}
	e.queue.push(pair{score: -float32(mg.rank), left: left, right: right,
		size: e.symbols[left].n + e.symbols[right].n})
}

// mergeAll applies the queued merges, lowest rank first. An entry whose
// symbols changed since it was queued is stale: symbols only grow, so its
// halves no longer add up to the queued size.
func (e *bpeEncoder) mergeAll() {
	for len(e.queue) > 0 {
		p := e.queue.pop()
		l, r := &e.symbols[p.left], &e.symbols[p.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != p.size {
			continue
		}
		e.symIDs[p.left] = e.m.merges[pairKey(e.symIDs[p.left], e.symIDs[p.right])].result
		joinSymbols(e.symbols, p.left, p.right)
		e.tryPair(l.prev, p.left)
		e.tryPair(p.left, l.next)
	}
}

// emit appends the token of a final symbol. A symbol that is no piece (a
// merge whose result the vocabulary lacks) falls back to one token per
// byte, and a byte without a piece to UNK.
func (e *bpeEncoder) emit(ids []int32, i int32, unk int32) ([]int32, error) {
	if id := e.symIDs[i]; id >= 0 && id < e.m.nTokens {
		return append(ids, id), nil
	}
	s := e.symbols[i]
	for _, r := range string(e.mapped[s.start : s.start+s.n]) {
		b := charByte[r]
		switch {
		case e.m.charID[b] >= 0 && e.m.charID[b] < e.m.nTokens:
			ids = append(ids, e.m.charID[b])
		case unk >= 0:
			ids = append(ids, unk)
		default:
			return nil, fmt.Errorf("tokenizer: byte 0x%02X has no token (%q) and the vocabulary has no UNK", b, string(r))
		}
	}
	return ids, nil
}
