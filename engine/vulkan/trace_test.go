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
		for j, lt := range s.Trace.Layers {
			want := lt.RouterLogits
			if routing == mod.RoutingPredictor {
				want = lt.PredictorLogits
			}
			selected := map[int]bool{}
			for _, p := range lt.Selected {
				selected[p] = true
			}
			for i := range prompt {
				g := got[i][j]
				assert.Equal(t, lt.Layer, g.Layer)
				assert.InDelta(t, want[i], g.Score, tolLogits, "%s: token %d layer %d", routing, i, lt.Layer)
				if abs(want[i]) > decisionMargin {
					assert.Equal(t, selected[i], g.Selected, "%s: token %d layer %d (score %g)", routing, i, lt.Layer, want[i])
				}
			}
		}
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
