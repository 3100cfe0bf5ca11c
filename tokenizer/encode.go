package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// symbol is one run of bytes in the normalized text. Symbols form a doubly
// linked list so a merge is O(1); a merged-away symbol keeps n == 0.
type symbol struct {
	start, n   int32 // byte range in the normalized text
	prev, next int32 // neighbours in the list, -1 at the ends
	frozen     bool  // a user-defined piece: never merged further
}

// encoder holds the state of one Encode call.
type encoder struct {
	t       *Tokenizer
	text    string // normalized: U+2581 for spaces, dummy prefix added
	symbols []symbol
	queue   pairQueue
	// revMerge remembers how an unused piece was built, so it can be split
	// back into usable pieces (SentencePiece resegments unused pieces).
	revMerge map[string][2]string
	pushes   int // queued pairs, counted so a test can check the work is linear
}

// Encode tokenizes plain text; special-token text such as "<s>" is not
// recognized. With addSpecial it adds BOS and EOS as AddBOS and AddEOS say.
// text must be valid UTF-8: SentencePiece would replace invalid bytes with
// U+FFFD and llama.cpp would pass them on as byte tokens, and since neither
// round-trips everywhere, Encode refuses instead.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int32, error) {
	return t.EncodeWith(text, EncodeOptions{AddSpecial: addSpecial})
}

// EncodeWith tokenizes text as o says. With o.ParseSpecial, the text
// between two special tokens is encoded on its own, as llama.cpp does: a
// SentencePiece vocabulary gives each such stretch its dummy-prefix space,
// and a byte-level BPE one pre-tokenizes each apart.
func (t *Tokenizer) EncodeWith(text string, o EncodeOptions) ([]int32, error) {
	if err := checkText(text); err != nil {
		return nil, err
	}
	ids := make([]int32, 0, len(text)/3+2)
	fragments := t.special.split(text, t.cutter(o.ParseSpecial), o.Plain)
	// A text that starts with BOS itself (ParseSpecial, "<|begin_of_text|>
	// Hi") gets no second one: two BOS in a row is never what was meant.
	if o.AddSpecial && t.addBOS && (len(fragments) == 0 || fragments[0].id != t.bos) {
		ids = append(ids, t.bos)
	}
	var bpe *bpeEncoder
	if t.bpe != nil {
		bpe = &bpeEncoder{m: t.bpe}
	}
	for _, f := range fragments {
		var err error
		switch {
		case f.id >= 0:
			ids = append(ids, f.id)
		case bpe != nil:
			ids, err = bpe.encode(ids, f.text, t.unk)
		default:
			// An empty text stays empty: no dummy prefix, like SentencePiece.
			e := encoder{t: t, text: t.normalize(f.text)}
			ids, err = e.run(ids)
		}
		if err != nil {
			return nil, err
		}
	}
	if o.AddSpecial && t.addEOS {
		ids = append(ids, t.eos)
	}
	return ids, nil
}

func checkText(text string) error {
	if len(text) > maxTextBytes {
		return fmt.Errorf("tokenizer: text of %d bytes exceeds the %d-byte limit", len(text), maxTextBytes)
	}
	if utf8.ValidString(text) {
		return nil
	}
	for i, r := range text {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(text[i:]); size == 1 {
				return fmt.Errorf("%w at byte %d", ErrInvalidUTF8, i)
			}
		}
	}
	return ErrInvalidUTF8
}

// normalize applies Llama's SentencePiece normalizer: the identity rule,
// no whitespace collapsing, spaces escaped to U+2581, and a dummy prefix
// so that a word at the start tokenizes like one after a space.
func (t *Tokenizer) normalize(text string) string {
	var b strings.Builder
	b.Grow(len(text) + 3*strings.Count(text, " ") + 3)
	if t.addSpacePrefix {
		b.WriteString(spaceSymbol)
	}
	for {
		i := strings.IndexByte(text, ' ')
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		b.WriteString(text[:i])
		b.WriteString(spaceSymbol)
		text = text[i+1:]
	}
}

func (e *encoder) run(ids []int32) ([]int32, error) {
	e.split()
	e.mergeSegments()
	for i := int32(0); i != -1; i = e.symbols[i].next {
		s := e.symbols[i]
		var err error
		if ids, err = e.emit(ids, e.text[s.start:s.start+s.n]); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// mergeSegments runs the merge loop over independent stretches of text one
// at a time. Between two characters that appear next to each other in no
// piece, no merge can ever cross, so the stretches either side evolve
// independently and merging them apart gives exactly the result of one
// global queue. It keeps the queue small (and in cache) for ordinary text,
// where every space starts a new stretch.
//
// Vocabularies with unused pieces take one global queue: SentencePiece
// splits an unused piece the way it was last queued anywhere in the text,
// and only the global order reproduces "last".
func (e *encoder) mergeSegments() {
	e.queue = make(pairQueue, 0, 64)
	prev, _ := utf8.DecodeRuneInString(e.text[e.symbols[0].start:])
	for i := 1; i < len(e.symbols); i++ {
		r, _ := utf8.DecodeRuneInString(e.text[e.symbols[i].start:])
		_, joinable := e.t.spanPairs[runePair(prev, r)]
		if joinable || e.t.hasUnused {
			e.tryPair(int32(i-1), int32(i))
		} else {
			e.mergeAll()
		}
		prev = r
	}
	e.mergeAll()
}

// split makes one symbol per character, or per user-defined piece where one
// matches (longest match wins, as in SentencePiece's prefix matcher).
func (e *encoder) split() {
	e.symbols = make([]symbol, 0, len(e.text))
	for pos := 0; pos < len(e.text); {
		n, frozen := e.userDefinedAt(pos)
		if n == 0 {
			_, n = utf8.DecodeRuneInString(e.text[pos:])
		}
		idx := int32(len(e.symbols))
		e.symbols = append(e.symbols, symbol{
			start: int32(pos), n: int32(n), prev: idx - 1, next: idx + 1, frozen: frozen,
		})
		pos += n
	}
	e.symbols[len(e.symbols)-1].next = -1
}

func (e *encoder) userDefinedAt(pos int) (int, bool) {
	for _, l := range e.t.userDefinedLen {
		if pos+l <= len(e.text) && e.t.userDefined[e.text[pos:pos+l]] {
			return l, true
		}
	}
	return 0, false
}

// tryPair queues the merge of two neighbours if their concatenation is a
// piece that is not user-defined (those match whole, in split).
func (e *encoder) tryPair(left, right int32) {
	if left < 0 || right < 0 {
		return
	}
	l, r := &e.symbols[left], &e.symbols[right]
	if l.frozen || r.frozen {
		return
	}
	// Neighbours are contiguous in e.text, so the pair is a substring and
	// the map lookup allocates nothing.
	piece := e.text[l.start : r.start+r.n]
	id, ok := e.t.mergeable[piece]
	if !ok {
		return
	}
	e.pushes++
	e.queue.push(pair{score: e.t.scores[id], left: left, right: right, size: int32(len(piece))})
	if e.t.types[id] == TypeUnused {
		if e.revMerge == nil {
			e.revMerge = map[string][2]string{}
		}
		e.revMerge[piece] = [2]string{e.text[l.start : l.start+l.n], e.text[r.start : r.start+r.n]}
	}
}

// mergeAll applies the best queued merge until none is left. Entries whose
// symbols changed since they were queued are stale and skipped: symbols only
// grow, so a changed pair no longer adds up to the queued size.
func (e *encoder) mergeAll() {
	for len(e.queue) > 0 {
		p := e.queue.pop()
		l, r := &e.symbols[p.left], &e.symbols[p.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != p.size {
			continue
		}
		joinSymbols(e.symbols, p.left, p.right)
		e.tryPair(l.prev, p.left)
		e.tryPair(p.left, l.next)
	}
}

// emit appends the ids for one final symbol.
func (e *encoder) emit(ids []int32, piece string) ([]int32, error) {
	if id, ok := e.t.reserved[piece]; ok {
		return append(ids, id), nil
	}
	if id, ok := e.t.mergeable[piece]; ok {
		if e.t.types[id] != TypeUnused {
			return append(ids, id), nil
		}
		if parts, ok := e.revMerge[piece]; ok {
			var err error
			if ids, err = e.emit(ids, parts[0]); err != nil {
				return nil, err
			}
			return e.emit(ids, parts[1])
		}
		return append(ids, id), nil
	}
	return e.t.emitUnknown(ids, piece)
}

// emitUnknown handles a symbol with no piece: byte tokens when the vocab has
// them (SentencePiece's byte fallback), else one UNK for the symbol.
func (t *Tokenizer) emitUnknown(ids []int32, piece string) ([]int32, error) {
	if t.hasByteToks {
		for i := 0; i < len(piece); i++ {
			id := t.byteID[piece[i]]
			if id < 0 {
				id = t.unk
			}
			if id < 0 {
				return nil, fmt.Errorf("tokenizer: byte 0x%02X has no <0x%02X> token and the vocabulary has no UNK", piece[i], piece[i])
			}
			ids = append(ids, id)
		}
		return ids, nil
	}
	if t.unk < 0 {
		return nil, fmt.Errorf("tokenizer: %q has no piece and the vocabulary has neither byte tokens nor UNK", piece)
	}
	return append(ids, t.unk), nil
}

// joinSymbols merges symbols[right] into its left neighbour symbols[left]
// and unlinks it.
func joinSymbols(symbols []symbol, left, right int32) {
	l, r := &symbols[left], &symbols[right]
	l.n += r.n
	r.n = 0
	l.next = r.next
	if r.next >= 0 {
		symbols[r.next].prev = left
	}
}
