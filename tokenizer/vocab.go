package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Token types as llama.cpp stores them in tokenizer.ggml.token_type. They
// mirror SentencePiece's ModelProto.SentencePiece.Type.
const (
	TypeNormal      = 1
	TypeUnknown     = 2
	TypeControl     = 3
	TypeUserDefined = 4
	TypeUnused      = 5
	TypeByte        = 6
)

// spaceSymbol is what SentencePiece writes in place of a space (U+2581).
const spaceSymbol = "\u2581"

// unknownSurface is how SentencePiece renders the unknown token when decoding.
// llama.cpp prints nothing for it; a visible mark tells the reader text was lost.
const unknownSurface = " \u2047 "

// maxTextBytes bounds Encode's input so that offsets into the normalized
// text, where each space grows to three bytes, fit in int32.
const maxTextBytes = (math.MaxInt32 - 3) / 3

// ErrEmptyVocab is returned by New for a vocabulary without tokens.
var ErrEmptyVocab = errors.New("tokenizer: empty vocabulary")

// ErrInvalidUTF8 is returned by Encode for text that is not valid UTF-8.
var ErrInvalidUTF8 = errors.New("tokenizer: invalid UTF-8")

// Vocab is everything the tokenizer needs, as a GGUF file stores it.
type Vocab struct {
	Model          string    // ModelSPM ("llama") or ModelBPE ("gpt2")
	Tokens         []string  // [nVocab] pieces, with U+2581 for space (SPM) or GPT-2's byte characters (BPE)
	Scores         []float32 // [nVocab] merge priority (SPM only); nil means all zero
	Types          []int32   // [nVocab] Type* values; nil means infer (see New)
	BOS, EOS, UNK  int32     // -1 when absent
	AddBOS, AddEOS bool
	AddSpacePrefix bool // prefix a space before encoding (true for Llama 2; SPM only)

	// Byte-level BPE ("gpt2") only.
	Merges []string // [nMerges] "left right", highest priority first (tokenizer.ggml.merges)
	Pre    string   // pre-tokenizer (tokenizer.ggml.pre): see PreTokenizers; "" = "default"

	// EndOfTurn lists ids besides EOS that end a generation, such as
	// tokenizer.ggml.eot_token_id (<|eot_id|> in Llama 3). Tokens with
	// the well-known end-of-turn texts count too (see IsEndOfGeneration).
	EndOfTurn []int32
}

// Tokenizer models, as tokenizer.ggml.model names them.
const (
	ModelSPM = "llama" // SentencePiece BPE with byte fallback (Llama 1 and 2, TinyLlama)
	ModelBPE = "gpt2"  // byte-level BPE with merges (Llama 3)
)

// Tokenizer encodes text to token ids and back. It is safe for concurrent use.
type Tokenizer struct {
	model  string    // ModelSPM or ModelBPE
	pieces []string  // [nVocab]
	scores []float32 // [nVocab]
	types  []int32   // [nVocab]

	bos, eos, unk  int32
	addBOS, addEOS bool
	addSpacePrefix bool

	// mergeable holds the pieces a BPE merge may produce: normal,
	// user-defined and unused ones (SentencePiece's pieces_ map).
	mergeable map[string]int32
	// reserved holds control, unknown and byte pieces, which text never
	// merges into (SentencePiece's reserved_id_map_).
	reserved map[string]int32
	// userDefined pieces are matched whole before merging and never split.
	userDefined    map[string]bool
	userDefinedLen []int // distinct lengths in bytes, longest first

	// spanPairs holds every pair of adjacent characters inside a mergeable
	// piece. Where two neighbouring characters of the text form no such
	// pair, no merge can ever cross between them (see encoder.run).
	spanPairs map[uint64]struct{}

	byteID      [256]int32 // id of <0xNN>, -1 when the vocab lacks it
	hasByteToks bool       // any byte token present: unknown text becomes bytes
	hasUnused   bool       // any unused piece: merge with one global queue

	surface [][]byte // [nVocab] bytes each token decodes to

	bpe     *bpeModel      // ModelBPE only
	special specialMatcher // control, unknown and user-defined pieces found in text
	eog     map[int32]bool // ids that end a generation: EOS, end of turn
}

// New validates v and builds the lookup tables. When v.Types is nil the
// types are inferred: "<0xNN>" pieces are bytes, BOS and EOS are control,
// UNK is unknown and everything else is normal. Duplicate pieces resolve to
// the highest id, as in llama.cpp.
func New(v Vocab) (*Tokenizer, error) {
	if err := validate(&v); err != nil {
		return nil, err
	}
	n := len(v.Tokens)
	// Copies, so the caller may reuse its slices (a GGUF reader may hand out
	// its own).
	t := &Tokenizer{
		model:          v.Model,
		pieces:         append([]string(nil), v.Tokens...),
		scores:         append([]float32(nil), v.Scores...),
		types:          append([]int32(nil), v.Types...),
		bos:            v.BOS,
		eos:            v.EOS,
		unk:            v.UNK,
		addBOS:         v.AddBOS,
		addEOS:         v.AddEOS,
		addSpacePrefix: v.AddSpacePrefix && v.Model == ModelSPM,
		mergeable:      make(map[string]int32, n),
		reserved:       make(map[string]int32),
	}
	if t.scores == nil {
		t.scores = make([]float32, n)
	}
	if t.types == nil {
		t.types = inferTypes(&v)
	}
	if v.Model == ModelBPE {
		var err error
		if t.bpe, err = newBPEModel(t.pieces, t.types, v.Merges, v.Pre); err != nil {
			return nil, err
		}
	} else {
		t.indexPieces()
	}
	t.buildSurfaces()
	t.special = newSpecialMatcher(t.pieces, t.types)
	t.eog = endOfGeneration(t.pieces, t.eos, v.EndOfTurn)
	return t, nil
}

func validate(v *Vocab) error {
	if v.Model != ModelSPM && v.Model != ModelBPE {
		return fmt.Errorf("tokenizer: model %q is not supported (want %q or %q)", v.Model, ModelSPM, ModelBPE)
	}
	if v.Model == ModelBPE && v.Merges == nil {
		return fmt.Errorf("tokenizer: model %q needs merges (tokenizer.ggml.merges)", ModelBPE)
	}
	n := len(v.Tokens)
	if n == 0 {
		return ErrEmptyVocab
	}
	if n > math.MaxInt32 {
		return fmt.Errorf("tokenizer: %d tokens is more than int32 ids can address", n)
	}
	if v.Scores != nil && len(v.Scores) != n {
		return fmt.Errorf("tokenizer: %d scores for %d tokens", len(v.Scores), n)
	}
	if v.Types != nil && len(v.Types) != n {
		return fmt.Errorf("tokenizer: %d token types for %d tokens", len(v.Types), n)
	}
	for i, s := range v.Scores {
		if math.IsNaN(float64(s)) {
			return fmt.Errorf("tokenizer: token %d (%q): score is NaN", i, v.Tokens[i])
		}
	}
	for i, ty := range v.Types {
		if ty < TypeNormal || ty > TypeByte {
			return fmt.Errorf("tokenizer: token %d (%q): unknown token type %d", i, v.Tokens[i], ty)
		}
	}
	for _, sp := range []struct {
		name string
		id   int32
	}{{"BOS", v.BOS}, {"EOS", v.EOS}, {"UNK", v.UNK}} {
		if sp.id < -1 || int(sp.id) >= n {
			return fmt.Errorf("tokenizer: %s id %d out of range [-1, %d)", sp.name, sp.id, n)
		}
	}
	for _, id := range v.EndOfTurn {
		if id < 0 || int(id) >= n {
			return fmt.Errorf("tokenizer: end-of-turn id %d out of range [0, %d)", id, n)
		}
	}
	if v.AddBOS && v.BOS < 0 {
		return errors.New("tokenizer: AddBOS is set but the vocabulary has no BOS token")
	}
	if v.AddEOS && v.EOS < 0 {
		return errors.New("tokenizer: AddEOS is set but the vocabulary has no EOS token")
	}
	return nil
}

func inferTypes(v *Vocab) []int32 {
	types := make([]int32, len(v.Tokens))
	for i, p := range v.Tokens {
		types[i] = TypeNormal
		if _, ok := parseBytePiece(p); ok && v.Model == ModelSPM {
			types[i] = TypeByte
		}
	}
	if v.BOS >= 0 {
		types[v.BOS] = TypeControl
	}
	if v.EOS >= 0 {
		types[v.EOS] = TypeControl
	}
	if v.UNK >= 0 {
		types[v.UNK] = TypeUnknown
	}
	return types
}

// indexPieces fills the piece maps and the byte fallback table.
func (t *Tokenizer) indexPieces() {
	for i := range t.byteID {
		t.byteID[i] = -1
	}
	lengths := map[int]bool{}
	for i, p := range t.pieces {
		id := int32(i)
		switch t.types[i] {
		case TypeNormal:
			t.mergeable[p] = id
		case TypeUnused:
			t.mergeable[p] = id
			t.hasUnused = true
		case TypeUserDefined:
			t.mergeable[p] = id
			if p != "" {
				if t.userDefined == nil {
					t.userDefined = map[string]bool{}
				}
				t.userDefined[p] = true
				lengths[len(p)] = true
			}
		case TypeByte:
			t.reserved[p] = id
			if b, ok := parseBytePiece(p); ok {
				t.byteID[b] = id
				t.hasByteToks = true
			}
		default: // control, unknown
			t.reserved[p] = id
		}
	}
	for l := range lengths {
		t.userDefinedLen = append(t.userDefinedLen, l)
	}
	sortDescending(t.userDefinedLen)
	t.indexSpanPairs()
}

func (t *Tokenizer) indexSpanPairs() {
	t.spanPairs = make(map[uint64]struct{}, 4*len(t.mergeable))
	for p := range t.mergeable {
		prev := rune(-1)
		for _, r := range p {
			if prev >= 0 {
				t.spanPairs[runePair(prev, r)] = struct{}{}
			}
			prev = r
		}
	}
}

func runePair(a, b rune) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// buildSurfaces precomputes what each token decodes to, the way
// SentencePiece's DecodeIds renders a piece.
func (t *Tokenizer) buildSurfaces() {
	t.surface = make([][]byte, len(t.pieces))
	for i, p := range t.pieces {
		switch t.types[i] {
		case TypeControl:
			t.surface[i] = nil
		case TypeUnknown:
			if t.bpe == nil { // llama.cpp prints nothing for a BPE vocab's
				t.surface[i] = []byte(unknownSurface)
			}
		case TypeByte:
			if b, ok := parseBytePiece(p); ok {
				t.surface[i] = []byte{b}
			} else {
				t.surface[i] = []byte(p)
			}
		case TypeUnused:
			if t.bpe != nil { // llama.cpp prints nothing for them
				t.surface[i] = nil
			} else {
				t.surface[i] = []byte(strings.ReplaceAll(p, spaceSymbol, " "))
			}
		case TypeUserDefined:
			if t.bpe != nil { // stored as plain text, not byte characters
				t.surface[i] = []byte(p)
			} else {
				t.surface[i] = []byte(strings.ReplaceAll(p, spaceSymbol, " "))
			}
		default:
			if t.bpe != nil {
				t.surface[i] = t.bpe.decodePiece(p)
			} else {
				t.surface[i] = []byte(strings.ReplaceAll(p, spaceSymbol, " "))
			}
		}
	}
}

// parseBytePiece reads a byte-fallback piece "<0xNN>".
func parseBytePiece(p string) (byte, bool) {
	if len(p) != 6 || p[:3] != "<0x" || p[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(p[3])
	lo, ok2 := hexDigit(p[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

func sortDescending(xs []int) {
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j] > xs[j-1]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
}

// Model is ModelSPM or ModelBPE.
func (t *Tokenizer) Model() string { return t.model }

// NVocab is the number of tokens.
func (t *Tokenizer) NVocab() int { return len(t.pieces) }

// BOS is the beginning-of-sequence id, -1 when absent.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS is the end-of-sequence id, -1 when absent.
func (t *Tokenizer) EOS() int32 { return t.eos }

// UNK is the unknown-token id, -1 when absent.
func (t *Tokenizer) UNK() int32 { return t.unk }

// AddBOS reports whether Encode with addSpecial prepends BOS.
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// AddEOS reports whether Encode with addSpecial appends EOS.
func (t *Tokenizer) AddEOS() bool { return t.addEOS }

// Piece returns the vocabulary entry for id, U+2581 and all.
func (t *Tokenizer) Piece(id int32) (string, error) {
	if err := t.checkID(id); err != nil {
		return "", err
	}
	return t.pieces[id], nil
}

// Text returns the bytes id adds in the middle of a text (Decode's, without
// the dummy-prefix rule of a text's first token): "\n" for <0x0A>, nothing
// for a control token.
func (t *Tokenizer) Text(id int32) ([]byte, error) {
	if err := t.checkID(id); err != nil {
		return nil, err
	}
	return t.surface[id], nil
}

// Type returns the Type* value of id.
func (t *Tokenizer) Type(id int32) (int32, error) {
	if err := t.checkID(id); err != nil {
		return 0, err
	}
	return t.types[id], nil
}

func (t *Tokenizer) checkID(id int32) error {
	if id < 0 || int(id) >= len(t.pieces) {
		return fmt.Errorf("tokenizer: token id %d out of range [0, %d)", id, len(t.pieces))
	}
	return nil
}
