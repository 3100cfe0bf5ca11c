// Package tokenizer implements the two tokenizers of Llama models, built
// from GGUF metadata, and the chat templates of the common model families
// (chat.go):
//   - "gpt2" (Llama 3): byte-level BPE with merges, after a pre-tokenizer
//     chosen by tokenizer.ggml.pre (bpe.go, pretokenize.go). It follows
//     llama.cpp's llm_tokenizer_bpe and is checked against llama.cpp's test
//     vectors for Llama 3's vocabulary.
//   - "llama" (Llama 2, TinyLlama): SentencePiece BPE, described below.
//
// Control and unknown tokens in the text are plain text unless
// EncodeOptions.ParseSpecial asks for them to be read as tokens, as chat
// templates need (special.go).
//
// The SentencePiece BPE tokenizer (llama.cpp vocab type "llama"): encoding
// follows SentencePiece's bpe_model and llama.cpp's llm_tokenizer_spm:
// spaces become U+2581, a dummy
// space is prefixed, adjacent symbols merge in order of piece score (ties to
// the leftmost pair), and characters with no piece fall back to <0xNN> byte
// tokens. Plain text (Encode) keeps "<s>" as three characters, never the BOS
// token.
//
// Where SentencePiece and llama.cpp disagree, this package follows
// SentencePiece, whose output the tests compare against:
//   - only normal, user-defined and unused pieces are merge targets (llama.cpp
//     would also merge into a control piece whose halves are pieces);
//   - unused pieces are split back into the pieces they were merged from;
//   - user-defined pieces match whole inside the text and get no extra
//     space prefix after them (llama.cpp splits them out like special tokens);
//   - UNK decodes to " ⁇ " (llama.cpp prints nothing);
//   - the dummy-prefix space is stripped from the first text token after any
//     leading control tokens, so also right after BOS (llama.cpp's detokenize
//     strips it only when the very first token is text; llama2.c strips it
//     after BOS).
//
// Invalid UTF-8 input is an error (ErrInvalidUTF8), not silently replaced.
package tokenizer
