package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/engine/vulkan"
	"github.com/modrun/modrun/internal/drawref"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
	"github.com/modrun/modrun/vk/vktest"
)

// drawFake is a fakeRunner that draws plain sampled tokens itself
// (DrawFeeder): its token for u is int32(u * 8), and it records each
// draw's temperature and u, and each Feed (logits read back).
type drawFake struct {
	fakeRunner
	draws []sched.Draw
	us    []float64
	feeds int
}

func (f *drawFake) Feed(tokens []int32) ([]float32, error) {
	f.feeds++
	return f.fakeRunner.Feed(tokens)
}

func (f *drawFake) DrawsOnDevice() bool { return true }

func (f *drawFake) FeedDraw(tokens []int32, d sched.Draw, u float64) (int32, error) {
	if _, err := f.fakeRunner.Feed(tokens); err != nil {
		return 0, err
	}
	f.draws, f.us = append(f.draws, d), append(f.us, u)
	return int32(u * 8), nil
}

// TestLoopDrawsOnDevice: a plain sampled generation (a temperature, and
// top-k, top-p and min-p or not) on a runner that draws (DrawFeeder)
// reads no logits: each token is the runner's draw with the sampler's
// next uniform number, the one its own draw would have taken (the same
// seed gives the same numbers), at the sampler's temperature, top-k,
// top-p and min-p. Whatever needs the logits (log-probabilities, a
// penalty, a bias, a ban, a grammar, a temperature the device's float32
// would lose) draws on the host from Feed's logits.
func TestLoopDrawsOnDevice(t *testing.T) {
	opts := DefaultSampler()
	opts.Temperature, opts.Seed = 0.8, 42
	gen := func(o GenerateOptions) (*drawFake, Result) {
		t.Helper()
		f := &drawFake{fakeRunner: fakeRunner{next: make([]int32, 16), ctx: 16}}
		o.EOS, o.MaxTokens = -1, 6
		res, err := Generate(context.Background(), f, 8, []int32{1, 2}, o)
		require.NoError(t, err)
		return f, res
	}
	ref, err := NewSampler(opts)
	require.NoError(t, err)
	var us []float64
	var want []int32
	for range 6 {
		u := ref.Uniform()
		us, want = append(us, u), append(want, int32(u*8))
	}
	for _, d := range []sched.Draw{{Temp: 0.8}, {Temp: 0.8, MinP: 0.1}, {Temp: 0.8, TopP: 0.9, MinP: 0.1},
		{Temp: 0.8, TopK: 3}, {Temp: 0.8, TopK: 40, TopP: 0.9}} {
		so := opts // top-p 1: none (Sampler.Plain's TopP 0)
		so.MinP, so.TopK = d.MinP, d.TopK
		if d.TopP > 0 {
			so.TopP = d.TopP
		}
		f, res := gen(GenerateOptions{Sampler: so})
		assert.Equal(t, us, f.us, "%+v: the sampler's uniform numbers, in order", d)
		assert.Equal(t, []sched.Draw{d, d, d, d, d, d}, f.draws, "%+v: drawn on the runner", d)
		assert.Equal(t, want, res.Tokens, "%+v: the runner's draws", d)
		assert.Zero(t, f.feeds, "%+v: no logits read back", d)
	}

	for _, tc := range []struct {
		name string
		set  func(*GenerateOptions)
	}{
		{"log-probabilities", func(o *GenerateOptions) { o.LogProbs = true }},
		{"top-k with log-probabilities", func(o *GenerateOptions) { o.Sampler.TopK, o.LogProbs = 40, true }},
		{"repeat penalty", func(o *GenerateOptions) { o.Sampler.RepeatPenalty = 1.1 }},
		{"presence penalty", func(o *GenerateOptions) { o.Sampler.PresencePenalty = 0.5 }},
		{"logit bias", func(o *GenerateOptions) { o.Sampler.LogitBias = map[int32]float32{3: 1} }},
		{"ban", func(o *GenerateOptions) { o.Ban = []int32{5} }},
		{"constraint", func(o *GenerateOptions) { o.Constraint = allowAll{} }},
		{"tiny temperature", func(o *GenerateOptions) { o.Sampler.Temperature = 1e-7 }},
		{"huge temperature", func(o *GenerateOptions) { o.Sampler.Temperature = 1e7 }},
	} {
		o := GenerateOptions{Sampler: opts}
		tc.set(&o)
		f, res := gen(o)
		assert.Empty(t, f.us, "%s: no draw on the runner", tc.name)
		assert.Equal(t, 6, f.feeds, "%s: the logits of every draw read back", tc.name)
		assert.Len(t, res.Tokens, 6, tc.name)
	}
}

// allowAll is a Constraint that allows every token.
type allowAll struct{}

func (allowAll) Allowed(int32) bool { return true }
func (allowAll) Accept(int32) error { return nil }
func (allowAll) Mask(mask []uint64) int {
	for i := range mask {
		mask[i] = ^uint64(0)
	}
	return 64 * len(mask)
}

// countingDrawer counts a Vulkan runner's tokens drawn on the device,
// alone (FeedDraw) and chained (FeedDrawChain).
type countingDrawer struct {
	*vulkan.Runner
	draws, chains int
}

func (c *countingDrawer) FeedDraw(tokens []int32, d sched.Draw, u float64) (int32, error) {
	c.draws++
	return c.Runner.FeedDraw(tokens, d, u)
}

func (c *countingDrawer) FeedDrawChain(token int32, n int, d sched.Draw, us []float64) ([]int32, error) {
	ids, err := c.Runner.FeedDrawChain(token, n, d, us)
	c.chains++
	c.draws += len(ids)
	return ids, err
}

// TestGenerateDrawsOnVulkan: a generation at temperature 1 on the Vulkan
// runner under a GPU's profile (argmax_wide draws) draws every token on
// the device, and so does the same request on the host (log-probabilities
// asked: the logits read back, the same seed's uniform numbers): each
// draw of either is drawref's on its sequence's logits where float32
// rounding cannot move it (on lavapipe, every draw: the same tokens). Chained (the
// default: 4 steps a submission, each with the number the sampler hands
// out next) and unchained (MODRUN_CHAIN=1) give the same tokens, the same
// routing counts, and, for a stop token met inside a chain, the same
// sequence to continue from: the continuation's tokens are the same too.
func TestGenerateDrawsOnVulkan(t *testing.T) {
	if err := vk.Load(); err != nil {
		t.Skipf("no Vulkan loader: %v", err)
	}
	dev := vktest.Open(t, vk.InstanceOptions{})
	m, err := mod.Open(modTrained)
	require.NoError(t, err)
	defer m.Close()
	own := vulkan.DeviceProfile(dev.Info())
	gpu := shaders.GPUProfile(own.Device)
	open := func(chain string) *countingDrawer {
		run, err := vulkan.New(dev, m, mod.RoutingRouter, vulkan.Options{DeviceProfile: &gpu, Knobs: vulkan.Knobs{"MODRUN_CHAIN": chain}})
		require.NoError(t, err)
		t.Cleanup(run.Close)
		require.True(t, run.DrawsOnDevice())
		return &countingDrawer{Runner: run}
	}
	one, five := open("1"), open("5")
	opts := DefaultSampler()
	opts.Temperature, opts.Seed = 1, 7
	prompt := []int32{1, 403, 407, 261}
	genWith := func(c *countingDrawer, so SamplerOptions, o GenerateOptions) Result {
		t.Helper()
		o.Sampler = so
		res, err := Generate(context.Background(), c, m.Config.NVocab, prompt, o)
		require.NoError(t, err)
		return res
	}
	gen := func(c *countingDrawer, o GenerateOptions) Result { return genWith(c, opts, o) }
	free := gen(one, GenerateOptions{EOS: -1, MaxTokens: 24})
	assert.Equal(t, len(free.Tokens), one.draws, "every token drawn on the device")
	assert.Zero(t, one.chains)
	onHost := gen(one, GenerateOptions{EOS: -1, MaxTokens: 24, LogProbs: true})
	assert.Equal(t, len(free.Tokens), one.draws, "none with log-probabilities")
	// Each draw of both, on the logits of its own sequence so far (a
	// third runner's Feed: the same kernels), against drawref where
	// float32 rounding cannot move it; on lavapipe the two are the same
	// tokens.
	ref, err := NewSampler(opts)
	require.NoError(t, err)
	us := ref.Peek(24)
	check := open("1")
	// checkDraws checks each draw of seqs with so's top-k, top-p and
	// min-p against drawref on the logits of its own sequence (top-k's
	// only where its cut is 1e-3 or more from the next logit: the step's
	// logits are not Feed's to the last bit on every device).
	checkDraws := func(so SamplerOptions, seqs ...Result) {
		for _, seq := range seqs {
			check.Reset()
			feed, asked := prompt, 0
			for i, id := range seq.Tokens {
				logits, err := check.Feed(feed)
				require.NoError(t, err)
				want, margin := drawref.DrawTopK(logits, opts.Temperature, so.TopK, so.TopP, so.MinP, float64(float32(us[i])))
				if margin >= 1e-5 && drawref.TopKMargin(logits, so.TopK) >= 1e-3 {
					asked++
					assert.Equal(t, int32(want), id, "top-k %d top-p %g min-p %g: draw %d", so.TopK, so.TopP, so.MinP, i)
				}
				feed = []int32{id}
			}
			t.Logf("top-k %d top-p %g min-p %g: %d of %d draws asked", so.TopK, so.TopP, so.MinP, asked, len(seq.Tokens))
		}
	}
	checkDraws(opts, free, onHost)
	if dev.Info().Type == vk.CPU {
		assert.Equal(t, onHost.Tokens, free.Tokens, "lavapipe: the same tokens")
	}
	// With min-p, top-p, top-k and them together: drawn on the device
	// (chained and not), against drawref.DrawTopK and the host's draw
	// (its kept tokens in id order).
	for _, f := range []struct {
		topP, minP float32
		topK       int
	}{{1, 0.3, 0}, {0.8, 0, 0}, {0.9, 0.05, 0}, {1, 0, 3}, {0.9, 0, 40}} {
		so := opts
		so.TopP, so.MinP, so.TopK = f.topP, f.minP, f.topK
		before := one.draws
		freeP := genWith(one, so, GenerateOptions{EOS: -1, MaxTokens: 24})
		assert.Equal(t, len(freeP.Tokens), one.draws-before, "%+v: every token drawn on the device", f)
		hostP := genWith(one, so, GenerateOptions{EOS: -1, MaxTokens: 24, LogProbs: true})
		checkDraws(so, freeP, hostP)
		if dev.Info().Type == vk.CPU {
			assert.Equal(t, hostP.Tokens, freeP.Tokens, "%+v, lavapipe: the same tokens", f)
		}
		assert.NotEqual(t, free.Tokens, freeP.Tokens, "%+v moved a draw", f)
		chainedP := genWith(five, so, GenerateOptions{EOS: -1, MaxTokens: 24})
		assert.Equal(t, freeP.Tokens, chainedP.Tokens, "%+v: chained draws", f)
	}
	five.draws, five.chains = 0, 0
	greedy, err := Generate(context.Background(), one, m.Config.NVocab, prompt, GenerateOptions{EOS: -1, MaxTokens: 24, Sampler: DefaultSampler()})
	require.NoError(t, err)
	assert.NotEqual(t, greedy.Tokens, free.Tokens, "a draw at temperature 1, not the argmax")

	chained := gen(five, GenerateOptions{EOS: -1, MaxTokens: 24})
	assert.Equal(t, free.Tokens, chained.Tokens, "chained draws")
	assert.Equal(t, free.RoutingStats, chained.RoutingStats)
	assert.Positive(t, five.chains, "draws chained")
	assert.Equal(t, len(free.Tokens), five.draws, "no draw past MaxTokens")

	stop := free.Tokens[6] // met at the 7th draw: inside the second chain of 5
	require.NotContains(t, free.Tokens[:6], stop)
	var want, got []Result
	for _, c := range []struct {
		r   *countingDrawer
		out *[]Result
	}{{one, &want}, {five, &got}} {
		l, err := NewLoop(&Backend{Runner: c.r, Name: "vulkan"}, LoopOptions{ContextLen: m.Config.ContextLen, NVocab: m.Config.NVocab})
		require.NoError(t, err)
		first, err := l.Generate(context.Background(), prompt, GenerateOptions{EOS: stop, MaxTokens: 24, Sampler: opts})
		require.NoError(t, err)
		next := append(append(append([]int32(nil), first.Fed...), first.Pending...), 13, 500)
		second, err := l.Generate(context.Background(), next, GenerateOptions{EOS: -1, MaxTokens: 9, Sampler: opts, Held: len(first.Fed) + len(first.Pending)})
		require.NoError(t, err)
		*c.out = append(*c.out, first, second)
		l.Close()
	}
	for i := range want {
		assert.Equal(t, want[i].Tokens, got[i].Tokens, "call %d: the tokens", i)
		assert.Equal(t, want[i].Stop, got[i].Stop, "call %d", i)
		assert.Equal(t, want[i].Fed, got[i].Fed, "call %d", i)
		assert.Equal(t, want[i].RoutingStats, got[i].RoutingStats, "call %d: the routing counts", i)
	}
	assert.Equal(t, StopEOS, got[0].Stop)
	assert.Equal(t, free.Tokens[:6], got[0].Tokens)
}

// drawChainFake is a drawFake that also chains draws (DrawChainer) and
// drops tokens (Truncater): a chain's token for u is int32(u * 8), as a
// single draw's.
type drawChainFake struct {
	drawFake
	chains [][]float64 // each chain's numbers
	truncs []int
}

func (f *drawChainFake) ChainSteps() int { return 4 }

func (f *drawChainFake) FeedArgmaxChain(token int32, n int) ([]int32, error) {
	return nil, errors.New("drawChainFake: no greedy chain")
}

func (f *drawChainFake) FeedDrawChain(token int32, n int, d sched.Draw, us []float64) ([]int32, error) {
	f.pos += n
	f.chains = append(f.chains, append([]float64(nil), us[:n]...))
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(us[i] * 8)
	}
	return ids, nil
}

func (f *drawChainFake) Truncate(p int) error {
	f.truncs = append(f.truncs, p)
	f.pos = p
	return nil
}

// TestLoopChainsDraws: plain sampled rows of a runner that chains draws
// run ahead with the numbers the sampler hands out next, each row served
// from the chain takes the token drawn with its own number (the tokens are
// those of draws one at a time), and a later sequence whose rows bring
// other numbers (another seed) over the same held tokens runs again: the
// token drawn with a number is never served to a row with another.
func TestLoopChainsDraws(t *testing.T) {
	f := &drawChainFake{drawFake: drawFake{fakeRunner: fakeRunner{next: make([]int32, 32), ctx: 32}}}
	l, err := NewLoop(&Backend{Runner: f, Name: "fake"}, LoopOptions{ContextLen: 32, NVocab: 8})
	require.NoError(t, err)
	defer l.Close()
	opts := DefaultSampler()
	opts.Temperature, opts.Seed = 0.8, 1
	prompt := []int32{1, 2}
	res, err := l.Generate(context.Background(), prompt, GenerateOptions{EOS: -1, MaxTokens: 6, Sampler: opts})
	require.NoError(t, err)
	ref, err := NewSampler(opts)
	require.NoError(t, err)
	us := ref.Peek(6)
	var want []int32
	for _, u := range us {
		want = append(want, int32(u*8))
	}
	assert.Equal(t, want, res.Tokens, "the draws one at a time would give")
	require.NotEmpty(t, f.chains, "draws chained")
	assert.Equal(t, us[1:5], f.chains[0], "the chain after the prompt's draw: the next four numbers")

	// The runner holds the prompt and the first 5 tokens (the last drawn
	// alone: one draw was left); the chain drew tokens 2 to 4, each
	// after the token before, so after the first 3 it holds the 4th.
	again := append(append([]int32(nil), prompt...), res.Tokens[:3]...)
	other := opts
	other.Seed = 2
	ref2, err := NewSampler(other)
	require.NoError(t, err)
	u2 := ref2.Peek(1)[0]
	require.NotEqual(t, int32(u2*8), res.Tokens[3], "the other seed draws another token here")
	res2, err := l.Generate(context.Background(), again, GenerateOptions{EOS: -1, MaxTokens: 1, Sampler: other})
	require.NoError(t, err)
	assert.Equal(t, []int32{int32(u2 * 8)}, res2.Tokens, "drawn with the row's own number")
}
