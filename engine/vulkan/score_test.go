package vulkan

import (
	"fmt"
	"math"
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
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
			losses, err := run.Losses(tokens)
			require.NoError(t, err)
			assertLosses(t, want, tokens, losses, fmt.Sprintf("%s %s ubatch %d", tc.model, tc.routing, ub))
			run.Close()
		}
	}
}

// assertLosses asserts that losses, a device's negative log-likelihoods of
// tokens[1:], are those of the CPU's logits (want, [n][nVocab]) within
// lossTol of each loss's terms, |log sum exp| + |max| + |logit|: the GPU's
// logits differ within tolLogits, and its sums are F32 where the CPU's
// reference is float64 (engine.Perplexity's nll).
func assertLosses(t *testing.T, want []float32, tokens []int32, losses []float32, name string) {
	t.Helper()
	require.Len(t, losses, len(tokens)-1, name)
	v := len(want) / len(tokens)
	for i, got := range losses {
		nll, terms := refNLL(want[i*v:(i+1)*v], tokens[i+1])
		assert.InDelta(t, nll, float64(got), 2*tolLogits+lossTol*terms, "%s: loss of token %d", name, i+1)
	}
}

// refNLL is -log softmax(row)[target] in float64 (engine.Perplexity's
// nll), and the sizes of its terms, |log sum exp| + |max| + |row[target]|.
func refNLL(row []float32, target int32) (nll, terms float64) {
	mx := math.Inf(-1)
	for _, x := range row {
		mx = math.Max(mx, float64(x))
	}
	var sum float64
	for _, x := range row {
		sum += math.Exp(float64(x) - mx)
	}
	xt := float64(row[target])
	return math.Log(sum) + mx - xt, math.Abs(math.Log(sum)) + math.Abs(mx) + math.Abs(xt)
}

// lossTol is the nll kernel's relative bound (shaders' nllTol).
const lossTol = 1e-5

// TestLossesInPieces: logits over the device's binding range are scored in
// pieces of rows (the nll kernel's RowBase), in eval mode and causal
// scoring alike: a profile whose maxStorageBufferRange holds 9 rows of
// logits cuts a window of 37 into 5 pieces, and every loss equals the CPU's.
func TestLossesInPieces(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	prof := DeviceProfile(dev.Info())
	prof.MaxStorageBufferRange = uint64(9*4*m.Config.NVocab + 100)
	tokens := fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-router"]
	tokens = append(tokens, tokens...)[:37]
	for _, routing := range []mod.Routing{mod.RoutingTopK, mod.RoutingRouter} {
		cpu, err := m.NewState(routing)
		require.NoError(t, err)
		want, err := cpu.Forward(tokens, true)
		require.NoError(t, err)
		var losses []float32
		if routing == mod.RoutingTopK {
			e, err := NewEvaluator(dev, m, Options{DeviceProfile: &prof})
			require.NoError(t, err)
			t.Cleanup(e.Close)
			losses, err = e.Losses(tokens)
			require.NoError(t, err)
		} else {
			run, err := New(dev, m, routing, Options{DeviceProfile: &prof})
			require.NoError(t, err)
			t.Cleanup(run.Close)
			losses, err = run.Losses(tokens)
			require.NoError(t, err)
		}
		assertLosses(t, want, tokens, losses, routing.String())
	}
}
