package tokenizer

import (
	"slices"
)

// EncodeOptions control EncodeWith.
type EncodeOptions struct {
	// AddSpecial adds BOS and EOS as the vocabulary asks (AddBOS, AddEOS).
	AddSpecial bool
	// ParseSpecial reads the text of a control or unknown token in the
	// input, such as "<|eot_id|>" or "</s>", as that token. Without it such
	// text is plain text, so a user typing "</s>" cannot end a turn. Chat
	// templates need it: their markers are control tokens.
	ParseSpecial bool
	// Plain lists byte ranges of the text that stay plain text even with
	// ParseSpecial, sorted and apart: a control or unknown piece that
	// overlaps one is not cut out. A chat prompt marks its messages' content
	// so (ChatPrompt.PlainSpans): the template's markup becomes control
	// tokens, what a user typed never does.
	Plain []Span
}

// Span is the byte range [Start, End) of a text.
type Span struct{ Start, End int }

// plainCursor answers, for positions that only grow, whether a range
// overlaps one of the sorted spans.
type plainCursor struct {
	spans []Span
	k     int
}

func (c *plainCursor) overlaps(start, end int) bool {
	for c.k < len(c.spans) && c.spans[c.k].End <= start {
		c.k++
	}
	return c.k < len(c.spans) && c.spans[c.k].Start < end
}

// specialMatcher finds the pieces that are cut out of the text before it is
// encoded: control, unknown and user-defined ones.
type specialMatcher struct {
	byText  map[string]int32 // piece -> id (the highest id for a duplicate)
	types   []int32          // [nVocab] the vocabulary's types
	lengths []int            // distinct piece lengths in bytes, longest first
	first   [256]bool        // bytes a special piece starts with
}

func newSpecialMatcher(pieces []string, types []int32) specialMatcher {
	m := specialMatcher{types: types}
	seen := map[int]bool{}
	for i, p := range pieces {
		switch types[i] {
		case TypeControl, TypeUnknown, TypeUserDefined:
		default:
			continue
		}
		if p == "" {
			continue
		}
		if m.byText == nil {
			m.byText = map[string]int32{}
		}
		m.byText[p] = int32(i)
		m.first[p[0]] = true
		if !seen[len(p)] {
			seen[len(p)] = true
			m.lengths = append(m.lengths, len(p))
		}
	}
	slices.Sort(m.lengths)
	slices.Reverse(m.lengths)
	return m
}

// fragment is a stretch of plain text, or one special token (text == "").
type fragment struct {
	text string
	id   int32 // -1 for text
}

// split cuts text at each special piece that cut accepts, scanning left to
// right and taking the longest piece at each position. A control or unknown
// piece that overlaps a plain span stays text.
func (m *specialMatcher) split(text string, cut func(typ int32) bool, plain []Span) []fragment {
	var out []fragment
	gap := 0
	inPlain := plainCursor{spans: plain}
	for i := 0; i < len(text); i++ {
		if !m.first[text[i]] {
			continue
		}
		for _, l := range m.lengths {
			if i+l > len(text) {
				continue
			}
			id, ok := m.byText[text[i:i+l]]
			if !ok || !cut(m.types[id]) || (m.types[id] != TypeUserDefined && inPlain.overlaps(i, i+l)) {
				continue
			}
			if i > gap {
				out = append(out, fragment{text: text[gap:i], id: -1})
			}
			out = append(out, fragment{id: id})
			gap = i + l
			i = gap - 1
			break
		}
	}
	if gap < len(text) {
		out = append(out, fragment{text: text[gap:], id: -1})
	}
	return out
}

// cutter says which token types split the text for one encoding. A BPE
// vocabulary cuts user-defined pieces out always, as llama.cpp and Hugging
// Face do; SentencePiece matches them inside its own encoder (see New).
func (t *Tokenizer) cutter(parseSpecial bool) func(typ int32) bool {
	bpe := t.bpe != nil
	return func(typ int32) bool {
		switch typ {
		case TypeUserDefined:
			return bpe
		case TypeControl, TypeUnknown:
			return parseSpecial
		}
		return false
	}
}

// endOfTurnTexts are pieces that end a chat model's turn, found by their
// text as llama.cpp finds them (GGUF files often lack
// tokenizer.ggml.eot_token_id).
var endOfTurnTexts = []string{"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>"}

func endOfGeneration(pieces []string, eos int32, extra []int32) map[int32]bool {
	eog := map[int32]bool{}
	if eos >= 0 {
		eog[eos] = true
	}
	for _, id := range extra {
		eog[id] = true
	}
	for i, p := range pieces {
		if slices.Contains(endOfTurnTexts, p) {
			eog[int32(i)] = true
		}
	}
	return eog
}

// IsEndOfGeneration reports whether id ends a generation: EOS, or an end of
// turn such as Llama 3's <|eot_id|> or ChatML's <|im_end|>.
func (t *Tokenizer) IsEndOfGeneration(id int32) bool { return t.eog[id] }

// EndOfGeneration lists the ids IsEndOfGeneration accepts, in order.
func (t *Tokenizer) EndOfGeneration() []int32 {
	var ids []int32
	for id := range t.eog {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
