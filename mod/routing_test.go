package mod

import (
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// run feeds tokens in chunks of the given size (0 = all at once) and returns
// the logits of every token, plus the state.
func run(t *testing.T, m *Model, r Routing, tokens []int32, chunk int) ([]float32, *State) {
	t.Helper()
	s, err := m.NewState(r)
	require.NoError(t, err)
	if chunk == 0 {
		chunk = len(tokens)
	}
	var logits []float32
	for lo := 0; lo < len(tokens); lo += chunk {
		out, err := s.Forward(tokens[lo:min(lo+chunk, len(tokens))], true)
		require.NoError(t, err)
		logits = append(logits, out...)
	}
	return logits, s
}

// TestGenerateIsIndependentOfChunking: causal routing decides per token, so
// prefilling a prompt at once, in chunks of 3, or token by token gives the
// same logits and the same compact caches (DESIGN.md §3, generate mode).
// Tolerance 1e-5: the same arithmetic in a different grouping of rows; only
// the attention sums' lengths differ, not their order.
func TestGenerateIsIndependentOfChunking(t *testing.T) {
	m := defaultTestModel().open(t)
	tokens := randomTokens(41, m.Config.NVocab, 7)
	for _, r := range []Routing{RoutingRouter, RoutingPredictor} {
		t.Run(r.String(), func(t *testing.T) {
			whole, sw := run(t, m, r, tokens, 0)
			for _, chunk := range []int{3, 1} {
				got, sc := run(t, m, r, tokens, chunk)
				assertClose(t, whole, got, 1e-5, "%s: chunks of %d vs one call", r, chunk)
				for l := 0; l < m.Config.NLayer; l++ {
					kw, vw, pw := sw.KV(l)
					kc, vc, pc := sc.KV(l)
					assert.Equal(t, pw, pc, "layer %d cache positions, chunks of %d", l, chunk)
					assertClose(t, kw, kc, 1e-5, "layer %d keys, chunks of %d", l, chunk)
					assertClose(t, vw, vc, 1e-5, "layer %d values, chunks of %d", l, chunk)
				}
			}
			for _, l := range m.Config.RoutedLayers() {
				frac := float64(sw.Selected[l]) / float64(sw.Seen[l])
				assert.True(t, frac > 0.05 && frac < 0.95, "layer %d routes %.2f of tokens: the test model should route some, not all", l, frac)
			}
		})
	}
}

// TestCompactCacheHoldsTheSelectedTokens: a routed layer's cache holds the
// selected tokens only, in position order; a dense layer's holds every token.
func TestCompactCacheHoldsTheSelectedTokens(t *testing.T) {
	m := defaultTestModel().open(t)
	tokens := randomTokens(30, m.Config.NVocab, 3)
	s, err := m.NewState(RoutingRouter)
	require.NoError(t, err)
	s.Trace = &Trace{}
	selected := map[int][]int32{}
	for lo := 0; lo < len(tokens); lo += 4 {
		_, err := s.Forward(tokens[lo:min(lo+4, len(tokens))], false)
		require.NoError(t, err)
		require.Len(t, s.Trace.Layers, 2)
		for _, lt := range s.Trace.Layers {
			for i, r := range lt.RouterLogits {
				if r > 0 {
					selected[lt.Layer] = append(selected[lt.Layer], int32(lo+i))
				}
			}
		}
	}
	for l := 0; l < m.Config.NLayer; l++ {
		k, v, pos := s.KV(l)
		if m.Config.Routed[l] {
			assert.Equal(t, selected[l], pos, "layer %d holds exactly the tokens with r > 0", l)
		} else {
			assert.Len(t, pos, len(tokens), "dense layer %d holds every token", l)
		}
		assert.Len(t, k, len(pos)*m.Config.KVDim())
		assert.Len(t, v, len(pos)*m.Config.KVDim())
	}
}

// TestTopKSelectsTheLargestRouterLogits checks eval mode against the rule of
// DESIGN.md §3: k = max(1, ceil(c*S)) largest r, in ascending position order.
func TestTopKSelectsTheLargestRouterLogits(t *testing.T) {
	m := defaultTestModel().open(t)
	for _, n := range []int{1, 2, 7, 37} {
		s, err := m.NewState(RoutingTopK)
		require.NoError(t, err)
		s.Trace = &Trace{}
		_, err = s.Forward(randomTokens(n, m.Config.NVocab, int64(n)), true)
		require.NoError(t, err)
		k := TopK(m.Config.Capacity, n)
		for _, lt := range s.Trace.Layers {
			require.Len(t, lt.Selected, k, "n=%d layer %d", n, lt.Layer)
			assert.IsIncreasing(t, append([]int{-1}, lt.Selected...))
			in := map[int]bool{}
			minSel := float32(1e30)
			for _, p := range lt.Selected {
				in[p] = true
				minSel = min(minSel, lt.RouterLogits[p])
			}
			for p, r := range lt.RouterLogits {
				if !in[p] {
					assert.LessOrEqual(t, r, minSel, "n=%d layer %d: unselected token %d outranks a selected one", n, lt.Layer, p)
				}
			}
		}
		_, err = s.Forward([]int32{0}, true)
		assert.ErrorContains(t, err, "one Forward call per sequence")
	}
}

func TestTopKRule(t *testing.T) {
	assert.Equal(t, []int{0, 2}, TopKIndices([]float32{5, 1, 5, 5}, 2), "ties go to the lower position")
	assert.Equal(t, []int{1, 3}, TopKIndices([]float32{0, 9, -1, 8}, 2), "returned in position order")
	assert.Equal(t, 1, TopK(0.125, 1))
	assert.Equal(t, 1, TopK(0.125, 8))
	assert.Equal(t, 2, TopK(0.125, 9))
	assert.Equal(t, 1, TopK(0.1, 10), "f32 0.1 * 10 is 1, not 2")
	assert.Equal(t, 5, TopK(0.125, 37))
	assert.Equal(t, 37, TopK(1, 37))
}

// TestAllSelectedEqualsDense: with every token selected and a gate of
// exactly 1 (sigmoid of a large bias, router weights zero), a routed block
// is the dense block, so the MoD model computes what the same weights
// without routers compute. This pins the gather/scatter and cache paths to
// the plain forward pass.
func TestAllSelectedEqualsDense(t *testing.T) {
	dense := defaultTestModel()
	dense.routed = nil
	mod := defaultTestModel()
	mod.predHidden = 0
	mod.edit = func(_ *gguf.Writer, ts map[string][]float32) {
		for _, l := range mod.routed {
			clear(ts[BlockTensor(int(l), TensorRouterWeight)])
			ts[BlockTensor(int(l), TensorRouterBias)][0] = 40 // sigmoid(40) == 1 in float32
		}
	}
	tokens := randomTokens(23, dense.nVocab, 5)
	want, _ := run(t, dense.open(t), RoutingRouter, tokens, 5)
	for _, r := range []Routing{RoutingRouter, RoutingTopK} {
		mm := mod.open(t)
		if r == RoutingTopK {
			mm.Config.Capacity = 1
		}
		got, _ := run(t, mm, r, tokens, map[Routing]int{RoutingRouter: 5, RoutingTopK: 0}[r])
		assertClose(t, want, got, 1e-5, "MoD with every token selected (%s) vs dense", r)
	}
}

// weightTypeCase is a weight type and the largest |Δlogit| it may cause
// (logits ~ ±5): each bit fewer doubles the quantization step.
type weightTypeCase struct {
	typ gguf.TensorType
	tol float64
}

// TestWeightTypes: quantized weights give the logits of their dequantized
// values. The packed dot products are checked against Row + an F32 dot;
// tolerances are relative to the quantization error, per type.
func TestWeightTypes(t *testing.T) {
	base := defaultTestModel()
	base.nEmbd, base.nHead, base.nKVHead, base.nFF = 64, 8, 4, 96 // quantized rows are whole blocks of 32
	checkWeightTypes(t, base, []weightTypeCase{
		{gguf.TypeF16, 0.01},
		{gguf.TypeBF16, 0.1},
		{gguf.TypeQ8_0, 0.1},
		{gguf.TypeQ4_0, 1.5},
		{gguf.TypeQ4_1, 1.5},  // 16 levels, as Q4_0
		{gguf.TypeQ5_0, 0.75}, // 32 levels: half Q4_0's step
		{gguf.TypeQ5_1, 0.75},
	})
	// The K-quants' rows are whole super-blocks of 256.
	base.nEmbd, base.nFF = 256, 256
	checkWeightTypes(t, base, []weightTypeCase{
		{gguf.TypeQ6_K, 0.4},
		{gguf.TypeQ5_K, 0.75},
		{gguf.TypeQ4_K, 1.5},
		{gguf.TypeQ3_K, 3},
		{gguf.TypeQ2_K, 6},
	})
}

func checkWeightTypes(t *testing.T, base testModel, cases []weightTypeCase) {
	tokens := randomTokens(19, base.nVocab, 11)
	f32, _ := run(t, base.open(t), RoutingRouter, tokens, 0)
	for _, c := range cases {
		t.Run(c.typ.String(), func(t *testing.T) {
			tm := base
			tm.weightType = c.typ
			m := tm.open(t)
			assert.Equal(t, c.typ, m.Weights.Blocks[0].Q.Type)
			assert.Equal(t, c.typ, m.Weights.TokenEmbd.Type)
			got, _ := run(t, m, RoutingRouter, tokens, 0)
			assertClose(t, f32, got, c.tol, "%s logits vs F32", c.typ)
			// The packed kernel equals decoding the row and an F32 dot.
			q := &m.Weights.Blocks[2].Gate
			x := randn32(q.Cols, 3)
			row := make([]float32, q.Cols)
			for i := 0; i < q.Rows; i++ {
				q.Row(i, row)
				want := DotF32(row, x)
				require.InDelta(t, want, q.Dot(i, x), 1e-4*(1+float64(abs32(want))), "row %d", i)
			}
		})
	}
}

func randn32(n int, seed int64) []float32 {
	v := randomTokens(n, 1000, seed)
	out := make([]float32, n)
	for i := range v {
		out[i] = float32(v[i])/500 - 1
	}
	return out
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

func TestForwardRefusesBadInput(t *testing.T) {
	m := defaultTestModel().open(t)
	s, err := m.NewState(RoutingRouter)
	require.NoError(t, err)
	_, err = s.Forward(nil, false)
	assert.ErrorContains(t, err, "no tokens")
	_, err = s.Forward([]int32{67}, false)
	assert.ErrorContains(t, err, "token 67 at index 0 is outside the vocabulary [0, 67)")
	_, err = s.Forward(make([]int32, 97), false)
	assert.ErrorContains(t, err, "97 tokens after 0 would pass the context length 96")
	_, err = s.Forward(make([]int32, 96), false)
	require.NoError(t, err)
	_, err = s.Forward([]int32{1}, false)
	assert.ErrorContains(t, err, "1 tokens after 96 would pass the context length 96")

	noPred := defaultTestModel()
	noPred.predHidden = 0
	_, err = noPred.open(t).NewState(RoutingPredictor)
	assert.ErrorContains(t, err, "the model has no predictor")
}

// TestLoadRefusesBadFiles: each broken file fails at load with an error that
// names what is wrong.
func TestLoadRefusesBadFiles(t *testing.T) {
	cases := []struct {
		name string
		edit func(w *gguf.Writer, ts map[string][]float32)
		mod  func(tm *testModel)
		want string
	}{
		{"missing tensor", func(_ *gguf.Writer, ts map[string][]float32) { delete(ts, BlockTensor(2, TensorFFNUp)) }, nil,
			`tensor "blk.2.ffn_up.weight" is missing`},
		{"missing router", func(_ *gguf.Writer, ts map[string][]float32) { delete(ts, BlockTensor(1, TensorRouterWeight)) }, nil,
			`tensor "blk.1.mod_router.weight" is missing`},
		{"unknown tensor", func(w *gguf.Writer, _ map[string][]float32) {
			w.AddFloat32("blk.0.extra.weight", gguf.TypeF32, []uint64{2}, []float32{1, 2})
		}, nil, "unknown tensors for this configuration: blk.0.extra.weight"},
		{"router in a dense layer", func(w *gguf.Writer, _ map[string][]float32) {
			w.AddFloat32(BlockTensor(2, TensorRouterWeight), gguf.TypeF32, []uint64{48}, make([]float32, 48))
		}, nil, "unknown tensors for this configuration: blk.2.mod_router.weight"},
		{"capacity 0", nil, func(tm *testModel) { tm.capacity = 0 }, "llama-mod.mod.capacity = 0 is not in (0, 1]"},
		{"unknown gate", nil, func(tm *testModel) { tm.gate = "tanh" }, `llama-mod.mod.gate = "tanh" is not "sigmoid" or "identity"`},
		{"routed layer out of range", nil, func(tm *testModel) { tm.routed = []uint32{1, 9} }, "layer 9 is out of range [0, 4)"},
		{"heads do not divide", nil, func(tm *testModel) { tm.nHead = 5 }, "llama-mod.embedding_length = 48 is not a multiple of llama-mod.attention.head_count = 5"},
		{"kv heads do not divide", nil, func(tm *testModel) { tm.nKVHead = 4 }, "llama-mod.attention.head_count = 6 is not a multiple of llama-mod.attention.head_count_kv = 4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm := defaultTestModel()
			tm.edit = c.edit
			if c.mod != nil {
				c.mod(&tm)
			}
			_, err := Open(tm.write(t))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), "model.gguf", "the error names the file")
		})
	}
}

func TestLoadRefusesWrongShapeAndType(t *testing.T) {
	tm := defaultTestModel()
	tm.weightType = gguf.TypeF16
	tm.edit = func(w *gguf.Writer, ts map[string][]float32) {
		// Store the router as F16: MoD tensors must stay F32.
		name := BlockTensor(3, TensorRouterWeight)
		w.AddFloat32(name, gguf.TypeF16, []uint64{48}, ts[name])
		delete(ts, name)
	}
	_, err := Open(tm.write(t))
	assert.ErrorContains(t, err, `tensor "blk.3.mod_router.weight" is F16; MoD tensors must be F32`)

	tm = defaultTestModel()
	tm.edit = func(w *gguf.Writer, ts map[string][]float32) {
		name := BlockTensor(0, TensorAttnK)
		w.AddFloat32(name, gguf.TypeF32, []uint64{48, 48}, make([]float32, 48*48))
		delete(ts, name)
	}
	_, err = Open(tm.write(t))
	assert.ErrorContains(t, err, `tensor "blk.0.attn_k.weight" has shape [48 48], want [48 16] (nEmbd,kvDim)`)
}

func TestNewMatRefusesBadInput(t *testing.T) {
	_, err := NewMat("blk.0.attn_q.weight", gguf.TensorType(16), []uint64{256, 2}, make([]byte, 2*66))
	assert.ErrorContains(t, err, `tensor "blk.0.attn_q.weight": type IQ2_XXS is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K are)`)
	_, err = NewMat("w", gguf.TypeQ4_K, []uint64{128, 2}, make([]byte, 144))
	assert.ErrorContains(t, err, `tensor "w": first dimension 128 is not a multiple of the Q4_K block size 256`)
	_, err = NewMat("w", gguf.TypeQ6_K, []uint64{256, 2}, make([]byte, 210))
	assert.ErrorContains(t, err, `tensor "w": 210 bytes, Q6_K [256 2] takes 420`)
}
