package engine

import (
	"context"
	"math"
	"testing"

	"github.com/modrun/modrun/internal/shared"
	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newSampler(t *testing.T, o SamplerOptions) *Sampler {
	s, err := NewSampler(o)
	require.NoError(t, err)
	return s
}

func TestGreedyAndFilters(t *testing.T) {
	logits := []float32{1, 3, 2, 3.5, -1}
	o := DefaultSampler()
	assert.Equal(t, int32(3), newSampler(t, o).Sample(logits), "greedy is argmax")
	assert.Equal(t, []float32{1, 3, 2, 3.5, -1}, logits, "logits are left unchanged")

	o.Temperature, o.Seed = 1, 1
	for _, f := range []func(*SamplerOptions){
		func(o *SamplerOptions) { o.TopK = 1 },
		func(o *SamplerOptions) { o.TopP = 0.01 },
		func(o *SamplerOptions) { o.MinP = 0.99 },
	} {
		oo := o
		f(&oo)
		s := newSampler(t, oo)
		for i := 0; i < 50; i++ {
			require.Equal(t, int32(3), s.Sample(logits), "a filter that keeps one token always draws it: %+v", oo)
		}
	}
	for _, f := range []func(*SamplerOptions){ // each draw path reads the logits in place, or a copy when it writes
		func(o *SamplerOptions) {},
		func(o *SamplerOptions) { o.TopK, o.TopP, o.MinP = 2, 0.9, 0.01 },
		func(o *SamplerOptions) { o.RepeatPenalty, o.LogitBias = 1.5, map[int32]float32{1: 2} },
	} {
		oo := o
		f(&oo)
		s := newSampler(t, oo)
		s.Accept(3)
		s.Ban([]int32{0})
		for i := 0; i < 20; i++ {
			s.Sample(logits)
		}
		assert.Equal(t, []float32{1, 3, 2, 3.5, -1}, logits, "logits are left unchanged: %+v", oo)
	}
}

func TestSameSeedSameTokens(t *testing.T) {
	logits := make([]float32, 50)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)))
	}
	draw := func(seed uint64) []int32 {
		o := DefaultSampler()
		o.Temperature, o.TopK, o.TopP, o.Seed = 0.9, 40, 0.95, seed
		s := newSampler(t, o)
		var out []int32
		for i := 0; i < 100; i++ {
			out = append(out, s.Sample(logits))
		}
		return out
	}
	assert.Equal(t, draw(42), draw(42))
	assert.NotEqual(t, draw(42), draw(43))
}

// TestTemperatureFollowsTheDistribution draws 20000 tokens from two logits
// whose softmax is (0.25, 0.75) at T=1 and (0.1, 0.9) at T=0.5 (since
// p ∝ e^(l/T)); the frequency must be within 5 standard deviations (~0.015).
func TestTemperatureFollowsTheDistribution(t *testing.T) {
	logits := []float32{0, float32(math.Log(3))}
	for _, c := range []struct {
		temp float32
		want float64
	}{{1, 0.75}, {0.5, 0.9}} {
		o := DefaultSampler()
		o.Temperature, o.Seed = c.temp, 7
		s := newSampler(t, o)
		n, hits := 20000, 0
		for i := 0; i < n; i++ {
			if s.Sample(logits) == 1 {
				hits++
			}
		}
		sd := math.Sqrt(c.want * (1 - c.want) / float64(n))
		assert.InDelta(t, c.want, float64(hits)/float64(n), 5*sd, "T=%g", c.temp)
	}
}

func TestRepetitionPenalty(t *testing.T) {
	o := DefaultSampler()
	o.RepeatPenalty = 2
	s := newSampler(t, o)
	s.Accept(0)
	assert.Equal(t, int32(1), s.Sample([]float32{3, 2}), "3/2 = 1.5 < 2")
	assert.Equal(t, int32(0), s.Sample([]float32{-1, -1.5}), "token 1, now recent, goes from -1.5 to -3")
}

func TestSamplerOptionsAreChecked(t *testing.T) {
	for _, c := range []struct {
		f    func(*SamplerOptions)
		want string
	}{
		{func(o *SamplerOptions) { o.Temperature = -1 }, "Temperature -1: must be 0 (greedy) or positive"},
		{func(o *SamplerOptions) { o.TopP = 0 }, "TopP 0: must be in (0, 1]"},
		{func(o *SamplerOptions) { o.MinP = 1 }, "MinP 1: must be in [0, 1)"},
		{func(o *SamplerOptions) { o.TopK = -2 }, "TopK -2: must be 0 (off) or positive"},
		{func(o *SamplerOptions) { o.RepeatPenalty = 0 }, "RepeatPenalty 0: must be positive (1 = off)"},
	} {
		o := DefaultSampler()
		c.f(&o)
		_, err := NewSampler(o)
		assert.ErrorContains(t, err, c.want)
	}
}

// fakeRunner returns logits that put all mass on next[pos].
type fakeRunner struct {
	next []int32
	pos  int
	ctx  int
}

func (f *fakeRunner) Feed(tokens []int32) ([]float32, error) {
	f.pos += len(tokens)
	l := make([]float32, 8)
	l[f.next[f.pos-1]] = 10
	return l, nil
}
func (f *fakeRunner) Pos() int        { return f.pos }
func (f *fakeRunner) ContextLen() int { return f.ctx }
func (f *fakeRunner) Reset()          { f.pos = 0 }

func TestGenerateStops(t *testing.T) {
	next := []int32{5, 6, 7, 2, 4, 4, 4, 4, 4, 4}
	opts := GenerateOptions{EOS: 2, Sampler: DefaultSampler()}
	res, err := Generate(context.Background(), &fakeRunner{next: next, ctx: 10}, 8, []int32{1}, opts)
	require.NoError(t, err)
	assert.Equal(t, []int32{5, 6, 7}, res.Tokens)
	assert.Equal(t, StopEOS, res.Stop)

	turn := opts
	turn.EndOfTurn = []int32{9, 7} // an end-of-turn id stops as EOS does
	res, err = Generate(context.Background(), &fakeRunner{next: next, ctx: 10}, 8, []int32{1}, turn)
	require.NoError(t, err)
	assert.Equal(t, []int32{5, 6}, res.Tokens)
	assert.Equal(t, StopEOS, res.Stop)

	banned := opts // ignore_eos: EOS is never drawn, and generation goes on
	banned.Ban, banned.MaxTokens = []int32{2}, 6
	res, err = Generate(context.Background(), &fakeRunner{next: next, ctx: 10}, 8, []int32{1}, banned)
	require.NoError(t, err)
	assert.Equal(t, StopMaxTokens, res.Stop)
	require.Len(t, res.Tokens, 6)
	assert.Equal(t, []int32{5, 6, 7}, res.Tokens[:3])
	assert.NotContains(t, res.Tokens, int32(2))
	assert.Equal(t, []int32{4, 4}, res.Tokens[4:])

	opts.MaxTokens = 2
	res, err = Generate(context.Background(), &fakeRunner{next: next, ctx: 10}, 8, []int32{1}, opts)
	require.NoError(t, err)
	assert.Equal(t, []int32{5, 6}, res.Tokens)
	assert.Equal(t, StopMaxTokens, res.Stop)

	opts.MaxTokens, opts.EOS = 0, -1
	res, err = Generate(context.Background(), &fakeRunner{next: next, ctx: 4}, 8, []int32{1, 1}, opts)
	require.NoError(t, err)
	assert.Equal(t, StopContextFull, res.Stop)
	assert.Len(t, res.Tokens, 3, "2 prompt + 2 fed tokens fill the context of 4; the third drawn token is the last")

	var streamed []int32
	opts.OnToken = func(tk Token) error {
		if tk.Prompt {
			return nil
		}
		streamed = append(streamed, tk.ID)
		if len(streamed) == 2 {
			return ErrStop
		}
		return nil
	}
	res, err = Generate(context.Background(), &fakeRunner{next: next, ctx: 10}, 8, []int32{1}, opts)
	require.NoError(t, err)
	assert.Equal(t, StopCallback, res.Stop)
	assert.Equal(t, streamed, res.Tokens)

	_, err = Generate(context.Background(), &fakeRunner{next: next, ctx: 3}, 8, []int32{1, 1, 1, 1}, opts)
	assert.ErrorContains(t, err, "the prompt has 4 tokens, more than the context length 3")
	_, err = Generate(context.Background(), &fakeRunner{next: next, ctx: 3}, 8, nil, opts)
	assert.ErrorContains(t, err, "empty prompt")
}

// greedyFake is a fakeRunner that is also a GreedyFeeder, counting which
// path Generate took.
type greedyFake struct {
	fakeRunner
	feeds, argmaxFeeds int
}

func (g *greedyFake) Feed(tokens []int32) ([]float32, error) {
	g.feeds++
	return g.fakeRunner.Feed(tokens)
}

func (g *greedyFake) FeedArgmax(tokens []int32) (int32, error) {
	g.argmaxFeeds++
	l, err := g.fakeRunner.Feed(tokens)
	return stats.Argmax(l), err
}

// TestGenerateGreedyFeeder: a pure greedy sampler lets a GreedyFeeder take
// the argmax (same tokens, no logits); any other sampler reads the logits.
func TestGenerateGreedyFeeder(t *testing.T) {
	next := []int32{5, 6, 7, 2, 4, 4, 4, 4, 4, 4}
	want, err := Generate(context.Background(), &fakeRunner{next: next, ctx: 10}, 8, []int32{1}, GenerateOptions{EOS: 2, Sampler: DefaultSampler()})
	require.NoError(t, err)

	g := &greedyFake{fakeRunner: fakeRunner{next: next, ctx: 10}}
	got, err := Generate(context.Background(), g, 8, []int32{1}, GenerateOptions{EOS: 2, Sampler: DefaultSampler()})
	require.NoError(t, err)
	assert.Equal(t, want.Tokens, got.Tokens)
	assert.Equal(t, StopEOS, got.Stop)
	assert.Equal(t, 0, g.feeds)
	assert.Equal(t, 4, g.argmaxFeeds, "the prompt and 3 tokens fed back")

	// Inside a Backend (as bench runs it), the runner's argmax still runs.
	g = &greedyFake{fakeRunner: fakeRunner{next: next, ctx: 10}}
	got, err = Generate(context.Background(), &Backend{Runner: g, Name: "fake"}, 8, []int32{1}, GenerateOptions{EOS: 2, Sampler: DefaultSampler()})
	require.NoError(t, err)
	assert.Equal(t, want.Tokens, got.Tokens)
	assert.Equal(t, 0, g.feeds)
	assert.Equal(t, 4, g.argmaxFeeds, "through the Backend")

	for _, so := range []SamplerOptions{
		{TopP: 1, RepeatPenalty: 1.1, RepeatLastN: 64},         // the penalty may move the argmax
		{Temperature: 0.5, TopP: 1, RepeatPenalty: 1, Seed: 1}, // a draw
	} {
		g := &greedyFake{fakeRunner: fakeRunner{next: next, ctx: 10}}
		_, err := Generate(context.Background(), g, 8, []int32{1}, GenerateOptions{EOS: 2, Sampler: so})
		require.NoError(t, err)
		assert.Equal(t, 0, g.argmaxFeeds, "%+v", so)
		assert.Positive(t, g.feeds, "%+v", so)
	}
}

// TestGenerateStories260K: the CPU runner inside Generate reproduces the
// 200 greedy tokens of the llama2.c vector.
func TestGenerateStories260K(t *testing.T) {
	m, err := mod.Open(shared.Path(t, "models/stories260K.gguf"))
	require.NoError(t, err)
	defer m.Close()
	r, err := NewCPU(m, mod.RoutingRouter)
	require.NoError(t, err)
	res, err := Generate(context.Background(), r, m.Config.NVocab, []int32{1}, GenerateOptions{MaxTokens: 200, EOS: -1, Sampler: DefaultSampler()})
	require.NoError(t, err)
	require.Len(t, res.Tokens, 200)
	assert.Equal(t, []int32{403, 407, 261}, res.Tokens[:3])
	assert.Positive(t, res.DecodeRate())
}

// uniformScorer gives equal logits: every token's NLL is log(nVocab).
type uniformScorer struct{ calls [][]int32 }

func (u *uniformScorer) Score(tokens []int32) ([]float32, error) {
	u.calls = append(u.calls, append([]int32(nil), tokens...))
	return make([]float32, len(tokens)*10), nil
}
func (u *uniformScorer) ContextLen() int { return 5 }
func (u *uniformScorer) NVocab() int     { return 10 }

func TestPerplexityWindows(t *testing.T) {
	u := &uniformScorer{}
	text := []int32{3, 4, 5, 6, 7, 8, 9, 3, 4, 5}
	res, err := Perplexity(u, text, 1, 5, nil)
	require.NoError(t, err)
	assert.Equal(t, 10, res.Tokens, "every token is scored once")
	assert.Equal(t, 3, res.Windows)
	assert.Equal(t, [][]int32{{1, 3, 4, 5, 6}, {1, 7, 8, 9, 3}, {1, 4, 5}}, u.calls, "each window is BOS + the next tokens")
	assert.InDelta(t, math.Log(10), res.NLL, 1e-12)
	assert.InDelta(t, 10, res.Perplexity(), 1e-9)

	_, err = Perplexity(u, text, 1, 6, nil)
	assert.ErrorContains(t, err, "window 6 must be in [2, 5]")
}

// The frequency and presence penalties subtract from the logits of recent
// tokens as llama.cpp's do (frequency per occurrence, presence once), the
// repetition penalty applies once per distinct token, and logit bias is
// added before them; any of them turns off the argmax shortcut.
func TestPenaltiesAndLogitBias(t *testing.T) {
	sample := func(f func(*SamplerOptions), recent []int32, logits []float32) int32 {
		o := DefaultSampler()
		f(&o)
		s := newSampler(t, o)
		for _, id := range recent {
			s.Accept(id)
		}
		assert.False(t, o.Greedy(), "%+v", o)
		return s.Sample(logits)
	}
	twice := []int32{0, 0}
	assert.Equal(t, int32(1), sample(func(o *SamplerOptions) { o.FrequencyPenalty = 0.5 }, twice, []float32{3, 2.1}), "3 - 2*0.5 = 2 < 2.1")
	assert.Equal(t, int32(0), sample(func(o *SamplerOptions) { o.PresencePenalty = 0.5 }, twice, []float32{3, 2.1}), "3 - 0.5 (once) = 2.5 > 2.1")
	assert.Equal(t, int32(0), sample(func(o *SamplerOptions) { o.RepeatPenalty = 1.2 }, twice, []float32{3, 2.1}), "3/1.2 = 2.5 (once, not 3/1.44) > 2.1")
	assert.Equal(t, int32(1), sample(func(o *SamplerOptions) { o.FrequencyPenalty = -1 }, []int32{1}, []float32{3, 2.1}), "a negative penalty favours the recent: 2.1 + 1 > 3")
	assert.Equal(t, int32(0), sample(func(o *SamplerOptions) { o.FrequencyPenalty, o.RepeatLastN = 0.5, 1 }, []int32{0, 1}, []float32{3, 2.1}),
		"only the last RepeatLastN tokens count: 1 is penalised, 0 is not")
	assert.Equal(t, int32(1), sample(func(o *SamplerOptions) { o.LogitBias = map[int32]float32{1: 1} }, nil, []float32{3, 2.1}), "2.1 + 1 > 3")
	assert.Equal(t, int32(1), sample(func(o *SamplerOptions) { o.LogitBias = map[int32]float32{0: float32(math.Inf(-1)), 9: 50} }, nil, []float32{3, 2.1}),
		"-Inf bans 0; a token beyond the vocabulary is ignored")
	// Sampled (T=1), a bias of -100 leaves the token out for good.
	o := DefaultSampler()
	o.Temperature, o.Seed, o.LogitBias = 1, 3, map[int32]float32{1: -100}
	s := newSampler(t, o)
	for range 1000 {
		require.Equal(t, int32(0), s.Sample([]float32{0, 0}))
	}
	for _, c := range []struct {
		f    func(*SamplerOptions)
		want string
	}{
		{func(o *SamplerOptions) { o.FrequencyPenalty = 2.5 }, "FrequencyPenalty 2.5: must be in [-2, 2]"},
		{func(o *SamplerOptions) { o.PresencePenalty = float32(math.NaN()) }, "PresencePenalty NaN"},
		{func(o *SamplerOptions) { o.LogitBias = map[int32]float32{-1: 1} }, "LogitBias[-1] 1: want a token id >= 0"},
	} {
		o := DefaultSampler()
		c.f(&o)
		_, err := NewSampler(o)
		assert.ErrorContains(t, err, c.want)
	}
}
