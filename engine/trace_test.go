package engine

import (
	"math"
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The MoD fixture with a router bias and a predictor (train/, converted).
const modTrained = "../testdata/mod/mod-trained.gguf"

// traceRun feeds a prompt in one call, then tokens one by one, and returns
// every token's routes in order.
func traceRun(t *testing.T, r Runner) [][]mod.Route {
	t.Helper()
	rt, ok := r.(RoutingTracer)
	require.True(t, ok, "the runner is a RoutingTracer")
	var all [][]mod.Route
	_, err := r.Feed([]int32{1, 403, 407, 261, 378})
	require.NoError(t, err)
	all = append(all, rt.Routes()...)
	for _, id := range []int32{13, 500, 42, 7, 300, 301, 302} {
		_, err := r.Feed([]int32{id})
		require.NoError(t, err)
		require.Len(t, rt.Routes(), 1, "one token fed, one row of routes")
		all = append(all, rt.Routes()...)
	}
	return all
}

// TestRoutesCPUAgainstState: the CPU runner's routes are mod.State's
// trace, regrouped by token.
func TestRoutesCPUAgainstState(t *testing.T) {
	m, err := mod.Open(modTrained)
	require.NoError(t, err)
	defer m.Close()
	for _, routing := range []mod.Routing{mod.RoutingRouter, mod.RoutingPredictor} {
		c, err := NewCPU(m, routing)
		require.NoError(t, err)
		routes := traceRun(t, c)
		require.Len(t, routes, 12)
		stats := c.RoutingStats()
		for j, s := range stats {
			selected := 0
			for i, tok := range routes {
				require.Len(t, tok, len(stats))
				assert.Equal(t, s.Layer, tok[j].Layer)
				assert.Equal(t, tok[j].Score > 0, tok[j].Selected, "%s: token %d layer %d: selected iff the deciding score is > 0", routing, i, s.Layer)
				if tok[j].Selected {
					selected++
				}
			}
			assert.Equal(t, s.Selected, selected, "%s: layer %d: the routes add up to RoutingStats", routing, s.Layer)
		}
	}
	dense, err := mod.Open("../testdata/mod/dense-rand.gguf")
	require.NoError(t, err)
	defer dense.Close()
	c, err := NewCPU(dense, mod.RoutingRouter)
	require.NoError(t, err)
	_, err = c.Feed([]int32{1, 2})
	require.NoError(t, err)
	assert.Nil(t, c.Routes(), "a dense model routes nothing")
}

// TestRoutesVulkanAgainstCPU: the Vulkan backend's routes (copied back from
// the GPU with BackendOptions.Trace) are the CPU's: the same decisions, and
// the scores within the runner tests' tolerance. A decision may differ only
// where the score is within 1e-4 of 0 (engine/vulkan's decisionMargin).
func TestRoutesVulkanAgainstCPU(t *testing.T) {
	if err := vk.Load(); err != nil {
		t.Skipf("no Vulkan loader: %v", err)
	}
	m, err := mod.Open(modTrained)
	require.NoError(t, err)
	defer m.Close()
	for _, routing := range []mod.Routing{mod.RoutingRouter, mod.RoutingPredictor} {
		cpu, err := NewCPU(m, routing)
		require.NoError(t, err)
		want := traceRun(t, cpu)
		b, _, err := OpenBackend(m, routing, BackendOptions{Name: BackendVulkan, Device: -1, Trace: true})
		if err != nil {
			t.Skipf("no Vulkan device: %v", err)
		}
		got := traceRun(t, b.Runner)
		b.Close()
		require.Len(t, got, len(want))
		for i := range want {
			require.Len(t, got[i], len(want[i]))
			for j, w := range want[i] {
				g := got[i][j]
				assert.Equal(t, w.Layer, g.Layer)
				assert.InDelta(t, w.Score, g.Score, 1e-4, "%s: token %d layer %d score", routing, i, w.Layer)
				if math.Abs(float64(w.Score)) > 1e-4 {
					assert.Equal(t, w.Selected, g.Selected, "%s: token %d layer %d decision (score %g)", routing, i, w.Layer, w.Score)
				}
			}
		}
	}
}
