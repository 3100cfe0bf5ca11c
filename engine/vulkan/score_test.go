package vulkan

import (
	"fmt"
	"math"
	"testing"

	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestScoreCausal: Score's logits of every token, with causal routing,
// through the batched prefill in chunks (UBatch 0 and 5), equal mod's CPU
// State's (Forward with all) within tolLogits (the decode step's tolerance:
// only summation orders differ), and the F16 cache's bound on top of it
// where the profile's cache is F16 (reference_test.go); a second Score of
// the same tokens starts again from position 0 and gives the same logits;
// under each of deviceProfiles.
func TestScoreCausal(t *testing.T) {
	dev := openDevice(t, true)
	for _, pc := range deviceProfiles(dev) {
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
			for _, ub := range []int{0, 5} {
				t.Run(fmt.Sprintf("%s/%s/%s/ubatch%d", pc.name, tc.model, tc.routing, ub), func(t *testing.T) {
					run, err := New(dev, m, tc.routing, Options{UBatch: ub, DeviceProfile: pc.prof})
					require.NoError(t, err)
					defer run.Close()
					want, tol := runReference(t, m, tc.routing, run).Forward(t, tokens, true, tolF32)
					got, err := run.Score(tokens)
					require.NoError(t, err)
					require.Empty(t, closeErr(want, got, tol))
					again, err := run.Score(tokens)
					require.NoError(t, err)
					require.Equal(t, got, again, "a second Score")
					losses, err := run.Losses(tokens)
					require.NoError(t, err)
					assertLosses(t, want, tokens, losses, tol, "losses")
					t.Logf("%s cache: max |logit diff| %.2g, its bound %.2g", run.KVType(), maxAbsDiff(want, got), tol)
				})
			}
		}
	}
}

// assertLosses asserts that losses, a device's negative log-likelihoods of
// tokens[1:], are those of the CPU's logits (want, [n][nVocab]) within
// 2·logitTol + lossTol of each loss's terms, |log sum exp| + |max| +
// |logit|: the GPU's logits differ within logitTol, which moves log sum
// exp by at most logitTol (its derivative in each logit is a softmax
// probability: they sum to 1) and the target's logit by at most logitTol;
// and its sums are F32 where the CPU's reference is float64
// (engine.Perplexity's nll).
func assertLosses(t *testing.T, want []float32, tokens []int32, losses []float32, logitTol float64, name string) {
	t.Helper()
	require.Len(t, losses, len(tokens)-1, name)
	v := len(want) / len(tokens)
	for i, got := range losses {
		nll, terms := refNLL(want[i*v:(i+1)*v], tokens[i+1])
		assert.InDelta(t, nll, float64(got), 2*logitTol+lossTol*terms, "%s: loss of token %d", name, i+1)
	}
}

// refNLL is -log softmax(row)[target] in float64 (engine.Perplexity's
// nll), and the sizes of its terms, |log sum exp| + |max| + |row[target]|.
func refNLL(row []float32, target int32) (nll, terms float64) {
	mx := float64(row[stats.Argmax(row)])
	lse, xt := stats.LogSumExp(row), float64(row[target]) // lse - mx: log sum exp(row - max)
	return lse - xt, math.Abs(lse-mx) + math.Abs(mx) + math.Abs(xt)
}

// lossTol is the nll kernel's relative bound (shaders' nllTol).
const lossTol = 1e-5

// TestLossesInPieces: logits over the device's binding range are scored in
// pieces of rows (the nll kernel's RowBase), in eval mode and causal
// scoring alike: a profile whose maxStorageBufferRange holds 9 rows of
// logits cuts a window of 37 into 5 pieces, and every loss equals the
// CPU's (assertLosses; the logits' bound is the F16 cache's where the
// profile's cache is F16: eval mode keeps no cache, so F32 there); under
// each of deviceProfiles.
func TestLossesInPieces(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	tokens := fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-router"]
	tokens = append(tokens, tokens...)[:37]
	for _, pc := range deviceProfiles(dev) {
		prof := *pc.prof
		prof.MaxStorageBufferRange = uint64(9*4*m.Config.NVocab + 100)
		for _, routing := range []mod.Routing{mod.RoutingTopK, mod.RoutingRouter} {
			t.Run(pc.name+"/"+routing.String(), func(t *testing.T) {
				var losses []float32
				kv := "f32"
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
					kv = run.KVType()
					losses, err = run.Losses(tokens)
					require.NoError(t, err)
				}
				want, tol := newReference(t, m, routing, kv).Forward(t, tokens, true, tolF32)
				assertLosses(t, want, tokens, losses, tol, routing.String())
			})
		}
	}
}
