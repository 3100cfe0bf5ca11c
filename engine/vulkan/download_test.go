package vulkan

import (
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDownloads: what comes back to the host. A greedy decode step
// (FeedArgmax) copies no logits, only their argmax reaches the host; Feed's
// step copies the nVocab logits; after a prefill, Feed fetches the last
// row's logits alone. Scoring a window with Losses copies no logits and
// reads a float per row, where Eval and Score copy S·nVocab of them.
func TestDownloads(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	v := uint64(4 * m.Config.NVocab)
	run := newRunner(t, dev, m, mod.RoutingRouter)
	best, err := run.FeedArgmax([]int32{1})
	require.NoError(t, err)
	logits, err := run.Feed([]int32{best})
	require.NoError(t, err)
	assert.Equal(t, uint64(0), run.stepGreedy.Stats().CopyBytes, "greedy: no logits copied")
	assert.Equal(t, v, run.step.Stats().CopyBytes, "Feed: the logits")
	prefilled, err := run.Feed([]int32{5, 6, 7})
	require.NoError(t, err)
	assert.Equal(t, v, run.fetch.Stats().CopyBytes, "after a prefill: the last row's logits")
	cpu, err := m.NewState(mod.RoutingRouter)
	require.NoError(t, err)
	_, err = cpu.Forward([]int32{1, best}, false)
	require.NoError(t, err)
	want, err := cpu.Forward([]int32{5, 6, 7}, false)
	require.NoError(t, err)
	assert.Empty(t, closeErr(want, prefilled, tolLogits), "the fetched logits are the prefill's last row's")
	assert.Len(t, logits, m.Config.NVocab)

	e, err := NewEvaluator(dev, m, Options{}) // no trace: nothing but the output comes back
	require.NoError(t, err)
	t.Cleanup(e.Close)
	tokens := []int32{1, 30, 40, 50, 60, 70, 80, 90}
	_, err = e.Losses(tokens)
	require.NoError(t, err)
	_, err = e.Eval(tokens)
	require.NoError(t, err)
	s := uint64(len(tokens))
	assert.Equal(t, uint64(0), e.r.pf.recs[prefillKey{len(tokens), headLoss}].rec.Stats().CopyBytes, "Losses: no logits copied")
	assert.Equal(t, s*v, e.r.pf.recs[prefillKey{len(tokens), headLogits}].rec.Stats().CopyBytes, "Eval: every row's logits")
	_, err = run.Losses(tokens)
	require.NoError(t, err)
	assert.Equal(t, uint64(0), run.pf.recs[prefillKey{len(tokens), headLoss}].rec.Stats().CopyBytes, "causal Losses: no logits copied")
	t.Logf("bytes to the host: greedy step 4, sampled step %d; a window of %d: Eval %d, Losses %d", v+4, s, s*v, 4*s)
}
