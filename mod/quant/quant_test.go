package quant

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/shared"
	"github.com/modrun/modrun/mod"
)

// TestMixesMatchLlamaQuantize: for each file llama-quantize made in a mix
// (../shared/data/quant), every weight matrix has the type the scheme of
// that name gives it.
func TestMixesMatchLlamaQuantize(t *testing.T) {
	for _, mix := range []string{"Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"} {
		t.Run(mix, func(t *testing.T) {
			m, err := mod.Open(shared.Path(t, "quant/kq-"+mix+".gguf"))
			require.NoError(t, err)
			defer m.Close()
			s, err := Parse(mix)
			require.NoError(t, err)
			c := m.Config
			model := Model{NLayer: c.NLayer, NHead: c.NHead, NKVHead: c.NKVHead}
			got, err := m.File.Uint(mod.KeyFileType)
			require.NoError(t, err)
			assert.Equal(t, uint64(s.FileType()), got, "general.file_type")
			n := 0
			for _, ti := range m.File.Tensors {
				if len(ti.Dims) != 2 {
					continue
				}
				assert.Equal(t, ti.Type, s.TypeOf(ti.Name, int(ti.Dims[0]), model), "%s %v", ti.Name, ti.Dims)
				n++
			}
			assert.Equal(t, 2+7*c.NLayer, n, "weight matrices checked")
		})
	}
}

// TestQ4KMOnEightLayers spells out llama.cpp's Q4_K_M rules on a model of 8
// blocks: attn_v and ffn_down get Q6_K in blocks 0 (the first eighth), 7
// (the last), and 3 and 6 (every third from the first eighth on); the
// output matrix Q6_K; the rest Q4_K. Rows that are no whole number of 256
// fall back: Q4_K to Q5_0 and Q6_K to Q8_0 (32-element blocks), or F16.
func TestQ4KMOnEightLayers(t *testing.T) {
	s, err := Parse("Q4_K_M")
	require.NoError(t, err)
	m := Model{NLayer: 8, NHead: 8, NKVHead: 2}
	for l := 0; l < 8; l++ {
		more := gguf.TypeQ4_K
		if l == 0 || l == 3 || l == 6 || l == 7 {
			more = gguf.TypeQ6_K
		}
		for role, want := range map[string]gguf.TensorType{
			mod.TensorAttnQ: gguf.TypeQ4_K, mod.TensorAttnK: gguf.TypeQ4_K, mod.TensorAttnV: more,
			mod.TensorAttnOutput: gguf.TypeQ4_K, mod.TensorFFNGate: gguf.TypeQ4_K, mod.TensorFFNUp: gguf.TypeQ4_K,
			mod.TensorFFNDown: more,
		} {
			assert.Equal(t, want, s.TypeOf(mod.BlockTensor(l, role), 512, m), "block %d %s", l, role)
		}
	}
	assert.Equal(t, gguf.TypeQ6_K, s.TypeOf(mod.TensorOutput, 512, m))
	assert.Equal(t, gguf.TypeQ4_K, s.TypeOf(mod.TensorTokenEmbd, 512, m))
	m.TiedOutput = true
	assert.Equal(t, gguf.TypeQ6_K, s.TypeOf(mod.TensorTokenEmbd, 512, m), "a tied embedding is the output matrix")

	assert.Equal(t, gguf.TypeQ5_0, s.TypeOf(mod.BlockTensor(1, mod.TensorFFNDown), 1376, m), "1376 = 43 blocks of 32, 5.375 of 256")
	assert.Equal(t, gguf.TypeQ8_0, s.TypeOf(mod.BlockTensor(0, mod.TensorFFNDown), 1376, m))
	assert.Equal(t, gguf.TypeQ8_0, s.TypeOf(mod.TensorOutput, 288, m))
	assert.Equal(t, gguf.TypeF16, s.TypeOf(mod.BlockTensor(1, mod.TensorFFNDown), 172, m), "172 is no whole number of 32")
}

// TestMixRules checks the rules of each mix that differ from its base type,
// on 32 blocks (n/8 = 4, n/16 = 2) with grouped-query attention of 4.
func TestMixRules(t *testing.T) {
	m := Model{NLayer: 32, NHead: 32, NKVHead: 8}
	v := func(l int) string { return mod.BlockTensor(l, mod.TensorAttnV) }
	down := func(l int) string { return mod.BlockTensor(l, mod.TensorFFNDown) }
	o := func(l int) string { return mod.BlockTensor(l, mod.TensorAttnOutput) }
	q := func(l int) string { return mod.BlockTensor(l, mod.TensorAttnQ) }
	for _, c := range []struct {
		mix  string
		name string
		want gguf.TensorType
	}{
		{"q2_k", q(5), gguf.TypeQ2_K},
		{"q2_k", v(5), gguf.TypeQ4_K}, // 32/8 = 4 heads share a V: Q4_K
		{"q2_k", down(5), gguf.TypeQ3_K},
		{"q2_k", o(5), gguf.TypeQ3_K},
		{"q3_k_s", v(0), gguf.TypeQ3_K},
		{"q3_k_s", mod.TensorOutput, gguf.TypeQ6_K},
		{"q3_k_m", v(1), gguf.TypeQ5_K},
		{"q3_k_m", v(2), gguf.TypeQ4_K},
		{"q3_k_m", down(1), gguf.TypeQ5_K},
		{"q3_k_m", down(2), gguf.TypeQ4_K},
		{"q3_k_m", o(9), gguf.TypeQ4_K},
		{"q3_k_l", v(9), gguf.TypeQ5_K},
		{"q3_k_l", down(9), gguf.TypeQ5_K},
		{"q3_k_l", o(9), gguf.TypeQ5_K},
		{"q4_k_s", v(3), gguf.TypeQ5_K},
		{"q4_k_s", v(4), gguf.TypeQ4_K},
		{"q4_k_s", down(3), gguf.TypeQ5_K},
		{"q4_k_s", down(4), gguf.TypeQ4_K},
		{"q4_k_m", down(4), gguf.TypeQ4_K},
		{"q4_k_m", down(6), gguf.TypeQ6_K}, // (6-4)%3 == 2
		{"q4_k_m", down(28), gguf.TypeQ6_K},
		{"q5_k_s", v(0), gguf.TypeQ5_K},
		{"q5_k_m", v(0), gguf.TypeQ6_K},
		{"q5_k_m", v(5), gguf.TypeQ5_K},
		{"q6_k", v(0), gguf.TypeQ6_K},
		{"q6_k", mod.TensorTokenEmbd, gguf.TypeQ6_K},
		{"q4_0", mod.TensorOutput, gguf.TypeQ4_0}, // a single type stays single
		{"q4_k", v(0), gguf.TypeQ4_K},
	} {
		s, err := Parse(c.mix)
		require.NoError(t, err)
		assert.Equal(t, c.want, s.TypeOf(c.name, 4096, m), "%s %s", c.mix, c.name)
	}
	// A 70B llama (80 blocks, grouped-query attention) lifts Q3_K/Q4_K V matrices to Q5_K.
	s, err := Parse("q4_k_m")
	require.NoError(t, err)
	assert.Equal(t, gguf.TypeQ5_K, s.TypeOf(v(20), 8192, Model{NLayer: 80, NHead: 64, NKVHead: 8}))
}

func TestParse(t *testing.T) {
	for _, name := range strings.Split(Names(), ", ") {
		s, err := Parse(strings.ToUpper(name))
		require.NoError(t, err, name)
		assert.Equal(t, name, s.String())
		assert.True(t, s.Base().Supported(), "%s: gguf quantizes %s", name, s.Base())
	}
	_, err := Parse("q4_k_xl")
	assert.ErrorContains(t, err, `type "q4_k_xl": want one of f32, f16, q8_0, q4_0, q4_1, q5_0, q5_1, q3_k, q4_k, q5_k, q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k`)
	p, err := Pure(gguf.TypeQ5_1)
	require.NoError(t, err)
	assert.Equal(t, "q5_1", p.String())
	_, err = Pure(gguf.TypeQ2_K)
	assert.ErrorContains(t, err, "type Q2_K: want one of", "Q2_K exists only as llama.cpp's mix")
}
