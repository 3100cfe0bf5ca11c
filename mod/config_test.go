package mod

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRoutedLayersTypes: llama-mod.mod.routed_layers is read as an array of
// u32 (modrun's writer) or of i32 (llama.cpp's gguf-py writes a Python list
// of ints so); any other type, and any value that is not a layer of the
// model, is refused with an error naming the key.
func TestRoutedLayersTypes(t *testing.T) {
	key := ArchKey(ArchMoD, KeyRoutedLayers)
	ok := []struct {
		name string
		v    gguf.Value
	}{
		{"u32", gguf.Array([]uint32{1, 3})},
		{"i32", gguf.Array([]int32{1, 3})},
		{"i32 unordered", gguf.Array([]int32{3, 1})},
	}
	for _, c := range ok {
		t.Run(c.name, func(t *testing.T) {
			tm := defaultTestModel()
			tm.routedKV = &c.v
			m := tm.open(t)
			assert.Equal(t, []bool{false, true, false, true}, m.Config.Routed)
			assert.Equal(t, []int{1, 3}, m.Config.RoutedLayers())
		})
	}
	bad := []struct {
		name string
		v    gguf.Value
		want string
	}{
		{"i32 negative", gguf.Array([]int32{1, -1}), "layer -1 is out of range [0, 4)"},
		{"i32 past the last layer", gguf.Array([]int32{1, 4}), "layer 4 is out of range [0, 4)"},
		{"u32 past the last layer", gguf.Array([]uint32{1, 3, 7}), "layer 7 is out of range [0, 4)"},
		{"u32 huge", gguf.Array([]uint32{1, 0xffffffff}), "layer 4294967295 is out of range [0, 4)"},
		{"i32 twice", gguf.Array([]int32{1, 3, 1}), "layer 1 is out of range [0, 4) or listed twice"},
		{"i64", gguf.Array([]int64{1, 3}), "has type array of i64; want an array of u32 or i32"},
		{"f32", gguf.Array([]float32{1, 3}), "has type array of f32; want an array of u32 or i32"},
		{"scalar", gguf.Scalar(uint32(1)), "has type u32; want an array of u32 or i32"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			tm := defaultTestModel()
			tm.routedKV = &c.v
			_, err := Open(tm.write(t))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), key, "the error names the key")
			assert.Contains(t, err.Error(), "model.gguf", "the error names the file")
		})
	}
}

// TestSelects: causal routing's rule on the scores a device may produce:
// denormals (which NVIDIA flushes to zero), both zeros, NaNs of both signs
// and infinities. shaders.TestCompactDecisionBits feeds such scores to the
// GPU's compact_positive and checks it against Selects and PoisonRows.
func TestSelects(t *testing.T) {
	f := math.Float32frombits
	cases := []struct {
		name  string
		score float32
		want  bool
	}{
		{"smallest denormal", f(1), true},
		{"largest denormal", f(0x007fffff), true},
		{"smallest normal", f(0x00800000), true},
		{"one", 1, true},
		{"largest float", math.MaxFloat32, true},
		{"+Inf", float32(math.Inf(1)), true},
		{"+0", 0, false},
		{"-0", f(0x80000000), false},
		{"negative denormal", f(0x80000001), false},
		{"minus one", -1, false},
		{"-Inf", float32(math.Inf(-1)), false},
		{"quiet NaN", f(0x7fc00000), false},
		{"signalling NaN", f(0x7f800001), false},
		{"largest NaN", f(0x7fffffff), false},
		{"negative NaN", f(0xffc00000), false},
	}
	scores := make([]float32, len(cases))
	var want []int
	for i, c := range cases {
		assert.Equal(t, c.want, Selects(c.score), "%s (%#08x)", c.name, math.Float32bits(c.score))
		scores[i] = c.score
		if c.want {
			want = append(want, i)
		}
	}
	assert.Equal(t, want, positive(scores))

	// PoisonRows: the rows of exactly the non-finite scores (±Inf and every
	// NaN, selected or not) become NaN; the rest stay as they were.
	const d = 3
	x := make([]float32, len(cases)*d)
	for i := range x {
		x[i] = float32(i) + 0.5
	}
	PoisonRows(x, scores, d)
	for i, c := range cases {
		bad := math.IsNaN(float64(c.score)) || math.IsInf(float64(c.score), 0)
		assert.Equal(t, bad, Poisons(c.score), "%s: Poisons", c.name)
		for e, v := range x[i*d : (i+1)*d] {
			if bad {
				assert.True(t, math.IsNaN(float64(v)), "%s: row %d[%d] = %v, want NaN", c.name, i, e, v)
			} else {
				assert.Equal(t, float32(i*d+e)+0.5, v, "%s: row %d[%d]", c.name, i, e)
			}
		}
	}
}

// rewriteKVs copies the GGUF file at path with the given keys set (replaced
// or added), and returns the copy's path.
func rewriteKVs(t *testing.T, path string, set map[string]gguf.Value) string {
	t.Helper()
	f, err := gguf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	w := gguf.NewWriter()
	for _, kv := range f.KVs {
		v, ok := set[kv.Key]
		if !ok {
			v = kv.Value
		}
		delete(set, kv.Key)
		require.NoError(t, w.SetKV(kv.Key, v))
	}
	for k, v := range set {
		require.NoError(t, w.SetKV(k, v))
	}
	for _, ti := range f.Tensors {
		b, err := f.TensorData(ti.Name)
		require.NoError(t, err)
		require.NoError(t, w.AddTensor(ti.Name, ti.Type, ti.Dims, b))
	}
	out := filepath.Join(t.TempDir(), "edited.gguf")
	require.NoError(t, w.WriteFile(out))
	return out
}

// TestConfigNamesTheWrongKey: a file whose weights are right but one key is
// wrong is refused, and the error names the key that is wrong, or both keys
// where either may be.
func TestConfigNamesTheWrongKey(t *testing.T) {
	tm := defaultTestModel() // nEmbd 48, nHead 6: head dimension 8; nVocab 67
	path := tm.write(t)
	key := func(k string) string { return ArchKey(ArchMoD, k) }
	tokens := func(n int) gguf.Value {
		s := make([]string, n)
		for i := range s {
			s[i] = string(rune('a' + i%26))
		}
		return gguf.Array(s)
	}
	for _, c := range []struct {
		name string
		set  map[string]gguf.Value
		want string
	}{
		{"head_count wrong, rope.dimension_count right", map[string]gguf.Value{key(KeyHeadCount): gguf.Scalar(uint32(12)), key(KeyRopeDimCount): gguf.Scalar(uint32(8))},
			"llama-mod.rope.dimension_count = 8, but the head dimension is 4 (llama-mod.embedding_length 48 / llama-mod.attention.head_count 12)"},
		{"head_count does not divide", map[string]gguf.Value{key(KeyHeadCount): gguf.Scalar(uint32(7))},
			"llama-mod.embedding_length = 48 is not a multiple of llama-mod.attention.head_count = 7"},
		{"vocab_size against the tokens", map[string]gguf.Value{key(KeyVocabSize): gguf.Scalar(uint32(70)), "tokenizer.ggml.tokens": tokens(67)},
			"llama-mod.vocab_size = 70, but tokenizer.ggml.tokens has 67 tokens"},
		{"vocab_size against token_embd", map[string]gguf.Value{key(KeyVocabSize): gguf.Scalar(uint32(70))},
			TensorTokenEmbd},
		{"tokens against token_embd", map[string]gguf.Value{key(KeyVocabSize): gguf.Scalar(uint32(60)), "tokenizer.ggml.tokens": tokens(60)},
			TensorTokenEmbd},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Open(rewriteKVs(t, path, c.set))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
	m, err := Open(rewriteKVs(t, path, map[string]gguf.Value{"tokenizer.ggml.tokens": tokens(67)}))
	require.NoError(t, err, "the key and the tokens agree")
	assert.Equal(t, 67, m.Config.NVocab)
	m.Close()
}
