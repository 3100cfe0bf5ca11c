package cpu

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/poison"
	"github.com/modrun/modrun/mod"
)

// TestNonFiniteActivations: a NaN or an Inf in one element of block 0's
// attn_norm puts it in one activation of attn_q's 8-bit input (Q8_0
// weights), where a max over |x| could drop it; the logits must be
// non-finite on both kernel paths, FeedArgmax must say ErrNonFinite, and
// eval-mode scoring must give non-finite logits too.
func TestNonFiniteActivations(t *testing.T) {
	m := buildSynth(t, tiny, gguf.TypeQ8_0, 0.25)
	clean := filepath.Join(t.TempDir(), "tiny-q8_0.gguf")
	require.NoError(t, os.WriteFile(clean, m.Data, 0o644))
	kernelPaths(t, func(t *testing.T) {
		for _, v := range []float64{math.NaN(), math.Inf(1)} {
			for _, at := range []uint64{5, 40} { // the first and the second vector of a block on the SIMD path
				bad, err := mod.Open(poison.Copy(t, clean, "blk.0.attn_norm.weight", at, float32(v)))
				require.NoError(t, err)
				for _, r := range []mod.Routing{mod.RoutingRouter, mod.RoutingTopK} {
					run, err := New(bad, r, Options{})
					require.NoError(t, err)
					require.True(t, run.QuantizedActivations())
					logits, err := run.Score(prompt)
					require.NoError(t, err)
					assert.False(t, mod.Finite(logits), "%v at %d, %s: Score's logits", v, at, r)
					if r == mod.RoutingTopK {
						continue
					}
					run.Reset()
					_, err = run.FeedArgmax(prompt)
					assert.ErrorIs(t, err, mod.ErrNonFinite, "%v at %d", v, at)
					assert.ErrorContains(t, err, "non-finite logits at token 15", "%v at %d", v, at)
				}
				bad.Close()
			}
		}
	})
}
