package mod

import (
	"math"
	"math/rand"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMatMulHalf: matMulHalf (State.MatmulHalf) is the product of both
// operands rounded to halves, summed in float32: within cols·2^-24 of the
// exact (float64) product of the halves, relative to the sum of |terms|,
// for F32 and Q8_0 weights; and it is not MatMul (most values are not
// halves).
func TestMatMulHalf(t *testing.T) {
	const rows, cols, n = 7, 96, 3
	rng := rand.New(rand.NewSource(43))
	src, x := make([]float32, rows*cols), make([]float32, n*cols)
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	half := func(v float32) float64 { return float64(gguf.F16ToF32(gguf.F32ToF16(v))) }
	for _, typ := range []gguf.TensorType{gguf.TypeF32, gguf.TypeQ8_0} {
		raw, err := gguf.Quantize(typ, src)
		require.NoError(t, err)
		m, err := NewMat("w", typ, []uint64{cols, rows}, raw)
		require.NoError(t, err)
		got, plain := make([]float32, n*rows), make([]float32, n*rows)
		matMulHalf(got, x, &m, n)
		MatMul(plain, x, &m, n)
		row := make([]float32, cols)
		for r := 0; r < rows; r++ {
			m.Row(r, row)
			for s := 0; s < n; s++ {
				var exact, scale float64
				for j := range row {
					p := half(row[j]) * half(x[s*cols+j])
					exact += p
					scale += math.Abs(p)
				}
				assert.InDelta(t, exact, got[s*rows+r], cols*scale/(1<<24), "%s [%d][%d]", typ, s, r)
			}
		}
		assert.NotEqual(t, plain, got, "%s: the halves moved the products", typ)
	}
}

// TestStateMatmulHalf: a State with MatmulHalf moves the logits from the
// f32 State's, and is independent of chunking as the f32 State is (each
// token's products are its own row's).
func TestStateMatmulHalf(t *testing.T) {
	m := defaultTestModel().open(t)
	tokens := randomTokens(29, m.Config.NVocab, 3)
	want, _ := chunkedLogits(t, m, tokens, len(tokens), func(*State) {}) // f32
	logits := func(chunk int) []float32 {
		out, _ := chunkedLogits(t, m, tokens, chunk, func(s *State) { s.MatmulHalf = true })
		return out
	}
	whole := logits(len(tokens))
	var diff float64
	for i := range want {
		diff = max(diff, float64(abs32(whole[i]-want[i])))
	}
	assert.Positive(t, diff, "the halves moved the logits")
	assert.Equal(t, whole, logits(1), "token by token as in one call")
}
