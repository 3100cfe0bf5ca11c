package engine

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
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
func (s *tableScorer) NVocab() int     { return 2 }

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
		if argmax(r) == argmax(s) {
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

	_, err = Compare(context.Background(), sc, &uniformScorer{}, text, 1, 4, nil)
	assert.ErrorContains(t, err, "the scorers' vocabularies differ: 2 and 10 tokens")
}

// An interrupt between windows returns what was scored, with ctx's error;
// the plain path and the comparison alike.
func TestPerplexityInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	u := &uniformScorer{}
	text := []int32{3, 4, 5, 6, 7, 8, 9, 3, 4, 5}
	res, err := PerplexityContext(ctx, u, text, 1, 5, func(done, total int) {
		if done >= 4 {
			cancel()
		}
	})
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, res.Windows, "the window scored before the interrupt")
	assert.Equal(t, 4, res.Tokens)
	assert.InDelta(t, math.Log(10), res.NLL, 1e-12)

	ctx, cancel = context.WithCancel(context.Background())
	ref := &tableScorer{rows: [][]float32{{0, 0}, {0, 2}}}
	cmp, err := Compare(ctx, ref, ref, []int32{0, 1, 1, 0, 1, 1, 0}, 1, 4, func(int, int) { cancel() })
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, cmp.Windows)
	assert.Equal(t, 3, cmp.Tokens)
}

// The options' checks, without the model and against it.
func TestPerplexityOptions(t *testing.T) {
	one, half, zero := 1.0, 0.5, 0.0
	for _, c := range []struct {
		o    PerplexityOptions
		flag string
	}{
		{PerplexityOptions{Window: -3}, "Window -3: must be at least 2 (BOS and one token to score), or 0: the model's"},
		{PerplexityOptions{Window: 1}, "Window 1: must be at least 2"},
		{PerplexityOptions{Capacity: &zero, Routing: mod.RoutingTopK}, "Capacity 0: want a fraction in (0, 1]"},
		{PerplexityOptions{Capacity: &half, Routing: mod.RoutingRouter}, "Capacity sets the fraction of --routing topk; --routing router routes by sign"},
	} {
		err := c.o.Check()
		var oe *OptionError
		require.ErrorAs(t, err, &oe, c.flag)
		assert.Contains(t, oe.Error(), c.flag)
	}
	require.NoError(t, PerplexityOptions{Window: 2, Capacity: &one, Routing: mod.RoutingTopK}.Check())

	m, err := synth.Build(tiny, synth.Options{Seed: 5, Capacity: 0.25, Type: gguf.TypeF32})
	require.NoError(t, err)
	defer m.Close()
	w, err := PerplexityOptions{Routing: mod.RoutingTopK, Capacity: &half}.Apply(m.Model)
	require.NoError(t, err)
	assert.Equal(t, tiny.ContextLen, w, "0: the model's context length")
	assert.Equal(t, float32(0.5), m.Config.Capacity)
	_, err = PerplexityOptions{Window: tiny.ContextLen + 1, Routing: mod.RoutingTopK}.Apply(m.Model)
	var oe *OptionError
	require.ErrorAs(t, err, &oe)
	assert.Contains(t, oe.Error(), "Window 129: must be in [2, 128] (the context length of")
}

// The CPU backend against the reference on a Q8_0 model: the scorer's NLL
// is Perplexity's, and the distributions are near (8-bit activations),
// while a different model (another seed) is far.
func TestCompareBackends(t *testing.T) {
	m := buildSynth(t, gguf.TypeQ8_0, 0)
	other, err := synth.Build(tiny, synth.Options{Type: gguf.TypeQ8_0, Seed: 6})
	require.NoError(t, err)
	defer other.Close()
	open := func(m *mod.Model, name string) *ScorerBackend {
		sc, _, err := OpenScorer(m, mod.RoutingTopK, BackendOptions{Name: name})
		require.NoError(t, err)
		t.Cleanup(sc.Close)
		return sc
	}
	cpu, ref := open(m.Model, BackendCPU), open(m.Model, BackendReference)
	text := []int32{80, 111, 122, 259, 101, 120, 259, 40, 99, 80, 111, 122, 259, 101, 120, 259, 40, 99, 101, 120}
	res, err := Compare(context.Background(), cpu, ref, text, 1, 8, nil)
	require.NoError(t, err)
	alone, err := Perplexity(cpu, text, 1, 8, nil)
	require.NoError(t, err)
	assert.InDelta(t, alone.NLL, res.NLL, 1e-9)
	assert.InDelta(t, alone.NLLErr, res.NLLErr, 1e-9)
	assert.Less(t, res.MeanKL, 1e-3)
	assert.Less(t, math.Abs(res.DeltaNLL), 0.01)
	assert.GreaterOrEqual(t, res.Top1, 0.9)
	t.Logf("cpu vs reference, Q8_0: %+v", res)

	far, err := Compare(context.Background(), open(other.Model, BackendReference), ref, text, 1, 8, nil)
	require.NoError(t, err)
	assert.Greater(t, far.MeanKL, 100*res.MeanKL)
	t.Logf("another model vs the reference: %+v", far)
}
