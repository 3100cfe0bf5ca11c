package mod

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/modrun/modrun/internal/shared"
	"github.com/modrun/modrun/internal/stats"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStories260KGreedy: the dense reference reproduces llama2.c token for
// token. Logit tolerance 1e-4: the vector is rounded to 5 decimals (5e-6) and
// float32 sums in another order differ by ~1e-6 at these magnitudes (|x| < 20).
func TestStories260KGreedy(t *testing.T) {
	g := shared.Stories260KGreedy(t)
	m, err := Open(shared.Path(t, "models/stories260K.gguf"))
	require.NoError(t, err)
	defer m.Close()
	assert.False(t, m.Config.IsMoD())
	assert.Equal(t, Config{Arch: "llama", NVocab: 512, NEmbd: 64, NLayer: 5, NHead: 8, NKVHead: 4, HeadDim: 8, NFF: 172,
		ContextLen: 2048, RMSEps: 1e-5, RopeBase: 10000, Routed: make([]bool, 5)}, m.Config)

	s, err := m.NewState(RoutingRouter)
	require.NoError(t, err)
	tok := g.BOS
	var got []int32
	for step := 0; step < len(g.IDs); step++ {
		logits, err := s.Forward([]int32{tok}, false)
		require.NoError(t, err)
		if step < len(g.Logits) {
			assertClose(t, g.Logits[step], logits, 1e-4, "logits after step %d", step)
		}
		tok = stats.Argmax(logits)
		got = append(got, tok)
	}
	assert.Equal(t, g.IDs, got)
}

// assertClose fails with the max abs error, the first bad index and a few
// pairs when want and got differ by more than tol anywhere.
func assertClose(t *testing.T, want, got []float32, tol float64, format string, args ...any) bool {
	t.Helper()
	what := fmt.Sprintf(format, args...)
	if len(want) != len(got) {
		t.Errorf("%s: length %d, want %d", what, len(got), len(want))
		return false
	}
	var maxErr float64
	first := -1
	for i := range want {
		e := math.Abs(float64(want[i]) - float64(got[i]))
		if (e > tol || math.IsNaN(e)) && first < 0 {
			first = i
		}
		maxErr = math.Max(maxErr, e)
	}
	if first < 0 {
		return true
	}
	var pairs strings.Builder
	for i := first; i < min(first+4, len(want)); i++ {
		fmt.Fprintf(&pairs, "\n  [%d] want %.7g got %.7g", i, want[i], got[i])
	}
	t.Errorf("%s: max abs error %.3g > %.3g, first bad index %d:%s", what, maxErr, tol, first, pairs.String())
	return false
}
