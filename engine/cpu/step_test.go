package cpu

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/engine/sched/schedtest"
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
)

// soloRun is one sequence run alone on a Runner: the prompt in one Feed,
// then one greedy token at a time; its tokens, the logits of each draw and
// each position's routing.
type soloRun struct {
	tokens []int32
	logits [][]float32
	routes [][]mod.Route
}

func runSolo(t *testing.T, m *mod.Model, r mod.Routing, req sched.Request) soloRun {
	t.Helper()
	run, err := New(m, r, Options{})
	require.NoError(t, err)
	s := schedtest.RunSolo(t, run, req)
	return soloRun{tokens: s.Tokens, logits: s.Logits, routes: s.Routes}
}

// stepModel is a model the batched step is checked on.
type stepModel struct {
	name    string
	m       *mod.Model
	routing mod.Routing
}

func stepModels(t *testing.T) []stepModel {
	var out []stepModel
	for _, name := range []string{"tinystories-mod.gguf", "tinystories-dense.gguf"} {
		m, err := mod.Open(filepath.Join("..", "..", "models", name))
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		out = append(out, stepModel{name + " router", m, mod.RoutingRouter})
		if m.Config.PredictorHidden > 0 {
			out = append(out, stepModel{name + " predictor", m, mod.RoutingPredictor})
		}
	}
	for _, typ := range []gguf.TensorType{gguf.TypeQ8_0, gguf.TypeF32} {
		sm := buildSynth(t, tiny, typ, 0.25)
		out = append(out, stepModel{fmt.Sprintf("synth %s router", typ), sm.Model, mod.RoutingRouter},
			stepModel{fmt.Sprintf("synth %s predictor", typ), sm.Model, mod.RoutingPredictor})
	}
	return out
}

// stepTol is the logits' tolerance of a batched step against the solo run:
// the two take different kernel paths (a decode row rides in a 4-row tile
// with other sequences' rows; attention sums page by page), so the float
// sums round differently; with quantized activations the step's rows are
// quantized exactly as alone, so the same bounds as against the reference
// hold with room (relTol, the reasons beside it).
func stepTol(m *mod.Model) float64 { return relTol[m.Weights.Blocks[0].Q.Type] }

// Sixteen sequences of different prompt lengths join at random steps and
// leave at different ones (their own max tokens, a stop token, two
// cancelled), decoding and prefilling in the same steps under a small
// --batch-tokens: each sequence's greedy tokens and routing decisions are
// its solo run's, its logits within stepTol.
func TestStepMatchesSolo(t *testing.T) {
	for _, sm := range stepModels(t) {
		t.Run(sm.name, func(t *testing.T) { stepMatchesSolo(t, sm) })
	}
}

func stepMatchesSolo(t *testing.T, sm stepModel) {
	st, err := NewStepper(sm.m, sm.routing, Options{ContextLen: 128})
	require.NoError(t, err)
	s, err := sched.New(st, sched.Options{BlockTokens: 16, Pages: sched.PagesFor(st.Layout(), 16, 128, 16), BatchTokens: 48})
	require.NoError(t, err)
	reqs, seqs := schedtest.JoinAndLeave(t, s, sm.m.Config.NVocab, 16)
	worst := schedtest.Check(t, reqs, seqs, func(req sched.Request) schedtest.Solo {
		run, err := New(sm.m, sm.routing, Options{})
		require.NoError(t, err)
		return schedtest.RunSolo(t, run, req)
	}, relDiff)
	st2 := s.Stats()
	t.Logf("%d steps, %d rows; max |Δlogit| / max |logit| against solo = %.2g", st2.Steps, st2.Rows, worst)
	assert.LessOrEqual(t, worst, stepTol(sm.m))
	assert.Equal(t, s.Pool().Pages(), s.Pool().Free(), "every page back")
}
