package vulkan

import (
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTraceMatchesState: with Options.Trace, Routes reports for every token
// the deciding score and decision that mod.State's trace holds, under the
// validation layer (the copies to the host buffer need their barriers).
// Without it, Routes is nil and the step has no copies for it.
func TestTraceMatchesState(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	prompt := []int32{1, 403, 407, 261, 378, 13, 500}
	for _, routing := range []mod.Routing{mod.RoutingRouter, mod.RoutingPredictor} {
		s, err := m.NewState(routing)
		require.NoError(t, err)
		s.Trace = &mod.Trace{}
		_, err = s.Forward(prompt, false)
		require.NoError(t, err)

		run, err := New(dev, m, routing, Options{Trace: true})
		require.NoError(t, err)
		_, err = run.FeedArgmax(prompt)
		require.NoError(t, err)
		got := run.Routes()
		run.Close()
		require.Len(t, got, len(prompt))
		assertRoutes(t, s.Trace, routing, got, decisionMargin)
	}
	run := newRunner(t, dev, m, mod.RoutingRouter)
	_, err := run.Feed(prompt[:2])
	require.NoError(t, err)
	assert.Nil(t, run.Routes(), "no trace without Options.Trace")
}

func abs(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// assertRoutes asserts that got, a runner's Routes for the tokens of one
// Forward, holds the CPU trace's deciding score (within tolLogits) and
// decision for every token and routed layer; a decision is only compared
// where the CPU's score is over margin away from 0. It returns how many
// (token, layer) pairs went in and how many skipped, by the CPU.
func assertRoutes(t *testing.T, trace *mod.Trace, routing mod.Routing, got [][]mod.Route, margin float32) (in, out int) {
	t.Helper()
	for j, lt := range trace.Layers {
		score := lt.RouterLogits
		if routing == mod.RoutingPredictor {
			score = lt.PredictorLogits
		}
		selected := map[int]bool{}
		for _, p := range lt.Selected {
			selected[p] = true
		}
		for i := range got {
			g := got[i][j]
			require.Equal(t, lt.Layer, g.Layer)
			assert.InDelta(t, score[i], g.Score, tolLogits, "%s: token %d layer %d", routing, i, lt.Layer)
			if abs(score[i]) > margin {
				assert.Equal(t, selected[i], g.Selected, "%s: token %d layer %d (CPU score %g)", routing, i, lt.Layer, score[i])
			}
			if selected[i] {
				in++
			} else {
				out++
			}
		}
	}
	return in, out
}
