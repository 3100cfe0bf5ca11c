package cpu

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/sched"
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
	var out soloRun
	feed := append([]int32(nil), req.Prompt...)
	for {
		logits, err := run.Feed(feed)
		require.NoError(t, err)
		for _, rt := range run.Routes() {
			out.routes = append(out.routes, append([]mod.Route(nil), rt...))
		}
		out.logits = append(out.logits, append([]float32(nil), logits...))
		id := argmax(logits)
		if len(req.Stop) > 0 && id == req.Stop[0] {
			return out
		}
		out.tokens = append(out.tokens, id)
		if run.Pos() >= run.ContextLen() || len(out.tokens) >= req.MaxTokens {
			return out
		}
		feed = []int32{id}
	}
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
	rng := rand.New(rand.NewPCG(3, 33))
	nv := sm.m.Config.NVocab
	reqs := make([]sched.Request, 16)
	join := make([]int, 16)
	for i := range reqs {
		prompt := []int32{1}
		for range rng.IntN(60) {
			prompt = append(prompt, int32(3+rng.IntN(nv-3)))
		}
		reqs[i] = sched.Request{Prompt: prompt, MaxTokens: 4 + rng.IntN(30), KeepLogits: true, KeepRoutes: true}
		if i%5 == 0 {
			reqs[i].Stop = []int32{2} // EOS may come first
		}
		join[i] = rng.IntN(30)
	}
	cancelAt := map[int]int{3: 12, 11: 25} // sequence -> step
	seqs := make([]*sched.Seq, 16)
	for step := 0; ; step++ {
		for i := range reqs {
			if join[i] == step {
				seqs[i], err = s.Add(reqs[i])
				require.NoError(t, err)
			}
		}
		for i, at := range cancelAt {
			if at == step && seqs[i] != nil {
				s.Cancel(seqs[i])
			}
		}
		more, err := s.Step()
		require.NoError(t, err)
		if !more && step > 30 {
			break
		}
	}
	worst := 0.0
	for i, q := range seqs {
		require.NoError(t, q.Err, "seq %d", i)
		want := runSolo(t, sm.m, sm.routing, reqs[i])
		got := q.Tokens()
		if q.Stop == sched.StopCancel {
			require.LessOrEqual(t, len(got), len(want.tokens))
			want.tokens, want.logits = want.tokens[:len(got)], want.logits[:len(q.Logits)]
		}
		require.Equal(t, want.tokens, got, "seq %d (%s): tokens", i, q.Stop)
		require.Len(t, q.Logits, len(want.logits), "seq %d: draws", i)
		for j := range q.Logits {
			worst = max(worst, relDiff(q.Logits[j], want.logits[j]))
		}
		for p, rt := range q.Routes {
			require.Less(t, p, len(want.routes))
			for j := range rt {
				assert.Equal(t, want.routes[p][j].Selected, rt[j].Selected, "seq %d position %d layer %d: score %g alone, %g batched", i, p, rt[j].Layer, want.routes[p][j].Score, rt[j].Score)
			}
		}
	}
	st2 := s.Stats()
	t.Logf("%d steps, %d rows; max |Δlogit| / max |logit| against solo = %.2g", st2.Steps, st2.Rows, worst)
	assert.LessOrEqual(t, worst, stepTol(sm.m))
	assert.Equal(t, s.Pool().Pages(), s.Pool().Free(), "every page back")
}
