package vulkan

import (
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTraceMatchesState: with Options.Trace, Routes reports for every token
// the deciding score and decision that mod.State's trace holds, under the
// validation layer (the copies to the host buffer need their barriers);
// under each of deviceProfiles, the scores within the F16 cache's bound
// where the profile's cache is F16 (reference_test.go: a routed layer's
// input has been through the attention of every layer before it). Without
// Options.Trace, Routes is nil and the step has no copies for it.
func TestTraceMatchesState(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	prompt := []int32{1, 403, 407, 261, 378, 13, 500}
	for _, pc := range deviceProfiles(dev) {
		for _, routing := range []mod.Routing{mod.RoutingRouter, mod.RoutingPredictor} {
			t.Run(pc.name+"/"+routing.String(), func(t *testing.T) {
				run, err := New(dev, m, routing, Options{Trace: true, DeviceProfile: pc.prof})
				require.NoError(t, err)
				defer run.Close()
				ref := runReference(t, m, routing, run)
				ref.Trace = &mod.Trace{}
				ref.Forward(t, prompt, false, tolF32)
				_, err = run.FeedArgmax(prompt)
				require.NoError(t, err)
				got := run.Routes()
				require.Len(t, got, len(prompt))
				tol := make([]float64, len(ref.Trace.Layers))
				for j, lt := range ref.Trace.Layers {
					tol[j] = tolLogits
					if ref.half != nil {
						tol[j] = f16Bound(tolLogits, scoresOf(lt, routing), scoresOf(ref.half.Trace.Layers[j], routing))
					}
				}
				assertRoutesWithin(t, ref.Trace, routing, got, decisionMargin, tol)
			})
		}
	}
	run := newRunner(t, dev, m, mod.RoutingRouter)
	_, err := run.Feed(prompt[:2])
	require.NoError(t, err)
	assert.Nil(t, run.Routes(), "no trace without Options.Trace")
}

// scoresOf is a routed layer's deciding scores: the router's, or the
// predictor's.
func scoresOf(lt mod.LayerTrace, routing mod.Routing) []float32 {
	if routing == mod.RoutingPredictor {
		return lt.PredictorLogits
	}
	return lt.RouterLogits
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
	tol := make([]float64, len(trace.Layers))
	for j := range tol {
		tol[j] = tolLogits
	}
	return assertRoutesWithin(t, trace, routing, got, margin, tol)
}

// assertRoutesWithin is assertRoutes with the scores of the trace's j-th
// routed layer within tol[j].
func assertRoutesWithin(t *testing.T, trace *mod.Trace, routing mod.Routing, got [][]mod.Route, margin float32, tol []float64) (in, out int) {
	t.Helper()
	for j, lt := range trace.Layers {
		score := scoresOf(lt, routing)
		selected := map[int]bool{}
		for _, p := range lt.Selected {
			selected[p] = true
		}
		for i := range got {
			g := got[i][j]
			require.Equal(t, lt.Layer, g.Layer)
			assert.InDelta(t, score[i], g.Score, tol[j], "%s: token %d layer %d", routing, i, lt.Layer)
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
