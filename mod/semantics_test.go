package mod

import (
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withKV returns the test model with extra metadata keys (under the
// llama-mod prefix) and an optional tensor edit.
func withKV(tm testModel, kvs map[string]gguf.Value, edit func(map[string][]float32)) testModel {
	tm.edit = func(w *gguf.Writer, ts map[string][]float32) {
		for k, v := range kvs {
			if err := w.SetKV(ArchKey(ArchMoD, k), v); err != nil {
				panic(err) // a broken test, not input
			}
		}
		if edit != nil {
			edit(ts)
		}
	}
	return tm
}

// linearPredictor gives the test model a linear predictor p = w·x + b in
// place of its MLP one.
func linearPredictor(tm testModel, kvs map[string]gguf.Value) testModel {
	tm.predHidden = 0
	kvs[KeyPredictor] = gguf.Scalar(PredictorLinear)
	return withKV(tm, kvs, func(ts map[string][]float32) {
		for i, l := range tm.routed {
			w := make([]float32, tm.nEmbd)
			for e := range w {
				w[e] = float32((e*7+int(l))%11-5) / float32(tm.nEmbd)
			}
			ts[BlockTensor(int(l), TensorPredWeight)] = w
			ts[BlockTensor(int(l), TensorPredBias)] = []float32{0.1 * float32(i)}
		}
	})
}

// TestSemanticsKeys: the mod.* semantics keys are read into the Config, an
// absent key means DESIGN.md §3, and a bad value is an error naming the key.
func TestSemanticsKeys(t *testing.T) {
	base := defaultTestModel()
	def := base.open(t).Config
	assert.Equal(t, GateTargetBlock, def.GateTarget)
	assert.Equal(t, PositionsOriginal, def.Positions)
	assert.Equal(t, RoundingCeil, def.CapacityRounding)
	assert.Equal(t, 0, def.CapacityTokens)
	assert.Nil(t, def.RouterBias)
	assert.Equal(t, PredictorMLP, def.Predictor)
	assert.Equal(t, RoutingRouter, def.CausalRouting)
	assert.Empty(t, def.Semantics(), "a file without the keys is DESIGN.md §3")

	c := withKV(base, map[string]gguf.Value{
		KeyGateTarget: gguf.Scalar(GateTargetMLP), KeyPositions: gguf.Scalar(PositionsCompact),
		KeyCapacityTokens: gguf.Scalar(uint32(4)), KeyRouterBias: gguf.Scalar(true),
		KeyCausalRouting: gguf.Scalar("predictor"),
	}, nil).open(t).Config
	assert.Equal(t, GateTargetMLP, c.GateTarget)
	assert.Equal(t, PositionsCompact, c.Positions)
	assert.Equal(t, 4, c.CapacityTokens)
	require.NotNil(t, c.RouterBias)
	assert.True(t, *c.RouterBias)
	assert.Equal(t, RoutingPredictor, c.CausalRouting)
	assert.Equal(t, []string{"mod.gate_target = mlp", "mod.positions = compact", "mod.capacity_tokens = 4"}, c.Semantics())

	lin := linearPredictor(base, map[string]gguf.Value{KeyGateTarget: gguf.Scalar(GateTargetOutput), KeyCapacityRounding: gguf.Scalar(RoundingFloor)}).open(t)
	assert.Equal(t, PredictorLinear, lin.Config.Predictor)
	assert.True(t, lin.Config.HasPredictor())
	assert.Equal(t, []string{"mod.gate_target = output", "mod.capacity_rounding = floor", "mod.predictor = linear"}, lin.Config.Semantics())
	r := lin.Weights.Blocks[1].Router
	require.NotNil(t, r.Pred)
	assert.Nil(t, r.PredUp)
}

// TestSemanticsKeysRefused: each bad key value fails at load, naming the key.
func TestSemanticsKeysRefused(t *testing.T) {
	cases := []struct {
		name string
		kvs  map[string]gguf.Value
		want string
	}{
		{"gate target", map[string]gguf.Value{KeyGateTarget: gguf.Scalar("attention")}, `llama-mod.mod.gate_target = "attention" is not one of block, mlp, output`},
		{"gate target type", map[string]gguf.Value{KeyGateTarget: gguf.Scalar(uint32(1))}, "llama-mod.mod.gate_target"},
		{"positions", map[string]gguf.Value{KeyPositions: gguf.Scalar("relative")}, "llama-mod.mod.positions"},
		{"rounding", map[string]gguf.Value{KeyCapacityRounding: gguf.Scalar("round")}, "llama-mod.mod.capacity_rounding"},
		{"capacity tokens 0", map[string]gguf.Value{KeyCapacityTokens: gguf.Scalar(uint32(0))}, "llama-mod.mod.capacity_tokens = 0 is not in [1,"},
		{"router bias type", map[string]gguf.Value{KeyRouterBias: gguf.Scalar("yes")}, "llama-mod.mod.router_bias"},
		{"router bias false, tensor present", map[string]gguf.Value{KeyRouterBias: gguf.Scalar(false)}, `llama-mod.mod.router_bias = false, but tensor "blk.1.mod_router.bias" is present`},
		{"predictor mlp without hidden", map[string]gguf.Value{KeyPredictor: gguf.Scalar(PredictorMLP)}, "an MLP predictor needs a hidden width"},
		{"predictor linear with hidden", map[string]gguf.Value{KeyPredictor: gguf.Scalar(PredictorLinear)}, "an MLP predictor needs a hidden width"},
		{"causal routing", map[string]gguf.Value{KeyCausalRouting: gguf.Scalar("topk")}, "llama-mod.mod.causal_routing"},
		{"causal predictor without one", map[string]gguf.Value{KeyCausalRouting: gguf.Scalar("predictor")}, "but the model has no predictor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tm := defaultTestModel()
			if c.name == "predictor mlp without hidden" || c.name == "causal predictor without one" {
				tm.predHidden = 0
			}
			_, err := Open(withKV(tm, c.kvs, nil).write(t))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), "model.gguf", "the error names the file")
		})
	}
	t.Run("router bias true, tensor absent", func(t *testing.T) {
		tm := defaultTestModel()
		tm.bias = false
		_, err := Open(withKV(tm, map[string]gguf.Value{KeyRouterBias: gguf.Scalar(true)}, nil).write(t))
		assert.ErrorContains(t, err, `llama-mod.mod.router_bias = true, but tensor "blk.1.mod_router.bias" is absent`)
	})
}

func TestTopKCount(t *testing.T) {
	cases := []struct {
		c    Config
		n    int
		want int
	}{
		{Config{Capacity: 0.125}, 37, 5},                                  // §3: max(1, ceil(c·n))
		{Config{Capacity: 0.125}, 3, 1},                                   // never 0
		{Config{Capacity: 0.125, CapacityRounding: RoundingFloor}, 37, 4}, // int(37*0.125) = 4
		{Config{Capacity: 0.125, CapacityRounding: RoundingFloor}, 7, 0},  // may be 0
		{Config{Capacity: 0.5, CapacityRounding: RoundingFloor}, 9, 4},
		{Config{CapacityTokens: 6}, 37, 6}, // min(n, tokens)
		{Config{CapacityTokens: 6}, 4, 4},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, c.c.TopKCount(c.n), "%+v, n = %d", c.c, c.n)
	}
}

// variants are the semantics combinations of the public MoD layouts, on the
// test model: MoD Llama 2 (gate on the MLP, compact positions, k a token
// count) and the Mixture-AI wrapper (gate on the output, identity gate,
// floor rounding, linear predictor).
func variants() map[string]testModel {
	base := defaultTestModel()
	llama2 := withKV(base, map[string]gguf.Value{
		KeyGateTarget: gguf.Scalar(GateTargetMLP), KeyPositions: gguf.Scalar(PositionsCompact),
		KeyCapacityTokens: gguf.Scalar(uint32(7)),
	}, nil)
	wrapper := base
	wrapper.gate = GateIdentity
	wrapper = linearPredictor(wrapper, map[string]gguf.Value{
		KeyGateTarget: gguf.Scalar(GateTargetOutput), KeyPositions: gguf.Scalar(PositionsCompact),
		KeyCapacityRounding: gguf.Scalar(RoundingFloor),
	})
	return map[string]testModel{"mod-llama2": llama2, "mixture-ai": wrapper}
}

// TestVariantsGenerateIsIndependentOfChunking: with compact positions too, a
// token's position in a routed block is its index among the tokens that
// entered the block so far, so prefilling at once, in chunks or token by
// token gives the same logits and caches. Tolerance as in
// TestGenerateIsIndependentOfChunking.
func TestVariantsGenerateIsIndependentOfChunking(t *testing.T) {
	for name, tm := range variants() {
		m := tm.open(t)
		tokens := randomTokens(29, m.Config.NVocab, 3)
		for _, r := range []Routing{RoutingRouter, RoutingPredictor} {
			t.Run(name+"/"+r.String(), func(t *testing.T) {
				whole, sw := run(t, m, r, tokens, 0)
				for _, chunk := range []int{4, 1} {
					got, sc := run(t, m, r, tokens, chunk)
					assertClose(t, whole, got, 1e-5, "chunks of %d vs one call", chunk)
					for _, l := range m.Config.RoutedLayers() {
						kw, _, pw := sw.KV(l)
						kc, _, pc := sc.KV(l)
						assert.Equal(t, pw, pc, "layer %d cache positions, chunks of %d", l, chunk)
						assertClose(t, kw, kc, 1e-5, "layer %d keys, chunks of %d", l, chunk)
					}
				}
				for _, l := range m.Config.RoutedLayers() {
					assert.True(t, sw.Selected[l] > 0 && sw.Selected[l] < sw.Seen[l], "layer %d routes %d of %d tokens: the test needs some, not all", l, sw.Selected[l], sw.Seen[l])
				}
			})
		}
	}
}

// TestOutputGateAllSelectedEqualsDense: gate on the output with identity
// g = 1 (router weights 0, bias 1) and every token selected makes a routed
// block the dense block, at compact positions that then equal the original
// ones; so the MoD model computes what the same weights without routers do.
func TestOutputGateAllSelectedEqualsDense(t *testing.T) {
	dense := defaultTestModel()
	dense.routed = nil
	tm := defaultTestModel()
	tm.predHidden, tm.gate = 0, GateIdentity
	tm = withKV(tm, map[string]gguf.Value{KeyGateTarget: gguf.Scalar(GateTargetOutput), KeyPositions: gguf.Scalar(PositionsCompact), KeyCapacityTokens: gguf.Scalar(uint32(1000))},
		func(ts map[string][]float32) {
			for _, l := range tm.routed {
				clear(ts[BlockTensor(int(l), TensorRouterWeight)])
				ts[BlockTensor(int(l), TensorRouterBias)][0] = 1
			}
		})
	tokens := randomTokens(23, dense.nVocab, 5)
	want, _ := run(t, dense.open(t), RoutingRouter, tokens, 5)
	m := tm.open(t)
	for _, r := range []Routing{RoutingRouter, RoutingTopK} {
		got, _ := run(t, m, r, tokens, map[Routing]int{RoutingRouter: 5, RoutingTopK: 0}[r])
		assertClose(t, want, got, 1e-5, "output gate, every token selected (%s), vs dense", r)
	}
}

// TestCompactPositionsDiffer: the same model with original and with compact
// positions gives different logits once a routed block skips a token (the
// key changes what the model computes; it is not ignored).
func TestCompactPositionsDiffer(t *testing.T) {
	orig := defaultTestModel()
	compact := withKV(orig, map[string]gguf.Value{KeyPositions: gguf.Scalar(PositionsCompact)}, nil)
	tokens := randomTokens(19, orig.nVocab, 2)
	a, s := run(t, orig.open(t), RoutingTopK, tokens, 0)
	b, _ := run(t, compact.open(t), RoutingTopK, tokens, 0)
	require.Less(t, s.Selected[1], s.Seen[1])
	assert.NotEqual(t, a, b)
}
