package vulkan

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/poison"
	"github.com/modrun/modrun/internal/synthtest"
	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// greedyRun is what a runner gave for a greedy continuation: each token's
// argmax, its routing, and the caches' counts after.
type greedyRun struct {
	ids    []int32
	routes [][]mod.Route
	counts []int
}

// greedySteps feeds prompt, then n greedy tokens one FeedArgmax at a time.
func greedySteps(t *testing.T, run *Runner, prompt []int32, n int) greedyRun {
	t.Helper()
	run.Reset()
	id, err := run.FeedArgmax(prompt)
	require.NoError(t, err)
	g := greedyRun{ids: []int32{id}}
	for len(g.ids) < n {
		id, err = run.FeedArgmax([]int32{id})
		require.NoError(t, err)
		g.ids = append(g.ids, id)
		g.routes = append(g.routes, run.Routes()...)
	}
	g.counts, err = run.CacheEntries()
	require.NoError(t, err)
	return g
}

// greedyChains is greedySteps with the tokens after the prompt's argmax
// run as chains asked for the lengths in lens, in turn, each run as the
// length runs gives for it (a runner of MODRUN_CHAIN=6 records chains of
// 6, 4 and 2 steps).
func greedyChains(t *testing.T, run *Runner, prompt []int32, n int, lens []int) greedyRun {
	t.Helper()
	runs := map[int]int{1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 6}
	run.Reset()
	id, err := run.FeedArgmax(prompt)
	require.NoError(t, err)
	g := greedyRun{ids: []int32{id}}
	for i := 0; len(g.ids) < n; i++ {
		k := min(lens[i%len(lens)], n-len(g.ids))
		ids, err := run.FeedArgmaxChain(g.ids[len(g.ids)-1], k)
		require.NoError(t, err)
		require.Len(t, ids, runs[k], "a chain asked for %d", k)
		k = runs[k]
		g.ids = append(g.ids, ids...)
		if run.trace != nil {
			require.Len(t, run.Routes(), k, "a chain's routing: one row a token")
		}
		g.routes = append(g.routes, run.Routes()...)
	}
	g.counts, err = run.CacheEntries()
	require.NoError(t, err)
	return g
}

// TestGreedyChain: chains of decode steps in one submission give the
// tokens, routing (scores bit for bit) and cache counts of one step at a
// time, for a dense model, a routed one and a predictor-routed one, under
// the device's profile and a GPU's (argmax_wide, whose winner the chain
// copies to the next step's token), with the hand-off where the device
// can run it, each profile with its own KV cache (a GPU's: f16); and Truncate goes back into a chain so that what runs next
// is what a fresh runner gives for the same tokens.
func TestGreedyChain(t *testing.T) {
	dev := openDevice(t, true)
	profiles := testProfiles(t, dev)
	if p, ok := profiles["gpu-subgroup"]; ok {
		with := *p
		with.Handoff = true
		profiles["gpu-handoff"] = &with
	}
	for _, mc := range []struct {
		path    string
		routing mod.Routing
	}{
		{"../../testdata/mod/dense-rand.gguf", mod.RoutingRouter},
		{"../../testdata/mod/mod-trained.gguf", mod.RoutingRouter},
		{"../../testdata/mod/mod-rand-sigmoid-pred.gguf", mod.RoutingPredictor},
	} {
		m := openModel(t, mc.path)
		for name, prof := range profiles {
			t.Run(mc.path[len("../../testdata/mod/"):]+"/"+name, func(t *testing.T) {
				open := func(chain string) *Runner {
					run, err := New(dev, m, mc.routing, Options{DeviceProfile: prof, Trace: true, Knobs: Knobs{"MODRUN_CHAIN": chain}})
					require.NoError(t, err)
					t.Cleanup(run.Close)
					return run
				}
				one, chained := open("1"), open("6")
				assert.Equal(t, 1, one.ChainSteps())
				assert.Equal(t, 6, chained.ChainSteps())
				assert.Len(t, chained.chain.recs, 3, "chains of 6, 4 and 2 steps recorded")
				prompt := []int32{1, 400, 401}
				want := greedySteps(t, one, prompt, 24)
				got := greedyChains(t, chained, prompt, 24, []int{6, 2, 5, 1, 3, 6})
				assert.Equal(t, want.ids, got.ids, "the tokens")
				assert.Equal(t, want.routes, got.routes, "the routing")
				assert.Equal(t, want.counts, got.counts, "the caches' counts")
				_, err := chained.FeedArgmaxChain(5, 7)
				assert.ErrorContains(t, err, "want 1 to 6")

				// Back into the last chain, then another token than the
				// chain's: as a fresh runner.
				pos := chained.Pos()
				require.NoError(t, chained.Truncate(pos-3))
				assert.Equal(t, pos-3, chained.Pos())
				fed := append(append([]int32(nil), prompt...), got.ids[:pos-3-len(prompt)]...)
				id, err := chained.FeedArgmax([]int32{7})
				require.NoError(t, err)
				more, err := chained.FeedArgmaxChain(id, 4)
				require.NoError(t, err)
				after := append([]int32{id}, more...)
				afterCounts, err := chained.CacheEntries()
				require.NoError(t, err)
				one.Reset()
				for _, tok := range fed {
					_, err := one.FeedArgmax([]int32{tok})
					require.NoError(t, err)
				}
				var wantAfter []int32
				id, err = one.FeedArgmax([]int32{7})
				require.NoError(t, err)
				wantAfter = append(wantAfter, id)
				for range 4 {
					id, err = one.FeedArgmax([]int32{id})
					require.NoError(t, err)
					wantAfter = append(wantAfter, id)
				}
				wantCounts, err := one.CacheEntries()
				require.NoError(t, err)
				assert.Equal(t, wantAfter, after, "the tokens after Truncate")
				assert.Equal(t, wantCounts, afterCounts, "the caches' counts after Truncate")

				// Past the chains' first position: a routed model's count
				// is unknown there, a dense model's is the position.
				err = chained.Truncate(2)
				if len(m.Config.RoutedLayers()) > 0 {
					assert.ErrorContains(t, err, "known only back to position")
				} else {
					require.NoError(t, err)
					id, err := chained.FeedArgmax([]int32{prompt[2]})
					require.NoError(t, err)
					assert.Equal(t, want.ids[0], id, "the prompt's argmax again after Truncate(2)")
				}
				assert.ErrorContains(t, chained.Truncate(chained.Pos()+1), "holds")
				chained.Reset()
				assert.NoError(t, chained.Truncate(0), "nothing to drop")
			})
		}
	}
}

// TestGreedyChainNonFinite: a chain whose step meets non-finite logits
// (the embedding row of the token greedy decoding reaches third is NaN)
// stops there: the ids before it come back, the runner holds the tokens
// they follow, and the next call gives FeedArgmax's error at that
// position; at the chain's first step it is that error at once.
func TestGreedyChainNonFinite(t *testing.T) {
	dev := openDevice(t, true)
	sm := synthtest.Build(t, gguf.TypeF32, 0.25) // untied: the NaN row is the embedding's only
	src := filepath.Join(t.TempDir(), "tiny.gguf")
	require.NoError(t, sm.Save(src))
	m := openModel(t, src)
	run, err := New(dev, m, mod.RoutingRouter, Options{KVType: "f32", Knobs: Knobs{"MODRUN_CHAIN": "6"}})
	require.NoError(t, err)
	prompt := []int32{1, 400, 401}
	g := greedySteps(t, run, prompt, 6)
	run.Close()
	bad := g.ids[2] // fed at the chain's third step
	require.NotContains(t, append(prompt, g.ids[:2]...), bad, "the poisoned token is first met at the chain's third step")
	pm := openModel(t, poison.Copy(t, src, "token_embd.weight", uint64(bad)*uint64(m.Config.NEmbd), float32(math.NaN())))
	run, err = New(dev, pm, mod.RoutingRouter, Options{KVType: "f32", Knobs: Knobs{"MODRUN_CHAIN": "6"}})
	require.NoError(t, err)
	t.Cleanup(run.Close)
	id, err := run.FeedArgmax(prompt)
	require.NoError(t, err)
	require.Equal(t, g.ids[0], id)
	ids, err := run.FeedArgmaxChain(id, 6)
	require.NoError(t, err)
	assert.Equal(t, g.ids[1:3], ids, "the ids up to the poisoned token")
	assert.Equal(t, len(prompt)+2, run.Pos(), "the runner holds the tokens before the poisoned one")
	_, err = run.FeedArgmaxChain(ids[1], 6)
	assert.ErrorIs(t, err, mod.ErrNonFinite)
	assert.ErrorContains(t, err, "token 5")
	assert.Equal(t, len(prompt)+3, run.Pos(), "as FeedArgmax leaves it")
}

// TestGreedyChainSnapshotsBounded: a long greedy run of joined chains on
// a routed model keeps the last snapshotsKept positions' counts: Truncate
// goes back that far, and refuses further.
func TestGreedyChainSnapshotsBounded(t *testing.T) {
	dev := openDevice(t, false)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	run, err := New(dev, m, mod.RoutingRouter, Options{KVType: "f32", Knobs: Knobs{"MODRUN_CHAIN": "16"}})
	require.NoError(t, err)
	t.Cleanup(run.Close)
	n := snapshotsKept + 3*ChainMost
	require.Less(t, n+2, run.ContextLen())
	id, err := run.FeedArgmax([]int32{1})
	require.NoError(t, err)
	for run.Pos() < n {
		ids, err := run.FeedArgmaxChain(id, ChainMost)
		require.NoError(t, err)
		id = ids[len(ids)-1]
	}
	assert.Len(t, run.chain.snap, snapshotsKept)
	assert.ErrorContains(t, run.Truncate(run.Pos()-snapshotsKept), "known only back to position")
	require.NoError(t, run.Truncate(run.Pos()-snapshotsKept+1))
}
