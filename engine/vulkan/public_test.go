package vulkan

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/internal/publictest"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
)

// convertedPublic converts a public layout's fixture checkpoint and opens
// it.
func convertedPublic(t *testing.T, dir string) (*mod.Model, []int32) {
	t.Helper()
	path, tokens := publictest.Convert(t, dir)
	return openModel(t, path), tokens
}

// TestEvalPublicLayouts: eval mode of the public MoD layouts' semantics
// (gate on the MLP or on the output, compact positions, k as a token count
// or floor(c·S), k = 0 included) on the GPU equals the CPU reference:
// logits within tolLogits, the same selected positions. Longer and shorter
// sequences than the fixture's move k across its rules' edges.
func TestEvalPublicLayouts(t *testing.T) {
	dev := openDevice(t, true)
	for _, dir := range publictest.Layouts {
		t.Run(dir, func(t *testing.T) {
			m, tokens := convertedPublic(t, dir)
			require.NotEmpty(t, m.Config.Semantics())
			e := newEvaluator(t, dev, m)
			for _, s := range []int{len(tokens), 3, 11} {
				seq := tokens[:s]
				got, err := e.Eval(seq)
				require.NoError(t, err)
				cpu, cpuSel := cpuEval(t, m, seq)
				assert.Empty(t, closeErr(cpu, got, tolLogits), "S=%d", s)
				gotSel := selected(e)
				for l, want := range cpuSel {
					if want == nil && gotSel[l] != nil {
						want = []int{}
					}
					assert.Equal(t, want, gotSel[l], "S=%d layer %d selected positions", s, l)
				}
				t.Logf("S=%d k=%d: max |logit diff| vs CPU %.2g", s, m.Config.TopKCount(s), maxAbsDiff(cpu, got))
			}
		})
	}
}

// TestGeneratePublicLayouts: causal generation of the public MoD layouts
// (the MoD Llama 2 gate on the MLP, with the router or its auxiliary MLP
// predictor deciding; the Mixture-AI wrapper's raw-score gate on the whole
// output, its linear predictor with a bias deciding; compact positions in
// both) on the GPU equals the CPU reference decision for decision, under
// each kernel profile: token by token (logits, every layer's entry count
// after every token, the caches with their positions), in a batched
// prefill followed by single tokens, and in the prefill's trace (every
// token's deciding score and decision in every routed layer).
func TestGeneratePublicLayouts(t *testing.T) {
	dev := openDevice(t, true)
	cases := []struct {
		dir     string
		routing mod.Routing
	}{
		{"modllama2", mod.RoutingRouter},
		{"modllama2-aux", mod.RoutingRouter},
		{"modllama2-aux", mod.RoutingPredictor},
		{"mixtureai-meta", mod.RoutingPredictor},
		{"mixtureai-hf", mod.RoutingPredictor},
	}
	for _, tc := range cases {
		t.Run(tc.dir+"/"+tc.routing.String(), func(t *testing.T) {
			m, tokens := convertedPublic(t, tc.dir)
			require.NotEmpty(t, m.Config.Semantics())
			for pname, prof := range testProfiles(t, dev) {
				t.Run(pname, func(t *testing.T) {
					opts := Options{DeviceProfile: prof, KVType: "f32"}
					checkAgainstCPUWith(t, dev, m, tc.routing, tokens, opts)
					checkPrefill(t, dev, m, tc.routing, tokens, opts)
					checkPrefillTrace(t, dev, m, tc.routing, tokens, opts)
				})
			}
		})
	}
}

// checkPrefillTrace feeds tokens in one batched prefill with Options.Trace
// and asserts every routed layer's decision for every token equals the
// CPU's, and that both decisions occur.
func checkPrefillTrace(t *testing.T, dev *vk.Device, m *mod.Model, routing mod.Routing, tokens []int32, opts Options) {
	t.Helper()
	s, err := m.NewState(routing)
	require.NoError(t, err)
	s.Trace = &mod.Trace{}
	want, err := s.Forward(tokens, false)
	require.NoError(t, err)
	opts.Trace = true
	run, err := New(dev, m, routing, opts)
	require.NoError(t, err)
	defer run.Close()
	got, err := run.Feed(tokens)
	require.NoError(t, err)
	assert.Empty(t, closeErr(want, got, tolF32.of(want)), "logits after the prefill")
	routes := run.Routes()
	require.Len(t, routes, len(tokens))
	in, out := assertRoutes(t, s.Trace, routing, routes, 0)
	assert.Positive(t, in, "some tokens enter a routed block")
	assert.Positive(t, out, "some tokens skip one")
}
