package vulkan

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/shared"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The evaluator has engine.Scorer's method set (engine imports this
// package, so the check names the methods).
var _ interface {
	Score([]int32) ([]float32, error)
	ContextLen() int
	NVocab() int
} = (*Evaluator)(nil)

// evalFixture is the part of a golden fixture (testdata/mod, see
// mod/fixture_test.go) that eval mode checks.
type evalFixture struct {
	Model string `json:"model"`
	Cases []struct {
		Name   string  `json:"name"`
		Mode   string  `json:"mode"`
		Tokens []int32 `json:"tokens"`
		Logits struct {
			Shape []int  `json:"shape"`
			F32   string `json:"f32"`
		} `json:"logits"`
		Layers []struct {
			Layer    int   `json:"layer"`
			Selected []int `json:"selected"`
		} `json:"layers"`
	} `json:"cases"`
}

func decodeF32(t *testing.T, s string) []float32 {
	raw, err := base64.StdEncoding.DecodeString(s)
	require.NoError(t, err)
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

func newEvaluator(t testing.TB, dev *vk.Device, m *mod.Model) *Evaluator {
	t.Helper()
	e, err := NewEvaluator(dev, m, Options{Trace: true})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	return e
}

// selected is, per layer, the positions the evaluator's last sequence
// routed through that layer, ascending (from its trace: Options.Trace);
// nil for a dense layer.
func selected(e *Evaluator) [][]int {
	out := make([][]int, e.r.c.NLayer)
	for i, routes := range e.Routes() {
		for _, rt := range routes {
			if out[rt.Layer] == nil {
				out[rt.Layer] = []int{}
			}
			if rt.Selected {
				out[rt.Layer] = append(out[rt.Layer], i)
			}
		}
	}
	return out
}

// cpuEval is mod's reference in eval mode: logits [S][nVocab] and, per
// layer, the selected positions (nil for a dense layer).
func cpuEval(t *testing.T, m *mod.Model, tokens []int32) ([]float32, [][]int) {
	s, err := m.NewState(mod.RoutingTopK)
	require.NoError(t, err)
	tr := &mod.Trace{}
	s.Trace = tr
	logits, err := s.Forward(tokens, true)
	require.NoError(t, err)
	sel := make([][]int, m.Config.NLayer)
	for _, lt := range tr.Layers {
		sel[lt.Layer] = lt.Selected
	}
	return logits, sel
}

// TestEvalFixtures: for every eval case of the golden fixtures, the GPU's
// eval-mode logits equal the fixture's (PyTorch) and mod's CPU reference
// within tolLogits, and each routed layer selects the CPU's positions (and
// the fixture's).
func TestEvalFixtures(t *testing.T) {
	dev := openDevice(t, true)
	paths, err := filepath.Glob("../../testdata/mod/*.fixture.json")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		var fx evalFixture
		require.NoError(t, json.Unmarshal(raw, &fx))
		t.Run(fx.Model, func(t *testing.T) {
			m := openModel(t, filepath.Join(filepath.Dir(path), fx.Model))
			e := newEvaluator(t, dev, m)
			n := 0
			for _, c := range fx.Cases {
				if c.Mode != "eval" {
					continue
				}
				n++
				t.Run(c.Name, func(t *testing.T) {
					got, err := e.Eval(c.Tokens)
					require.NoError(t, err)
					want := decodeF32(t, c.Logits.F32)
					cpu, cpuSel := cpuEval(t, m, c.Tokens)
					assert.Empty(t, closeErr(want, got, tolLogits), "GPU against the fixture")
					assert.Empty(t, closeErr(cpu, got, tolLogits), "GPU against the CPU")
					gotSel := selected(e)
					assert.Equal(t, cpuSel, gotSel, "selected positions per layer")
					for _, fl := range c.Layers {
						assert.Equal(t, fl.Selected, gotSel[fl.Layer], "layer %d: the fixture's selection", fl.Layer)
					}
					t.Logf("S=%d k=%d: max |logit diff| vs fixture %.2g, vs CPU %.2g",
						len(c.Tokens), mod.TopK(m.Config.Capacity, len(c.Tokens)), maxAbsDiff(want, got), maxAbsDiff(cpu, got))
				})
			}
			require.NotZero(t, n, "eval cases")
		})
	}
}

// TestEvalLengths: sequences of several lengths (so several k) on one
// evaluator equal the CPU; a length seen before replays its recording.
func TestEvalLengths(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	e := newEvaluator(t, dev, m)
	var worst float64
	for _, s := range []int{1, 2, 9, 37, 64, 9} {
		tokens := make([]int32, s)
		for i := range tokens {
			tokens[i] = int32((1 + 37*i + s) % m.Config.NVocab)
		}
		got, err := e.Eval(tokens)
		require.NoError(t, err)
		cpu, cpuSel := cpuEval(t, m, tokens)
		assert.Empty(t, closeErr(cpu, got, tolLogits), "S=%d", s)
		gotSel := selected(e)
		assert.Equal(t, cpuSel, gotSel, "S=%d selected positions", s)
		worst = math.Max(worst, maxAbsDiff(cpu, got))
		if s == 64 { // the losses' recording of one length, beside its logits'
			losses, err := e.Losses(tokens)
			require.NoError(t, err)
			assertLosses(t, cpu, tokens, losses, tolLogits, fmt.Sprintf("S=%d", s))
		}
	}
	assert.Equal(t, 6, len(e.r.pf.recs), "one recording per length, and one of losses")
	before := dev.Stats().Recordings
	_, err := e.Eval(make([]int32, 37))
	require.NoError(t, err)
	assert.Equal(t, before, dev.Stats().Recordings, "a seen length records nothing")
	t.Logf("max |logit diff| vs CPU %.2g", worst)

	_, err = e.Eval(nil)
	assert.Error(t, err)
	_, err = e.Eval([]int32{int32(m.Config.NVocab)})
	assert.Error(t, err)
	_, err = e.Eval(make([]int32, e.ContextLen()+1))
	assert.Error(t, err)
}

// TestEvalStories260K: stories260K (dense) on a 37-token sequence, all
// logits against the CPU reference.
func TestEvalStories260K(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, shared.Path(t, "models/stories260K.gguf"))
	e := newEvaluator(t, dev, m)
	tokens := make([]int32, 37)
	tokens[0] = 1
	for i := 1; i < len(tokens); i++ {
		tokens[i] = int32((13 + 71*i) % m.Config.NVocab)
	}
	got, err := e.Eval(tokens)
	require.NoError(t, err)
	cpu, _ := cpuEval(t, m, tokens)
	assert.Empty(t, closeErr(cpu, got, tolLogits))
	t.Logf("max |logit diff| vs CPU %.2g", maxAbsDiff(cpu, got))
}

// TestEvalLongTopk: a sequence longer than the one-workgroup topk takes
// (shaders.TopkLocal) goes through the multi-pass bitonic sort and
// compact_mask; the model's context is stretched to allow it (RoPE has no
// limit), on the GPU and the CPU alike.
func TestEvalLongTopk(t *testing.T) {
	if testing.Short() {
		t.Skip("long sequence")
	}
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	const s = shaders.TopkLocal + 77
	m.Config.ContextLen = s
	e := newEvaluator(t, dev, m)
	tokens := make([]int32, s)
	for i := range tokens {
		tokens[i] = int32((5 + 131*i + i*i) % m.Config.NVocab)
	}
	got, err := e.Eval(tokens)
	require.NoError(t, err)
	cpu, cpuSel := cpuEval(t, m, tokens)
	assert.Empty(t, closeErr(cpu, got, tolLogits))
	gotSel := selected(e)
	assert.Equal(t, cpuSel, gotSel, "selected positions per layer")
	t.Logf("S=%d k=%d: max |logit diff| vs CPU %.2g", s, mod.TopK(m.Config.Capacity, s), maxAbsDiff(cpu, got))
}

// TestEvalWeightTypes: eval with the block matrices in F16, Q8_0 and Q4_0
// against the CPU running the same matrices: one type per stack (q|k|v and
// gate|up stacked, each matmul reading its rows of the stack) and mixed
// types (unstacked).
func TestEvalWeightTypes(t *testing.T) {
	dev := openDevice(t, true)
	f16, q8, q4 := gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_0
	for _, tc := range []struct {
		name string
		weightMix
	}{
		{"q8_0-stacked", weightMix{q8, q8, q8, q8, q8, q8, f16, q8}},
		{"q4_0-stacked", weightMix{q4, q4, q4, q4, q4, q4, f16, q4}},
		{"f16-stacked", weightMix{f16, f16, f16, f16, f16, f16, f16, f16}},
		{"mixed", weightMix{f16, q8, f16, q8, f16, q4, f16, q8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := openModel(t, "../../testdata/mod/mod-trained.gguf")
			tc.requantize(t, m.Weights)
			e := newEvaluator(t, dev, m)
			b := e.r.pf.blocks[0]
			stacked := tc.q == tc.k && tc.k == tc.v
			assert.Equal(t, stacked, b.q.parts[0].buf == b.k.parts[0].buf && b.k.parts[0].wRow0 > 0, "q and k read from one stack")
			tokens := fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-router"]
			got, err := e.Eval(tokens)
			require.NoError(t, err)
			cpu, cpuSel := cpuEval(t, m, tokens)
			assert.Empty(t, closeErr(cpu, got, tolLogits))
			gotSel := selected(e)
			assert.Equal(t, cpuSel, gotSel)
			t.Logf("max |logit diff| vs CPU %.2g (types %s; logit[0] %.6g)", maxAbsDiff(cpu, got), m.Weights.Blocks[0].K.Type, got[0])
		})
	}
}
