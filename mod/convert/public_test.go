package convert

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/quant"
)

// The public layouts' fixtures (testdata/convert/NAME/, written by
// train/public_fixtures.py): a checkpoint under the layout's exact names,
// its own config file, and golden.json from the PyTorch forward passes of
// train/public_mod.py.
type golden struct {
	Format     string `json:"format"`
	Layout     Layout `json:"layout"`
	Checkpoint string `json:"checkpoint"`
	Config     string `json:"config"`
	Tokens     []int32
	Cases      []struct {
		Name    string `json:"name"`
		Mode    string `json:"mode"`    // eval | generate
		Routing string `json:"routing"` // topk | router | predictor
		Logits  struct {
			F32 string `json:"f32"`
		} `json:"logits"` // [S][nVocab]
		NLL    float64 `json:"nll"` // mean next-token NLL, nats
		Layers []struct {
			Layer        int `json:"layer"`
			RouterLogits struct {
				F32 string `json:"f32"`
			} `json:"router_logits"`
			PredictorLogits struct {
				F32 string `json:"f32"`
			} `json:"predictor_logits"`
			Selected []int `json:"selected"`
		} `json:"layers"`
	} `json:"cases"`
}

var publicFixtures = []string{"modllama2-aux", "modllama2", "mixtureai-meta", "mixtureai-hf", "hf-dense", "meta-dense"}

func loadGolden(t *testing.T, dir string) golden {
	t.Helper()
	raw, err := os.ReadFile(td(filepath.Join(dir, "golden.json")))
	require.NoError(t, err)
	var g golden
	require.NoError(t, json.Unmarshal(raw, &g))
	require.Equal(t, "modrun-public-fixture/1", g.Format)
	return g
}

// convertPublic loads, converts and opens a public fixture's checkpoint.
func convertPublic(t *testing.T, dir string, g golden) (*Source, *mod.Model) {
	t.Helper()
	src, err := Load(td(filepath.Join(dir, g.Checkpoint)), td(filepath.Join(dir, g.Config)))
	require.NoError(t, err)
	vocab, err := gguf.Open(td("vocab512.gguf"))
	require.NoError(t, err)
	defer vocab.Close()
	f32, err := quant.Pure(gguf.TypeF32)
	require.NoError(t, err)
	w, err := Convert(src.Checkpoint, src.Config, vocab, Options{Scheme: f32, Name: dir})
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), dir+".gguf")
	require.NoError(t, w.WriteFile(out))
	m, err := mod.Open(out)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return src, m
}

// Tolerances, Go float32 against PyTorch float32 on these tiny models
// (dim 32): they sum in different orders, a few ulps per term. Logits reach
// ~30 (the tied HF model), and a logit's rounding error follows the size of
// its row's terms, not its own value, so each is compared relative to
// max(1, its row's largest |logit|).
const (
	tolPublicLogits = 1e-5
	tolPublicRouter = 1e-5
	tolPublicNLL    = 1e-4 // relative
)

// TestPublicLayoutsMatchPyTorch: each public layout's checkpoint converts,
// under the layout it is, and the CPU reference gives PyTorch's logits and
// NLL and takes every routing decision PyTorch took, in eval (top-k) and
// causal modes.
func TestPublicLayoutsMatchPyTorch(t *testing.T) {
	for _, dir := range publicFixtures {
		t.Run(dir, func(t *testing.T) {
			g := loadGolden(t, dir)
			src, m := convertPublic(t, dir, g)
			assert.Equal(t, g.Layout, src.Layout)
			assert.NotEmpty(t, src.Description)
			for _, c := range g.Cases {
				r, err := mod.ParseRouting(c.Routing)
				require.NoError(t, err, c.Name)
				s, err := m.NewState(r)
				require.NoError(t, err, c.Name)
				s.Trace = &mod.Trace{}
				logits, err := s.Forward(g.Tokens, true)
				require.NoError(t, err, c.Name)
				want := decodeF32(t, c.Logits.F32)
				require.Len(t, logits, len(want), c.Name)
				worst, at := 0.0, 0
				nv := m.Config.NVocab
				for row := 0; row < len(want)/nv; row++ {
					scale := 1.0
					for _, v := range want[row*nv : (row+1)*nv] {
						scale = math.Max(scale, math.Abs(float64(v)))
					}
					for i := row * nv; i < (row+1)*nv; i++ {
						if d := math.Abs(float64(logits[i]-want[i])) / scale; d > worst {
							worst, at = d, i
						}
					}
				}
				t.Logf("%s: worst logit error %.2g (relative to its row's scale)", c.Name, worst)
				assert.LessOrEqual(t, worst, tolPublicLogits, "%s: logits differ most at %d: %g vs %g", c.Name, at, logits[at], want[at])

				require.Len(t, s.Trace.Layers, len(c.Layers), c.Name)
				for i, want := range c.Layers {
					got := s.Trace.Layers[i]
					assert.Equal(t, want.Layer, got.Layer, c.Name)
					sel := want.Selected
					if sel == nil {
						sel = []int{}
					}
					assert.Equal(t, sel, append([]int{}, got.Selected...), "%s layer %d: selected positions", c.Name, want.Layer)
					assertClose(t, decodeF32(t, want.RouterLogits.F32), got.RouterLogits, tolPublicRouter, c.Name+" router logits")
					if want.PredictorLogits.F32 != "" {
						assertClose(t, decodeF32(t, want.PredictorLogits.F32), got.PredictorLogits, tolPublicRouter, c.Name+" predictor logits")
					}
				}
				if c.Mode == "eval" {
					sc, err := engine.NewCPUScorer(m, mod.RoutingTopK)
					require.NoError(t, err)
					res, err := engine.Perplexity(sc, g.Tokens[1:], g.Tokens[0], len(g.Tokens), nil)
					require.NoError(t, err)
					t.Logf("%s: NLL %.7f, PyTorch %.7f", c.Name, res.NLL, c.NLL)
					assert.InDelta(t, 0, (res.NLL-c.NLL)/c.NLL, tolPublicNLL, "%s: NLL %g, PyTorch %g", c.Name, res.NLL, c.NLL)
				}
			}
		})
	}
}

func assertClose(t *testing.T, want, got []float32, tol float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		if math.Abs(float64(want[i]-got[i])) > tol {
			assert.Failf(t, what, "index %d: got %g, want %g (tolerance %g)", i, got[i], want[i], tol)
			return
		}
	}
}

// TestHFLlamaEqualsItsMetaTwin: a Hugging Face checkpoint converts to the
// same GGUF tensors as the same weights under Meta's names (q/k rows
// permuted back to interleaved pairs), so the two files compute the same.
func TestHFLlamaEqualsItsMetaTwin(t *testing.T) {
	_, hf := convertPublic(t, "hf-dense", loadGolden(t, "hf-dense"))
	_, meta := convertPublic(t, "meta-dense", loadGolden(t, "meta-dense"))
	assert.Equal(t, mod.ArchLlama, hf.Config.Arch)
	require.Equal(t, len(meta.File.Tensors), len(hf.File.Tensors))
	for _, ti := range meta.File.Tensors {
		want, err := meta.File.TensorFloat32(ti.Name)
		require.NoError(t, err)
		got, err := hf.File.TensorFloat32(ti.Name)
		require.NoError(t, err, ti.Name)
		assert.Equal(t, want, got, ti.Name)
	}
}

// TestPublicSemanticsKeys: the converted files declare their layouts'
// semantics in the mod.* keys.
func TestPublicSemanticsKeys(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		want mod.Config
	}{
		{"modllama2-aux", mod.Config{Gate: mod.GateSigmoid, GateTarget: mod.GateTargetMLP, Positions: mod.PositionsCompact, CapacityTokens: 9,
			CapacityRounding: mod.RoundingCeil, Predictor: mod.PredictorMLP, PredictorHidden: 16, CausalRouting: mod.RoutingPredictor}},
		{"modllama2", mod.Config{Gate: mod.GateSigmoid, GateTarget: mod.GateTargetMLP, Positions: mod.PositionsCompact, CapacityTokens: 40,
			CapacityRounding: mod.RoundingCeil, Predictor: mod.PredictorNone, CausalRouting: mod.RoutingRouter}},
		{"mixtureai-meta", mod.Config{Gate: mod.GateIdentity, GateTarget: mod.GateTargetOutput, Positions: mod.PositionsCompact, Capacity: 0.25,
			CapacityRounding: mod.RoundingFloor, Predictor: mod.PredictorLinear, CausalRouting: mod.RoutingPredictor}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			_, m := convertPublic(t, tc.dir, loadGolden(t, tc.dir))
			c := m.Config
			got := mod.Config{Gate: c.Gate, GateTarget: c.GateTarget, Positions: c.Positions, CapacityTokens: c.CapacityTokens,
				CapacityRounding: c.CapacityRounding, Predictor: c.Predictor, PredictorHidden: c.PredictorHidden, CausalRouting: c.CausalRouting}
			if tc.want.Capacity > 0 {
				got.Capacity = c.Capacity
			}
			assert.Equal(t, tc.want, got)
			require.NotNil(t, c.RouterBias)
			assert.Equal(t, tc.dir == "mixtureai-meta", *c.RouterBias)
		})
	}
}

// TestUnknownLayout: a checkpoint that fits no layout fails naming the
// tensors that do not fit; names and config of different families fail
// naming both.
func TestUnknownLayout(t *testing.T) {
	g := loadGolden(t, "modllama2-aux")
	ck, err := LoadCheckpoint(td("modllama2-aux/consolidated.00.pth"))
	require.NoError(t, err)
	params, err := readConfigJSON(td("modllama2-aux/params.json"))
	require.NoError(t, err)
	ck.Tensors["layers.1.attention.wqkv.weight"] = &Tensor{Shape: []int{96, 32}, Data: make([]float32, 96*32)}
	ck.Tensors["layers.2.lora_A.weight"] = &Tensor{Shape: []int{4, 32}, Data: make([]float32, 4*32)}
	_, err = adapt(ck, params)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unexpected tensors: layers.1.attention.wqkv.weight, layers.2.lora_A.weight`)
	assert.Equal(t, LayoutMoDLlama2, g.Layout)

	hfConfig, err := readConfigJSON(td("hf-dense/config.json"))
	require.NoError(t, err)
	meta, err := LoadCheckpoint(td("meta-dense/consolidated.00.pth"))
	require.NoError(t, err)
	_, err = adapt(meta, hfConfig)
	assert.ErrorContains(t, err, "Meta (layers.N.*) tensors with a Hugging Face config.json")

	// A shared router saved twice with different values is not MoD Llama 2.
	ck2, err := LoadCheckpoint(td("modllama2-aux/consolidated.00.pth"))
	require.NoError(t, err)
	r := ck2.Tensors["layers.3.router.weight"]
	ck2.Tensors["layers.3.router.weight"] = &Tensor{Shape: r.Shape, Data: append([]float32{1}, r.Data[1:]...)}
	_, err = adapt(ck2, params)
	assert.ErrorContains(t, err, `tensor "layers.3.router.weight" differs from "router.weight"`)
}

// TestSavedThroughWrappers: a state_dict saved through nn.DataParallel or
// torch.compile (every name prefixed), with the RoPE tables some trainers
// save (rope.freqs, rotary_emb.inv_freq), converts as the plain one does.
func TestSavedThroughWrappers(t *testing.T) {
	for _, dir := range []string{"modllama2-aux", "mixtureai-hf"} {
		t.Run(dir, func(t *testing.T) {
			g := loadGolden(t, dir)
			ck, err := LoadCheckpoint(td(filepath.Join(dir, g.Checkpoint)))
			require.NoError(t, err)
			cfg, err := readConfigJSON(td(filepath.Join(dir, g.Config)))
			require.NoError(t, err)
			plain, err := adapt(ck, cfg)
			require.NoError(t, err)
			wrapped := &Checkpoint{Path: ck.Path, Tensors: map[string]*Tensor{}}
			for n, v := range ck.Tensors {
				wrapped.Tensors["module._orig_mod."+n] = v
			}
			freqs := &Tensor{Shape: []int{4}, Data: make([]float32, 4)}
			wrapped.Tensors["module._orig_mod.rope.freqs"] = freqs
			wrapped.Tensors["module._orig_mod.model.layers.0.self_attn.rotary_emb.inv_freq"] = freqs
			got, err := adapt(wrapped, cfg)
			require.NoError(t, err)
			assert.Equal(t, plain.Layout, got.Layout)
			assert.Equal(t, plain.Checkpoint.Names(), got.Checkpoint.Names())
		})
	}
}
