package mod

import (
	"math"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRoPEByHand: one head of 4 (two pairs), base 100, frequency factors
// [1, 2], linear scaling by 2. By hand: pair 0 turns 100^0 / 1 / 2 = 0.5
// radian a position, pair 1 100^(-2/4) / 2 / 2 = 0.025; at position 3 the
// angles are 1.5 and 0.075, so (1, 0) becomes (cos 1.5, sin 1.5) and
// (0, 2) becomes (-2 sin 0.075, 2 cos 0.075). Tolerance: float32 rounding.
func TestRoPEByHand(t *testing.T) {
	c := Config{HeadDim: 4, RopeBase: 100, RopeScale: 2}
	freqs := RopeFrequencies(c, []float32{1, 2})
	assert.InDeltaSlice(t, []float64{0.5, 0.025}, freqs, 1e-15)
	v := []float32{1, 0, 0, 2}
	RoPE(v, 3, freqs)
	assert.InDeltaSlice(t, []float32{0.0707372017, 0.9974949866, -0.1498594145, 1.9943776362}, v, 2e-7)

	// Two heads rotate alike; position 0 is the identity.
	two := []float32{1, 0, 0, 2, 1, 0, 0, 2}
	RoPE(two, 3, freqs)
	assert.Equal(t, v, two[:4])
	assert.Equal(t, v, two[4:])
	same := []float32{0.5, -1, 3, 4}
	RoPE(same, 0, freqs)
	assert.Equal(t, []float32{0.5, -1, 3, 4}, same)

	// No factors and no scaling (RopeScale 0 or 1): base^(-2i/headDim).
	for _, scale := range []float32{0, 1} {
		plain := RopeFrequencies(Config{HeadDim: 4, RopeBase: 100, RopeScale: scale}, nil)
		assert.InDeltaSlice(t, []float64{1, 0.1}, plain, 1e-15, "scale %g", scale)
	}
}

// TestLlama3RopeFactors: Llama 3.2's rule (factor 32, low and high
// frequency factors 1 and 4, original context 8192) on heads of 64 at base
// 500000. Pair i's wavelength is 2 pi * 500000^(2i/64): pairs 0..14 are
// under 8192/4 = 2048 (factor 1), pairs 18..31 over 8192 (factor 32), and
// pairs 15, 16, 17 (wavelengths 2948.30, 4442.88, 6695.11) blend: s =
// (8192/wavelength - 1) / 3 = 0.592849, 0.281283, 0.074527, factor
// 1 / ((1-s)/32 + s) = 1.651329, 3.292262, 9.666729.
func TestLlama3RopeFactors(t *testing.T) {
	got, err := Llama3RopeFactors(64, 500000, 32, 1, 4, 8192)
	require.NoError(t, err)
	require.Len(t, got, 32)
	for i, f := range got {
		switch {
		case i <= 14:
			assert.Equal(t, float32(1), f, "pair %d", i)
		case i >= 18:
			assert.Equal(t, float32(32), f, "pair %d", i)
		}
	}
	assert.InDeltaSlice(t, []float32{1.651329, 3.292262, 9.666729}, got[15:18], 2e-6)

	for _, bad := range []struct {
		name              string
		factor, low, high float64
		ctx, headDim      int
		base              float64
	}{
		{"factor below 1", 0.5, 1, 4, 8192, 64, 500000},
		{"low not below high", 32, 4, 4, 8192, 64, 500000},
		{"no context", 32, 1, 4, 0, 64, 500000},
		{"odd head", 32, 1, 4, 8192, 63, 500000},
		{"NaN base", 32, 1, 4, 8192, 64, math.NaN()},
	} {
		_, err := Llama3RopeFactors(bad.headDim, bad.base, bad.factor, bad.low, bad.high, bad.ctx)
		assert.ErrorContains(t, err, "llama3 rope scaling", bad.name)
	}
}

// TestRopeScalingKeys: rope.scaling.* as llama.cpp reads them for a llama
// model. The type defaults to linear, whose factor (or the older
// rope.scale_linear) divides the frequencies; "none" ignores the factor;
// YaRN, LongRoPE, an attention factor and a negative factor are refused
// naming the key.
func TestRopeScalingKeys(t *testing.T) {
	key := func(k string) string { return ArchKey(ArchLlama, k) }
	cases := []struct {
		name  string
		kvs   map[string]gguf.Value
		scale float32
		err   string
	}{
		{"none given", nil, 0, ""},
		{"linear by default", map[string]gguf.Value{key(KeyRopeScalingFactor): gguf.Scalar(float32(4))}, 4, ""},
		{"linear", map[string]gguf.Value{key(KeyRopeScalingType): gguf.Scalar("linear"), key(KeyRopeScalingFactor): gguf.Scalar(float32(8))}, 8, ""},
		{"the older key", map[string]gguf.Value{key(KeyRopeScaleLinear): gguf.Scalar(float32(2))}, 2, ""},
		{"type none ignores the factor", map[string]gguf.Value{key(KeyRopeScalingType): gguf.Scalar("none"), key(KeyRopeScalingFactor): gguf.Scalar(float32(4))}, 0, ""},
		{"attention factor 1", map[string]gguf.Value{key(KeyRopeScalingAttnFactor): gguf.Scalar(float32(1))}, 0, ""},
		{"yarn", map[string]gguf.Value{key(KeyRopeScalingType): gguf.Scalar("yarn")}, 0, `rope.scaling.type = "yarn" is not supported`},
		{"longrope", map[string]gguf.Value{key(KeyRopeScalingType): gguf.Scalar("longrope")}, 0, `rope.scaling.type = "longrope" is not supported`},
		{"attention factor", map[string]gguf.Value{key(KeyRopeScalingAttnFactor): gguf.Scalar(float32(0.5))}, 0, "rope.scaling.attn_factor = 0.5 is not supported"},
		{"negative factor", map[string]gguf.Value{key(KeyRopeScalingFactor): gguf.Scalar(float32(-2))}, 0, "rope.scaling.factor = -2 is negative"},
		{"type not a string", map[string]gguf.Value{key(KeyRopeScalingType): gguf.Scalar(uint32(1))}, 0, "rope.scaling.type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm := defaultTestModel()
			tm.routed = nil
			tm.edit = func(w *gguf.Writer, _ map[string][]float32) {
				for k, v := range c.kvs {
					require.NoError(t, w.SetKV(k, v))
				}
			}
			m, err := Open(tm.write(t))
			if c.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.err)
				assert.Contains(t, err.Error(), "model.gguf", "the error names the file")
				return
			}
			require.NoError(t, err)
			defer m.Close()
			assert.Equal(t, c.scale, m.Config.RopeScale)
		})
	}
}

// TestRopeFreqsTensor: rope_freqs.weight, when present, is read as the
// frequency factors and enters the model's RoPE table and its forward pass;
// a wrong shape, a non-F32 type or a factor that is not positive and finite
// is refused naming the tensor.
func TestRopeFreqsTensor(t *testing.T) {
	tm := defaultTestModel()
	hd := tm.nEmbd / tm.nHead
	factors := make([]float32, hd/2)
	for i := range factors {
		factors[i] = 1 + float32(i) // 1, 2, 3, 4
	}
	plain := tm.open(t)
	with := tm
	with.edit = func(w *gguf.Writer, _ map[string][]float32) {
		require.NoError(t, w.AddFloat32(TensorRopeFreqs, gguf.TypeF32, []uint64{uint64(hd / 2)}, factors))
	}
	m := with.open(t)
	assert.Equal(t, factors, m.Weights.RopeFactors())
	assert.Nil(t, plain.Weights.RopeFactors())
	want := plain.RopeFreqs()
	for i := range want {
		want[i] /= float64(factors[i])
	}
	assert.Equal(t, want, m.RopeFreqs())

	// The factors change the logits from the second position on (position
	// 0 does not rotate).
	tokens := randomTokens(6, tm.nVocab, 3)
	logits := func(m *Model) []float32 {
		s, err := m.NewState(RoutingRouter)
		require.NoError(t, err)
		out, err := s.Forward(tokens, true)
		require.NoError(t, err)
		return out
	}
	a, b := logits(plain), logits(m)
	assert.Equal(t, a[:tm.nVocab], b[:tm.nVocab], "position 0")
	assert.NotEqual(t, a[tm.nVocab:], b[tm.nVocab:], "later positions")

	for _, bad := range []struct {
		name string
		typ  gguf.TensorType
		dims []uint64
		v    []float32
		want string
	}{
		{"shape", gguf.TypeF32, []uint64{uint64(hd)}, make([]float32, hd), "has shape"},
		{"type", gguf.TypeF16, []uint64{uint64(hd / 2)}, factors, "must be F32"},
		{"zero", gguf.TypeF32, []uint64{uint64(hd / 2)}, []float32{1, 0, 1, 1}, "factor 1 is 0"},
		{"NaN", gguf.TypeF32, []uint64{uint64(hd / 2)}, []float32{1, 1, float32(math.NaN()), 1}, "factor 2 is NaN"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			tb := tm
			tb.edit = func(w *gguf.Writer, _ map[string][]float32) {
				require.NoError(t, w.AddFloat32(TensorRopeFreqs, bad.typ, bad.dims, bad.v))
			}
			_, err := Open(tb.write(t))
			require.Error(t, err)
			assert.Contains(t, err.Error(), TensorRopeFreqs)
			assert.Contains(t, err.Error(), bad.want)
		})
	}
}

// TestTiedOutput: a file without output.weight (Llama 3.2, TinyStories
// models) classifies with token_embd.weight: each logit is the token's
// embedding row dotted with the final normed hidden state.
func TestTiedOutput(t *testing.T) {
	tm := defaultTestModel()
	tm.edit = func(_ *gguf.Writer, tensors map[string][]float32) { delete(tensors, TensorOutput) }
	m := tm.open(t)
	assert.Equal(t, TensorTokenEmbd, m.Weights.Output.Name)
	s, err := m.NewState(RoutingRouter)
	require.NoError(t, err)
	s.Trace = &Trace{}
	tokens := randomTokens(5, tm.nVocab, 9)
	logits, err := s.Forward(tokens, true)
	require.NoError(t, err)
	d := tm.nEmbd
	row := make([]float32, d)
	for i := range tokens {
		h := s.Trace.Hidden[i*d : (i+1)*d]
		for v := 0; v < tm.nVocab; v++ {
			m.Weights.TokenEmbd.Row(v, row)
			var want float64
			for j := range row {
				want += float64(row[j]) * float64(h[j])
			}
			require.InDelta(t, want, logits[i*tm.nVocab+v], 1e-4, "token %d logit %d", i, v)
		}
	}
}
