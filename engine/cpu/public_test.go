package cpu

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/internal/publictest"
	"github.com/modrun/modrun/mod"
)

// TestPublicLayouts: the routed blocks of the public MoD layouts' semantics
// (the gate on the MLP output or on the whole output, RoPE at compact
// positions, a linear predictor with a bias, k as a token count or
// floor(c·S)) run in the fast runner as in mod's reference. With F32
// weights: the greedy tokens and the logits within 1e-4 of the largest,
// every layer's counts, and the compact caches with their keys and
// positions, token by token after a batched prompt (whole, and in chunks
// of 3); in top-k scoring, every token's logits for sequences whose k
// crosses its rule's edges.
func TestPublicLayouts(t *testing.T) {
	const tol = 1e-4
	for _, dir := range publictest.Layouts {
		t.Run(dir, func(t *testing.T) {
			path, tokens := publictest.Convert(t, dir)
			m, err := mod.Open(path)
			require.NoError(t, err)
			t.Cleanup(func() { m.Close() })
			c := m.Config
			require.NotEmpty(t, c.Semantics())
			routings := []mod.Routing{mod.RoutingRouter}
			if c.HasPredictor() {
				routings = append(routings, mod.RoutingPredictor)
			}
			for _, r := range routings {
				for _, ub := range []int{0, 3} {
					name := fmt.Sprintf("%s ubatch %d", r, ub)
					run, err := New(m, r, Options{UBatch: ub})
					require.NoError(t, err, name)
					ref, err := m.NewState(r)
					require.NoError(t, err, name)
					worst := lockstep(t, run, ref, tokens, 8)
					assert.LessOrEqual(t, worst, tol, name)
					selected, seen := run.Counts()
					assert.Equal(t, ref.Selected, selected, "%s: selected", name)
					assert.Equal(t, ref.Seen, seen, "%s: seen", name)
					in, of := 0, 0
					for _, l := range c.RoutedLayers() {
						in, of = in+selected[l], of+seen[l]
						k, v, pos := run.KV(l)
						wk, wv, wpos := ref.KV(l)
						assert.Equal(t, wpos, pos, "%s layer %d: the cache's positions", name, l)
						if len(wk) > 0 {
							assert.LessOrEqual(t, relDiff(k, wk), tol, "%s layer %d: keys", name, l)
							assert.LessOrEqual(t, relDiff(v, wv), tol, "%s layer %d: values", name, l)
						}
					}
					assert.Positive(t, in, "%s: some token enters a routed block", name)
					assert.Less(t, in, of, "%s: some token skips one", name)
				}
			}

			run, err := New(m, mod.RoutingTopK, Options{})
			require.NoError(t, err)
			ref, err := m.NewState(mod.RoutingTopK)
			require.NoError(t, err)
			for _, s := range []int{len(tokens), 3, 11} {
				seq := tokens[:min(s, len(tokens))]
				got, err := run.Score(seq)
				require.NoError(t, err)
				ref.Reset()
				want, err := ref.Forward(seq, true)
				require.NoError(t, err)
				require.Len(t, got, len(want))
				v := c.NVocab
				for i := range seq {
					assert.LessOrEqual(t, relDiff(got[i*v:(i+1)*v], want[i*v:(i+1)*v]), tol, "top-k, %d tokens: token %d", len(seq), i)
				}
			}
		})
	}
}
