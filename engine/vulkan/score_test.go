package vulkan

import (
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/require"
)

// TestScoreCausal: Score's logits of every token, with causal routing,
// through the batched prefill in chunks (UBatch 0 and 5), equal mod's CPU
// State's (Forward with all) within tolLogits (the decode step's tolerance:
// only summation orders differ); a second Score of the same tokens starts
// again from position 0 and gives the same logits.
func TestScoreCausal(t *testing.T) {
	dev := openDevice(t, true)
	for _, tc := range []struct {
		model   string
		routing mod.Routing
	}{
		{"mod-trained", mod.RoutingRouter},
		{"mod-trained", mod.RoutingPredictor},
		{"mod-rand-identity-bias", mod.RoutingRouter},
	} {
		base := "../../testdata/mod/" + tc.model
		m := openModel(t, base+".gguf")
		tokens := fixtureTokens(t, base+".fixture.json")["generate-"+tc.routing.String()]
		require.NotEmpty(t, tokens)
		cpu, err := m.NewState(tc.routing)
		require.NoError(t, err)
		want, err := cpu.Forward(tokens, true)
		require.NoError(t, err)
		for _, ub := range []int{0, 5} {
			run, err := New(dev, m, tc.routing, Options{UBatch: ub})
			require.NoError(t, err)
			got, err := run.Score(tokens)
			require.NoError(t, err)
			require.Empty(t, closeErr(want, got, tolLogits), "%s %s ubatch %d", tc.model, tc.routing, ub)
			again, err := run.Score(tokens)
			require.NoError(t, err)
			require.Equal(t, got, again, "%s %s ubatch %d: a second Score", tc.model, tc.routing, ub)
			run.Close()
		}
	}
}
