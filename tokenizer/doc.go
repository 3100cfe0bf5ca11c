// Package tokenizer implements the SentencePiece BPE tokenizer that Llama
// models use (llama.cpp vocab type "llama"). Encoding follows SentencePiece's
// bpe_model and llama.cpp's llm_tokenizer_spm: spaces become U+2581, a dummy
// space is prefixed, adjacent symbols merge in order of piece score (ties to
// the leftmost pair), and characters with no piece fall back to <0xNN> byte
// tokens. Text is always plain text: "<s>" in the input is three characters,
// never the BOS token.
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
