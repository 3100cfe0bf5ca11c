package tokenizer

import (
	"fmt"
	"math"

	"github.com/modrun/modrun/gguf"
)

// GGUF metadata keys of the tokenizer, as llama.cpp names them.
const (
	keyModel          = "tokenizer.ggml.model"
	keyTokens         = "tokenizer.ggml.tokens"
	keyScores         = "tokenizer.ggml.scores"
	keyTokenType      = "tokenizer.ggml.token_type"
	keyBOS            = "tokenizer.ggml.bos_token_id"
	keyEOS            = "tokenizer.ggml.eos_token_id"
	keyUNK            = "tokenizer.ggml.unknown_token_id"
	keyAddBOS         = "tokenizer.ggml.add_bos_token"
	keyAddEOS         = "tokenizer.ggml.add_eos_token"
	keyAddSpacePrefix = "tokenizer.ggml.add_space_prefix"
	keyMerges         = "tokenizer.ggml.merges"
	keyPre            = "tokenizer.ggml.pre"
	keyEOT            = "tokenizer.ggml.eot_token_id"
	keyEOM            = "tokenizer.ggml.eom_token_id"
)

// Defaults for a "llama" vocab when a key is absent; llama.cpp uses the
// same: <unk>=0, <s>=1, </s>=2, BOS added, EOS not, dummy prefix on.
const (
	defaultBOS            = 1
	defaultEOS            = 2
	defaultUNK            = 0
	defaultAddBOS         = true
	defaultAddEOS         = false
	defaultAddSpacePrefix = true
)

// FromGGUF builds the tokenizer stored in a GGUF file's metadata. Only
// tokenizer.ggml.model and tokenizer.ggml.tokens are required; missing
// scores count as zero and missing token types are inferred (see New). The
// tokenizer copies what it needs, so f may be closed afterwards. Errors name
// the key, not the file; the caller knows which file it opened.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	v, err := vocabFromGGUF(f)
	if err != nil {
		return nil, err
	}
	return New(v)
}

func vocabFromGGUF(f *gguf.File) (Vocab, error) {
	var v Vocab
	var err error
	if v.Model, err = f.String(keyModel); err != nil {
		return v, fmt.Errorf("tokenizer: %s: %w", keyModel, err)
	}
	if v.Tokens, err = f.Strings(keyTokens); err != nil {
		return v, fmt.Errorf("tokenizer: %s: %w", keyTokens, err)
	}
	if f.Has(keyScores) {
		if v.Scores, err = f.Float32s(keyScores); err != nil {
			return v, fmt.Errorf("tokenizer: %s: %w", keyScores, err)
		}
	}
	if f.Has(keyTokenType) {
		if v.Types, err = f.Int32s(keyTokenType); err != nil {
			return v, fmt.Errorf("tokenizer: %s: %w", keyTokenType, err)
		}
	}
	if v.Model == ModelBPE {
		if err := bpeFromGGUF(f, &v); err != nil {
			return v, err
		}
	} else if err := spmIDsFromGGUF(f, &v); err != nil {
		return v, err
	}
	for _, key := range []string{keyEOT, keyEOM} {
		id, err := optionalID(f, key, -1, len(v.Tokens))
		if err != nil {
			return v, err
		}
		if id >= 0 {
			v.EndOfTurn = append(v.EndOfTurn, id)
		}
	}
	if v.AddEOS, err = optionalBool(f, keyAddEOS, defaultAddEOS); err != nil {
		return v, err
	}
	if v.AddSpacePrefix, err = optionalBool(f, keyAddSpacePrefix, defaultAddSpacePrefix && v.Model == ModelSPM); err != nil {
		return v, err
	}
	return v, nil
}

// spmIDsFromGGUF reads the special ids of a "llama" vocab, with llama.cpp's
// defaults.
func spmIDsFromGGUF(f *gguf.File, v *Vocab) error {
	var err error
	if v.BOS, err = optionalID(f, keyBOS, defaultBOS, len(v.Tokens)); err != nil {
		return err
	}
	if v.EOS, err = optionalID(f, keyEOS, defaultEOS, len(v.Tokens)); err != nil {
		return err
	}
	if v.UNK, err = optionalID(f, keyUNK, defaultUNK, len(v.Tokens)); err != nil {
		return err
	}
	if v.AddBOS, err = optionalBool(f, keyAddBOS, defaultAddBOS); err != nil {
		return err
	}
	if v.BOS < 0 && !f.Has(keyAddBOS) {
		v.AddBOS = false // the default asks for a BOS the vocab lacks
	}
	return nil
}

// bpeFromGGUF reads what a "gpt2" vocab adds: merges, the pre-tokenizer,
// and special ids, which have no defaults (llama.cpp's, id 11, fit GPT-2
// alone). BOS is added by default where the pre-tokenizer's model does
// (Llama 3) and the vocab has one.
func bpeFromGGUF(f *gguf.File, v *Vocab) error {
	var err error
	if v.Merges, err = f.Strings(keyMerges); err != nil {
		return fmt.Errorf("tokenizer: %s: %w", keyMerges, err)
	}
	if f.Has(keyPre) {
		if v.Pre, err = f.String(keyPre); err != nil {
			return fmt.Errorf("tokenizer: %s: %w", keyPre, err)
		}
	}
	pre, err := lookupPre(v.Pre)
	if err != nil {
		return err
	}
	for _, sp := range []struct {
		key string
		id  *int32
	}{{keyBOS, &v.BOS}, {keyEOS, &v.EOS}, {keyUNK, &v.UNK}} {
		if *sp.id, err = optionalID(f, sp.key, -1, len(v.Tokens)); err != nil {
			return err
		}
	}
	if v.AddBOS, err = optionalBool(f, keyAddBOS, pre.addBOS && v.BOS >= 0); err != nil {
		return err
	}
	return nil
}

// optionalID reads a special-token id. A default that does not fit the
// vocabulary (a tiny test vocab), or -1, means the token is absent; an
// explicit id that does not fit is an error.
func optionalID(f *gguf.File, key string, def int32, nVocab int) (int32, error) {
	if !f.Has(key) {
		if int(def) >= nVocab || def < 0 {
			return -1, nil
		}
		return def, nil
	}
	u, err := f.Uint(key)
	if err != nil {
		return 0, fmt.Errorf("tokenizer: %s: %w", key, err)
	}
	if u >= uint64(nVocab) || u > math.MaxInt32 {
		return 0, fmt.Errorf("tokenizer: %s: id %d out of range [0, %d)", key, u, nVocab)
	}
	return int32(u), nil
}

func optionalBool(f *gguf.File, key string, def bool) (bool, error) {
	if !f.Has(key) {
		return def, nil
	}
	b, err := f.Bool(key)
	if err != nil {
		return false, fmt.Errorf("tokenizer: %s: %w", key, err)
	}
	return b, nil
}
