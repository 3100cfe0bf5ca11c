package bench

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/internal/synthtest"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/synth"
)

// tableScorer gives each position the logits of rows[tokens[i] % len(rows)],
// so that two scorers' distributions and NLLs are known by hand.
type tableScorer struct {
	rows  [][]float32 // [row][nVocab]
	calls int
}

func (s *tableScorer) Score(tokens []int32) ([]float32, error) {
	s.calls++
	var out []float32
	for _, t := range tokens {
		out = append(out, s.rows[int(t)%len(s.rows)]...)
	}
	return out, nil
}
func (s *tableScorer) ContextLen() int { return 4 }
func (s *tableScorer) NVocab() int     { return len(s.rows[0]) }

// Compare's figures on two scorers computed by hand: per token the NLLs of
// both, KL(reference || scorer), the top-1 agreement, and the standard
// errors of their means (llama.cpp's definitions).
func TestCompareFigures(t *testing.T) {
	// Reference: token 0 -> p = (1/2, 1/2), token 1 -> softmax(0, 2).
	ref := &tableScorer{rows: [][]float32{{0, 0}, {0, 2}}}
	// Scorer: token 0 -> softmax(0, 1), token 1 -> the reference's.
	sc := &tableScorer{rows: [][]float32{{0, 1}, {0, 2}}}
	text := []int32{0, 1, 1, 0, 1} // windows {1 0 1 1} {1 0 1}: positions predict text
	res, err := Compare(context.Background(), sc, ref, text, 1, 4, nil)
	require.NoError(t, err)
	assert.Equal(t, 5, res.Tokens)
	assert.Equal(t, 2, res.Windows)

	// The position before each text token holds: BOS(1), text[0]=0, 1, 1(BOS), 0.
	lse := func(a, b float64) float64 { return math.Log(math.Exp(a) + math.Exp(b)) }
	prev := []int32{1, 0, 1, 1, 0}
	var nll, refNLL, kl, same []float64
	for i, next := range text {
		r, s := ref.rows[prev[i]], sc.rows[prev[i]]
		lr, ls := lse(float64(r[0]), float64(r[1])), lse(float64(s[0]), float64(s[1]))
		refNLL = append(refNLL, lr-float64(r[next]))
		nll = append(nll, ls-float64(s[next]))
		var k float64
		for j := range r {
			a, b := float64(r[j])-lr, float64(s[j])-ls
			k += math.Exp(a) * (a - b)
		}
		kl = append(kl, k)
		sameTop := 0.0
		if stats.Argmax(r) == stats.Argmax(s) {
			sameTop = 1
		}
		same = append(same, sameTop)
	}
	mean := func(x []float64) float64 {
		var s float64
		for _, v := range x {
			s += v
		}
		return s / float64(len(x))
	}
	se := func(x []float64) float64 {
		m := mean(x)
		var s float64
		for _, v := range x {
			s += (v - m) * (v - m)
		}
		return math.Sqrt(s / float64(len(x)) / float64(len(x)-1))
	}
	diff := make([]float64, len(nll))
	for i := range nll {
		diff[i] = nll[i] - refNLL[i]
	}
	assert.InDelta(t, mean(nll), res.NLL, 1e-12)
	assert.InDelta(t, se(nll), res.NLLErr, 1e-12)
	assert.InDelta(t, mean(refNLL), res.RefNLL, 1e-12)
	assert.InDelta(t, mean(diff), res.DeltaNLL, 1e-12)
	assert.InDelta(t, se(diff), res.DeltaNLLErr, 1e-12)
	assert.InDelta(t, mean(kl), res.MeanKL, 1e-12)
	assert.InDelta(t, se(kl), res.MeanKLErr, 1e-12)
	assert.InDelta(t, 0.5*math.Log(0.5*(1+math.E))+0.5*math.Log(0.5*(1+math.E)/math.E), res.MaxKL, 1e-12, "the two-coin KL of a token after 0")
	assert.InDelta(t, mean(same), res.Top1, 1e-12)
	assert.InDelta(t, math.Sqrt(res.Top1*(1-res.Top1)/4), res.Top1Err, 1e-12)
	assert.Less(t, res.Top1, 1.0, "(1/2, 1/2) against (0.27, 0.73): argmax 0 and 1 differ")

	// Against itself: no difference at all.
	self, err := Compare(context.Background(), ref, ref, text, 1, 4, nil)
	require.NoError(t, err)
	assert.Zero(t, self.MeanKL)
	assert.Zero(t, self.DeltaNLL)
	assert.Equal(t, 1.0, self.Top1)

	_, err = Compare(context.Background(), sc, &tableScorer{rows: [][]float32{make([]float32, 10)}}, text, 1, 4, nil)
	assert.ErrorContains(t, err, "the scorers' vocabularies differ: 2 and 10 tokens")
}

// An interrupt between windows returns what was compared, with ctx's
// error (engine's TestPerplexityInterrupted: the plain path).
func TestCompareInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ref := &tableScorer{rows: [][]float32{{0, 0}, {0, 2}}}
	cmp, err := Compare(ctx, ref, ref, []int32{0, 1, 1, 0, 1, 1, 0}, 1, 4, func(int, int) { cancel() })
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, cmp.Windows)
	assert.Equal(t, 3, cmp.Tokens)
}

// The CPU backend against the reference on a Q8_0 model: the scorer's NLL
// is Perplexity's, and the distributions are near (8-bit activations),
// while a different model (another seed) is far.
func TestCompareBackends(t *testing.T) {
	m := synthtest.Build(t, gguf.TypeQ8_0, 0)
	other, err := synth.Build(synthtest.Tiny, synth.Options{Type: gguf.TypeQ8_0, Seed: 6})
	require.NoError(t, err)
	defer other.Close()
	open := func(m *mod.Model, name string) *engine.ScorerBackend {
		sc, _, err := engine.OpenScorer(m, mod.RoutingTopK, engine.BackendOptions{Name: name})
		require.NoError(t, err)
		t.Cleanup(sc.Close)
		return sc
	}
	cpu, ref := open(m.Model, engine.BackendCPU), open(m.Model, engine.BackendReference)
	text := []int32{80, 111, 122, 259, 101, 120, 259, 40, 99, 80, 111, 122, 259, 101, 120, 259, 40, 99, 101, 120}
	res, err := Compare(context.Background(), cpu, ref, text, 1, 8, nil)
	require.NoError(t, err)
	alone, err := engine.Perplexity(cpu, text, 1, 8, nil)
	require.NoError(t, err)
	assert.InDelta(t, alone.NLL, res.NLL, 1e-9)
	assert.InDelta(t, alone.NLLErr, res.NLLErr, 1e-9)
	assert.Less(t, res.MeanKL, 1e-3)
	assert.Less(t, math.Abs(res.DeltaNLL), 0.01)
	assert.GreaterOrEqual(t, res.Top1, 0.9)
	t.Logf("cpu vs reference, Q8_0: %+v", res)

	far, err := Compare(context.Background(), open(other.Model, engine.BackendReference), ref, text, 1, 8, nil)
	require.NoError(t, err)
	assert.Greater(t, far.MeanKL, 100*res.MeanKL)
	t.Logf("another model vs the reference: %+v", far)
}
