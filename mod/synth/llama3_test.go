package synth

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/tokenizer"
)

// smallLlama3 is llama3.2-1b's features (its vocabulary, tied output,
// RoPE) at a width that builds and runs in a blink.
const smallLlama3 = "llama3.2-1b,d=256,L=2,h=4,kv=2,ff=512,ctx=256"

func TestParseLlama3Shape(t *testing.T) {
	full, err := ParseShape("llama3.2-1b")
	require.NoError(t, err)
	assert.Equal(t, Shape{Name: "llama3.2-1b", NEmbd: 2048, NLayer: 16, NHead: 32, NKVHead: 8, NFF: 8192, NVocab: 128256, ContextLen: 131072, Llama3: true}, full)
	// Llama 3.2 1B has 1.24 billion weights, its output tied.
	assert.InDelta(t, 1.236e9, float64(full.Params()), 0.002e9)
	s, err := ParseShape(smallLlama3)
	require.NoError(t, err)
	assert.Equal(t, Shape{Name: "llama3.2-1b-d256-L2-h4-kv2-ff512-v128256", NEmbd: 256, NLayer: 2, NHead: 4, NKVHead: 2, NFF: 512, NVocab: 128256, ContextLen: 256, Llama3: true}, s)
	for in, want := range map[string]string{
		"llama3.2-1b,vocab=32000":   "vocabulary is 128256",
		"llama3.2-1b,d=256,ff=128":  "ff=128 is below d=256",
		"llama3.2-1b,d=250":         "not a multiple of h=32",
		"llama3.2-1b,x=1":           `unknown key "x"`,
		"stories15m,L=2,L=3":        "L given twice",
		"llama3.2-1b,":              "nor of the form",
		"tinyllama-1.1b,ctx=twelve": "not KEY=POSITIVE-INTEGER",
	} {
		_, err := ParseShape(in)
		assert.ErrorContains(t, err, want, in)
	}
	s, err = ParseShape("stories15m,L=2")
	require.NoError(t, err)
	assert.Equal(t, "stories15m-d288-L2-h6-kv6-ff768-v32000", s.Name)
}

// TestLlama3File: the saved file is a Llama 3 model as llama.cpp's
// converter writes one: RoPE base 500000 with Llama 3.2's factors in
// rope_freqs.weight, no output.weight (tied), and a "gpt2" vocabulary of
// 128,256 tokens, its merges, Llama 3's special tokens at their ids, and a
// chat template in Llama 3's header format. Its tokenizer encodes text to
// merged pieces and reads special tokens when asked.
func TestLlama3File(t *testing.T) {
	s, err := ParseShape(smallLlama3)
	require.NoError(t, err)
	built := build(t, s, Options{Type: gguf.TypeQ8_0, Seed: 1})
	path := filepath.Join(t.TempDir(), "llama3.gguf")
	require.NoError(t, built.Save(path))
	m, err := mod.Open(path)
	require.NoError(t, err)
	defer m.Close()
	f := m.File

	assert.Equal(t, mod.ArchLlama, m.Config.Arch)
	assert.Equal(t, float32(500000), m.Config.RopeBase)
	assert.Equal(t, 128256, m.Config.NVocab)
	_, hasOutput := f.Tensor(mod.TensorOutput)
	assert.False(t, hasOutput, "tied: no output.weight")
	assert.Equal(t, mod.TensorTokenEmbd, m.Weights.Output.Name)
	factors := m.Weights.RopeFactors()
	require.Len(t, factors, 32)
	want, err := mod.Llama3RopeFactors(64, 500000, 32, 1, 4, 8192)
	require.NoError(t, err)
	assert.Equal(t, want, factors)
	assert.Equal(t, float32(1), factors[0], "the fastest pair keeps its frequency")
	assert.Equal(t, float32(32), factors[31], "the slowest is slowed by the factor")

	str := func(k string) string {
		v, err := f.String(k)
		require.NoError(t, err, k)
		return v
	}
	assert.Equal(t, "gpt2", str("tokenizer.ggml.model"))
	assert.Equal(t, "llama-bpe", str("tokenizer.ggml.pre"))
	tokens, err := f.Strings("tokenizer.ggml.tokens")
	require.NoError(t, err)
	require.Len(t, tokens, 128256)
	merges, err := f.Strings("tokenizer.ggml.merges")
	require.NoError(t, err)
	assert.Len(t, merges, 128000-256)
	assert.Equal(t, "Ġ a", merges[0])
	types, err := f.Int32s("tokenizer.ggml.token_type")
	require.NoError(t, err)
	for id, piece := range map[int]string{0: "\u0100", 32: "Ġ", 'a': "a", 128000: "<|begin_of_text|>", 128001: "<|end_of_text|>",
		128006: "<|start_header_id|>", 128007: "<|end_header_id|>", 128009: "<|eot_id|>", 128011: "<|reserved_special_token_3|>",
		128255: "<|reserved_special_token_247|>"} {
		assert.Equal(t, piece, tokens[id], "token %d", id)
		wantType := int32(1)
		if id >= 128000 {
			wantType = 3
		}
		assert.Equal(t, wantType, types[id], "token %d type", id)
	}
	for k, want := range map[string]uint64{"tokenizer.ggml.bos_token_id": 128000, "tokenizer.ggml.eos_token_id": 128001, "tokenizer.ggml.eot_token_id": 128009} {
		v, err := f.Uint(k)
		require.NoError(t, err, k)
		assert.Equal(t, want, v, k)
	}
	jinja := str(tokenizer.KeyChatTemplate)
	name, err := tokenizer.DetectChatTemplate(jinja)
	require.NoError(t, err)
	assert.Equal(t, "llama3", name)

	tok, err := tokenizer.FromGGUF(f)
	require.NoError(t, err)
	ids, err := tok.Encode("hello world", true)
	require.NoError(t, err)
	assert.Equal(t, int32(128000), ids[0], "BOS first")
	assert.Less(t, len(ids), 1+len("hello world"), "merged pieces, not bytes: %v", ids)
	text, err := tok.Decode(ids[1:])
	require.NoError(t, err)
	assert.Equal(t, "hello world", string(text))
	special, err := tok.EncodeWith("<|start_header_id|>user<|end_header_id|>", tokenizer.EncodeOptions{ParseSpecial: true})
	require.NoError(t, err)
	assert.Equal(t, int32(128006), special[0])
	assert.Equal(t, int32(128007), special[len(special)-1])
	assert.True(t, tok.IsEndOfGeneration(128009), "<|eot_id|> stops generation")
	assert.True(t, tok.IsEndOfGeneration(128001), "<|end_of_text|> stops generation")
}

// TestLlama3GreedyWalksTheCycle: with the output tied, block 0's MLP moves
// each token to its successor (see orbit), so greedy decoding still walks
// the cycle by a wide margin, in F32 and in the coarsest type's MoD twin,
// from a chat prompt that ends in special tokens' successors, and never
// reaches a special token (EOS or <|eot_id|> included).
func TestLlama3GreedyWalksTheCycle(t *testing.T) {
	s, err := ParseShape(smallLlama3)
	require.NoError(t, err)
	b := &builder{s: s, o: Options{Seed: 1}}
	next := cycle(s.cycleMembers(), s.NVocab, b.rng("permutation", 0))
	b.newOrbit(next)
	for _, tc := range []struct {
		typ      gguf.TensorType
		capacity float32
	}{{gguf.TypeF32, 0}, {gguf.TypeQ4_0, 0.125}} {
		m := build(t, s, Options{Type: tc.typ, Seed: 1, Capacity: tc.capacity})
		tok, err := tokenizer.FromGGUF(m.File)
		require.NoError(t, err)
		ids, err := tok.EncodeWith("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>",
			tokenizer.EncodeOptions{ParseSpecial: true})
		require.NoError(t, err)
		minMargin := walkGreedy(t, m, ids, next, 8, func(tok int32) {
			require.Less(t, tok, int32(128000), "a text token")
		}, "%s capacity %g", tc.typ, tc.capacity)
		assert.Greater(t, minMargin, 3.0, "%s capacity %g: smallest top-1 - top-2 logit gap", tc.typ, tc.capacity)
		t.Logf("%s capacity %g: smallest greedy margin %.2f", tc.typ, tc.capacity, minMargin)
	}
}
