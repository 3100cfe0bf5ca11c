package tokenizer

import "unicode/utf8"

// Decode turns ids back into text: U+2581 becomes a space, <0xNN> tokens
// become their byte, control tokens (BOS, EOS) produce nothing and UNK
// renders as " ⁇ " like SentencePiece. The dummy-prefix space is removed
// from the first token that produces text when only control tokens precede
// it — at the start of the sequence or right after BOS, as SentencePiece and
// llama2.c do. Bytes are returned as they are, even when the byte tokens
// spell invalid UTF-8.
func (t *Tokenizer) Decode(ids []int32) ([]byte, error) { return t.decode(ids, false) }

// DecodeSpecial is Decode with control tokens written out as their text
// ("<s>", "<|eot_id|>") instead of dropped, as llama.cpp's detokenizer does
// with special on. With a byte-level BPE vocabulary, text encoded with
// EncodeOptions.ParseSpecial decodes back to itself; SentencePiece gives
// each stretch after a special token its dummy-prefix space.
func (t *Tokenizer) DecodeSpecial(ids []int32) ([]byte, error) { return t.decode(ids, true) }

func (t *Tokenizer) decode(ids []int32, special bool) ([]byte, error) {
	out := make([]byte, 0, 4*len(ids))
	atStart := true
	for _, id := range ids {
		if special && t.checkID(id) == nil && t.types[id] == TypeControl {
			out = append(out, t.pieces[id]...)
			continue
		}
		piece, err := t.pieceAt(id, &atStart)
		if err != nil {
			return nil, err
		}
		out = append(out, piece...)
	}
	return out, nil
}

// pieceAt is the text of one token in context. atStart is true while no
// token has produced text yet; it is updated.
func (t *Tokenizer) pieceAt(id int32, atStart *bool) ([]byte, error) {
	if err := t.checkID(id); err != nil {
		return nil, err
	}
	s := t.surface[id]
	if len(s) == 0 || !*atStart {
		return s, nil
	}
	*atStart = false
	ty := t.types[id]
	if t.addSpacePrefix && s[0] == ' ' && ty != TypeByte && ty != TypeUnknown {
		return s[1:], nil
	}
	return s, nil
}

// StreamDecoder decodes ids one at a time, as a generator produces them. A
// character split over several byte tokens is held back until it is whole,
// so no chunk ends inside a UTF-8 sequence. The chunks joined, followed by
// Flush, equal Decode of all ids.
type StreamDecoder struct {
	t       *Tokenizer
	atStart bool
	pending []byte // start of a UTF-8 sequence waiting for its remaining bytes
}

// NewStreamDecoder starts decoding a new sequence.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder {
	return &StreamDecoder{t: t, atStart: true}
}

// Push decodes one id and returns the text that is ready. On error the
// decoder is unchanged.
func (d *StreamDecoder) Push(id int32) ([]byte, error) {
	atStart := d.atStart
	piece, err := d.t.pieceAt(id, &atStart)
	if err != nil {
		return nil, err
	}
	d.atStart = atStart
	buf := append(d.pending, piece...)
	cut := completePrefix(buf)
	out := append([]byte(nil), buf[:cut]...)
	d.pending = append(d.pending[:0:0], buf[cut:]...)
	return out, nil
}

// Flush returns whatever is held back: bytes of an unfinished UTF-8
// sequence, passed on as they are, like Decode does.
func (d *StreamDecoder) Flush() []byte {
	out := d.pending
	d.pending = nil
	return out
}

// completePrefix is the length of buf without a trailing, still incomplete
// UTF-8 sequence. Invalid bytes that no continuation could repair count as
// complete: holding them back would only delay them.
func completePrefix(buf []byte) int {
	for i := len(buf) - 1; i >= 0 && i >= len(buf)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				return i
			}
			return len(buf)
		}
	}
	return len(buf)
}
