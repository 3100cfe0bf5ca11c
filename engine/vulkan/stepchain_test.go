package vulkan

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// chainedRun is what stepChainRun's sequences gave.
type chainedRun struct {
	tokens   [][]int32
	routes   [][][]mod.Route
	stops    []sched.StopReason
	samplers []*recSampler
	stats    sched.Stats
	phases   StepPhases
	join     int // steps run before the last three joined
}

// stepChainRun runs six sequences on the batched step with MODRUN_CHAIN
// chain: three join at the start and three once join steps have run (at
// the end of the chain that passes it: chainedRun.join); they end at
// their MaxTokens, at the context's end (one has no MaxTokens), or from
// their token callback (one after 7 tokens); with draw, every other one
// draws at a temperature (recSampler), the others greedy. Each keeps its
// routing.
func stepChainRun(t *testing.T, dev *vk.Device, prof *shaders.Profile, m *mod.Model, routing mod.Routing, chain string, draw bool, join int) chainedRun {
	const ctx = 80
	run, err := New(dev, m, routing, Options{KVType: "f32", ContextLen: ctx, UBatch: 40, DeviceProfile: prof, Knobs: Knobs{"MODRUN_CHAIN": chain}})
	require.NoError(t, err)
	defer run.Close()
	st, s := stepScheduler(t, run, 6, 6, ctx)
	rng := rand.New(rand.NewPCG(3, 4))
	nv := m.Config.NVocab
	var out chainedRun
	var seqs []*sched.Seq
	add := func(i int) {
		prompt := []int32{1}
		for range rng.IntN(12) {
			prompt = append(prompt, int32(3+rng.IntN(nv-3)))
		}
		req := sched.Request{Prompt: prompt, MaxTokens: []int{9, 0, 23, 14, 6, 31}[i], KeepRoutes: true}
		if i == 2 {
			n := 0
			req.OnToken = func(int32) error {
				if n++; n == 7 {
					return errors.New("the caller has had enough")
				}
				return nil
			}
		}
		var rs *recSampler
		if draw && i%2 == 1 {
			src := rand.NewPCG(uint64(i), 7)
			rs = &recSampler{d: []sched.Draw{{Temp: 0.8}, {Temp: 1.2, TopP: 0.9}, {Temp: 1, MinP: 0.05}}[i/2], rng: rand.New(src), src: src}
			req.Sampler = rs
		}
		q, err := s.Add(req)
		require.NoError(t, err)
		seqs, out.samplers = append(seqs, q), append(out.samplers, rs)
	}
	for i := range 3 {
		add(i)
	}
	for s.Stats().Steps < join {
		_, err := s.Step()
		require.NoError(t, err)
	}
	out.join = s.Stats().Steps
	for i := 3; i < 6; i++ {
		add(i)
	}
	for more := true; more; {
		more, err = s.Step()
		require.NoError(t, err)
	}
	for _, q := range seqs {
		out.tokens, out.routes, out.stops = append(out.tokens, q.Tokens()), append(out.routes, q.Routes), append(out.stops, q.Stop)
	}
	out.stats, out.phases = s.Stats(), st.Phases()
	assert.Equal(t, s.Pool().Pages(), s.Pool().Free(), "every page back")
	return out
}

// TestVulkanStepChain: the batched step's chain (StepChain: several decode
// steps of the same sequences in one submission, each row's token the one
// it drew the step before, copied on the device; each routed table's
// length advanced on the device by paged_advance) gives each sequence the
// tokens, routing (scores bit for bit) and end of the same steps run one
// at a time (the same rows in each step: the later sequences join after
// as many steps), as sequences join between chains, end inside one (MaxTokens,
// the context's end, their callback) and, under a GPU's profile, draw at
// a temperature: each draw with its own uniform number, taken from the
// sampler once its token is booked, so the sampler hands out the same
// numbers. For the dense model and the MoD one with predictor routing
// (routed and dense layers), under each of deviceProfiles: lavapipe's own
// head has no draw, so there the sequences are greedy.
func TestVulkanStepChain(t *testing.T) {
	dev := openDevice(t, true)
	models := stepModelsVK(t)
	for _, pc := range deviceProfiles(dev) {
		for _, sm := range []int{0, 2} {
			m := models[sm]
			t.Run(pc.name+"/"+m.name, func(t *testing.T) {
				draw := pc.name != "own"
				chained := stepChainRun(t, dev, pc.prof, m.m, m.routing, "4", draw, 5)
				one := stepChainRun(t, dev, pc.prof, m.m, m.routing, "1", draw, chained.join)
				assert.Zero(t, one.stats.Chains, "MODRUN_CHAIN=1 chains nothing")
				assert.Positive(t, chained.stats.Chains, "chains ran")
				assert.Equal(t, chained.stats.Chains, chained.phases.Chains, "each chain one submission")
				assert.Equal(t, one.stops, chained.stops, "each sequence's end")
				assert.Contains(t, chained.stops, sched.StopContextFull)
				assert.Contains(t, chained.stops, sched.StopCallback)
				for i := range one.tokens {
					assert.Equal(t, one.tokens[i], chained.tokens[i], "seq %d's tokens", i)
					assert.Equal(t, one.routes[i], chained.routes[i], "seq %d's routing", i)
					if rs := one.samplers[i]; rs != nil {
						cs := chained.samplers[i]
						assert.Equal(t, rs.us, cs.us, "seq %d: the sampler's numbers taken", i)
						assert.Equal(t, cs.ids, chained.tokens[i], "seq %d: each token drawn reached the sampler", i)
						assert.Zero(t, cs.hosts, "seq %d: drawn on the device", i)
					}
				}
				t.Logf("%d steps, the later sequences joining after %d; chained: %d steps in %d submissions (%d chains)",
					one.stats.Steps, one.join, chained.stats.Steps, chained.stats.Steps-chained.stats.ChainedSteps+chained.stats.Chains, chained.stats.Chains)
			})
		}
	}
}
