package tokenizer

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
)

// parseKVs writes a GGUF holding only the given metadata and parses it back.
func parseKVs(t *testing.T, kvs map[string]gguf.Value) *gguf.File {
	t.Helper()
	w := gguf.NewWriter()
	for _, k := range []string{keyModel, keyTokens, keyScores, keyTokenType, keyBOS, keyEOS, keyUNK, keyAddBOS, keyAddEOS, keyAddSpacePrefix, keyMerges, keyPre, keyEOT, keyEOM, KeyChatTemplate} {
		if v, ok := kvs[k]; ok {
			require.NoError(t, w.SetKV(k, v))
		}
	}
	var buf bytes.Buffer
	_, err := w.WriteTo(&buf)
	require.NoError(t, err)
	f, err := gguf.Parse(buf.Bytes())
	require.NoError(t, err)
	return f
}

func minimalKVs() map[string]gguf.Value {
	return map[string]gguf.Value{
		keyModel:  gguf.Scalar("llama"),
		keyTokens: gguf.Array([]string{"<unk>", "<s>", "</s>", "▁a", "<0x62>"}),
	}
}

func TestFromGGUFDefaults(t *testing.T) {
	tok, err := FromGGUF(parseKVs(t, minimalKVs()))
	require.NoError(t, err)
	assert.Equal(t, 5, tok.NVocab())
	assert.Equal(t, int32(1), tok.BOS())
	assert.Equal(t, int32(2), tok.EOS())
	assert.Equal(t, int32(0), tok.UNK())
	ids, err := tok.Encode("ab", true)
	require.NoError(t, err)
	assert.Equal(t, []int32{1, 3, 4}, ids, "BOS by default, dummy prefix, inferred byte token")
}

func TestFromGGUFExplicitKeys(t *testing.T) {
	kvs := minimalKVs()
	kvs[keyScores] = gguf.Array([]float32{0, 0, 0, -1, 0})
	kvs[keyTokenType] = gguf.Array([]int32{TypeUnknown, TypeControl, TypeControl, TypeNormal, TypeByte})
	kvs[keyBOS] = gguf.Scalar(uint32(2))
	kvs[keyEOS] = gguf.Scalar(int32(1))
	kvs[keyUNK] = gguf.Scalar(uint64(0))
	kvs[keyAddBOS] = gguf.Scalar(false)
	kvs[keyAddEOS] = gguf.Scalar(true)
	kvs[keyAddSpacePrefix] = gguf.Scalar(false)
	tok, err := FromGGUF(parseKVs(t, kvs))
	require.NoError(t, err)
	assert.Equal(t, int32(2), tok.BOS())
	assert.Equal(t, int32(1), tok.EOS())
	ids, err := tok.Encode("b", true)
	require.NoError(t, err)
	assert.Equal(t, []int32{4, 1}, ids, "no BOS, EOS added, no dummy prefix")
}

func TestFromGGUFSmallVocabDropsDefaultBOS(t *testing.T) {
	kvs := minimalKVs()
	kvs[keyTokens] = gguf.Array([]string{"<unk>"})
	tok, err := FromGGUF(parseKVs(t, kvs))
	require.NoError(t, err)
	assert.Equal(t, int32(-1), tok.BOS())
	assert.False(t, tok.AddBOS())
}

func TestFromGGUFErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(kvs map[string]gguf.Value)
		want   string
	}{
		{"no model", func(kvs map[string]gguf.Value) { delete(kvs, keyModel) }, "tokenizer.ggml.model: "},
		{"other model", func(kvs map[string]gguf.Value) { kvs[keyModel] = gguf.Scalar("bert") }, `model "bert" is not supported`},
		{"gpt2 without merges", func(kvs map[string]gguf.Value) { kvs[keyModel] = gguf.Scalar("gpt2") }, "tokenizer.ggml.merges: "},
		{"unknown pre", func(kvs map[string]gguf.Value) {
			kvs[keyModel], kvs[keyMerges], kvs[keyPre] = gguf.Scalar("gpt2"), gguf.Array([]string{}), gguf.Scalar("tekken9")
		}, `pre-tokenizer "tekken9" (tokenizer.ggml.pre) is not supported (supported: `},
		{"eot range", func(kvs map[string]gguf.Value) { kvs[keyEOT] = gguf.Scalar(uint32(9)) }, "tokenizer.ggml.eot_token_id: id 9 out of range"},
		{"no tokens", func(kvs map[string]gguf.Value) { delete(kvs, keyTokens) }, "tokenizer.ggml.tokens: "},
		{"empty tokens", func(kvs map[string]gguf.Value) { kvs[keyTokens] = gguf.Array([]string{}) }, "empty vocabulary"},
		{"scores type", func(kvs map[string]gguf.Value) { kvs[keyScores] = gguf.Array([]int32{1, 2, 3, 4, 5}) }, "tokenizer.ggml.scores: "},
		{"scores length", func(kvs map[string]gguf.Value) { kvs[keyScores] = gguf.Array([]float32{1}) }, "1 scores for 5 tokens"},
		{"types type", func(kvs map[string]gguf.Value) { kvs[keyTokenType] = gguf.Scalar(int32(1)) }, "tokenizer.ggml.token_type: "},
		{"bos type", func(kvs map[string]gguf.Value) { kvs[keyBOS] = gguf.Scalar("1") }, "tokenizer.ggml.bos_token_id: "},
		{"bos negative", func(kvs map[string]gguf.Value) { kvs[keyBOS] = gguf.Scalar(int32(-1)) }, "tokenizer.ggml.bos_token_id: "},
		{"eos range", func(kvs map[string]gguf.Value) { kvs[keyEOS] = gguf.Scalar(uint32(5)) }, "tokenizer.ggml.eos_token_id: id 5 out of range [0, 5)"},
		{"add_bos type", func(kvs map[string]gguf.Value) { kvs[keyAddBOS] = gguf.Scalar(uint8(1)) }, "tokenizer.ggml.add_bos_token: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kvs := minimalKVs()
			tt.mutate(kvs)
			_, err := FromGGUF(parseKVs(t, kvs))
			assert.ErrorContains(t, err, tt.want)
		})
	}
}

func TestFromGGUFMissingKeyWrapsErrKeyNotFound(t *testing.T) {
	kvs := minimalKVs()
	delete(kvs, keyTokens)
	_, err := FromGGUF(parseKVs(t, kvs))
	assert.ErrorIs(t, err, gguf.ErrKeyNotFound)
}

func TestFromGGUFByteLevelBPE(t *testing.T) {
	tokens := []string{"a", "b", "ab", "<|begin_of_text|>", "<|end|>", "<|eot|>"}
	kvs := map[string]gguf.Value{
		keyModel:     gguf.Scalar("gpt2"),
		keyTokens:    gguf.Array(tokens),
		keyMerges:    gguf.Array([]string{"a b"}),
		keyPre:       gguf.Scalar("llama-bpe"),
		keyTokenType: gguf.Array([]int32{TypeNormal, TypeNormal, TypeNormal, TypeControl, TypeControl, TypeControl}),
		keyBOS:       gguf.Scalar(uint32(3)),
		keyEOT:       gguf.Scalar(uint32(5)),
	}
	tok, err := FromGGUF(parseKVs(t, kvs))
	require.NoError(t, err)
	ids, err := tok.Encode("ab", true)
	require.NoError(t, err)
	assert.Equal(t, []int32{3, 2}, ids, "llama-bpe adds BOS when add_bos_token is absent")
	assert.Equal(t, int32(-1), tok.EOS(), "no default ids for gpt2")
	assert.Equal(t, []int32{4, 5}, tok.EndOfGeneration(), "<|end|> by its text, <|eot|> by eot_token_id")

	kvs[keyPre] = gguf.Scalar("gpt-2")
	tok, err = FromGGUF(parseKVs(t, kvs))
	require.NoError(t, err)
	ids, err = tok.Encode("ab", true)
	require.NoError(t, err)
	assert.Equal(t, []int32{2}, ids, "GPT-2 adds no BOS by default")
}
