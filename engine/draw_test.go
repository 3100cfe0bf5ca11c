package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/vulkan"
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
	temps []float32
	us    []float64
	feeds int
}

func (f *drawFake) Feed(tokens []int32) ([]float32, error) {
	f.feeds++
	return f.fakeRunner.Feed(tokens)
}

func (f *drawFake) DrawsOnDevice() bool { return true }

func (f *drawFake) FeedDraw(tokens []int32, temp float32, u float64) (int32, error) {
	if _, err := f.fakeRunner.Feed(tokens); err != nil {
		return 0, err
	}
	f.temps, f.us = append(f.temps, temp), append(f.us, u)
	return int32(u * 8), nil
}

// TestLoopDrawsOnDevice: a plain sampled generation (a temperature and
// nothing else) on a runner that draws (DrawFeeder) reads no logits: each
// token is the runner's draw with the sampler's next uniform number, the
// one its own draw would have taken (the same seed gives the same
// numbers), at the sampler's temperature. Whatever needs the logits
// (log-probabilities, a filter, a penalty, a bias, a ban, a grammar, a temperature
// the device's float32 would lose) draws on the host from Feed's logits.
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
	f, res := gen(GenerateOptions{Sampler: opts})
	ref, err := NewSampler(opts)
	require.NoError(t, err)
	var us []float64
	var want []int32
	for range 6 {
		u := ref.Uniform()
		us, want = append(us, u), append(want, int32(u*8))
	}
	assert.Equal(t, us, f.us, "the sampler's uniform numbers, in order")
	assert.Equal(t, []float32{0.8, 0.8, 0.8, 0.8, 0.8, 0.8}, f.temps)
	assert.Equal(t, want, res.Tokens, "the runner's draws")
	assert.Zero(t, f.feeds, "no logits read back")

	for _, tc := range []struct {
		name string
		set  func(*GenerateOptions)
	}{
		{"log-probabilities", func(o *GenerateOptions) { o.LogProbs = true }},
		{"top-k", func(o *GenerateOptions) { o.Sampler.TopK = 3 }},
		{"top-p", func(o *GenerateOptions) { o.Sampler.TopP = 0.9 }},
		{"min-p", func(o *GenerateOptions) { o.Sampler.MinP = 0.1 }},
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

// countingDrawer counts a Vulkan runner's FeedDraw calls.
type countingDrawer struct {
	*vulkan.Runner
	draws int
}

func (c *countingDrawer) FeedDraw(tokens []int32, temp float32, u float64) (int32, error) {
	c.draws++
	return c.Runner.FeedDraw(tokens, temp, u)
}

// TestGenerateDrawsOnVulkan: a generation at temperature 1 on the Vulkan
// runner under a GPU's profile (argmax_wide draws) draws every token on
// the device, and gives the tokens the same request gives when it draws
// on the host (log-probabilities asked: the logits read back, the same
// seed's uniform numbers): the same logits, the draw in float32 against
// float64, which differ only where u*z falls within rounding of an
// interval's end (none here; lavapipe is deterministic).
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
	run, err := vulkan.New(dev, m, mod.RoutingRouter, vulkan.Options{DeviceProfile: &gpu})
	require.NoError(t, err)
	defer run.Close()
	require.True(t, run.DrawsOnDevice())
	c := &countingDrawer{Runner: run}
	opts := DefaultSampler()
	opts.Temperature, opts.Seed = 1, 7
	prompt := []int32{1, 403, 407, 261}
	onDevice, err := Generate(context.Background(), c, m.Config.NVocab, prompt, GenerateOptions{EOS: -1, MaxTokens: 24, Sampler: opts})
	require.NoError(t, err)
	assert.Equal(t, len(onDevice.Tokens), c.draws, "every token drawn on the device")
	onHost, err := Generate(context.Background(), c, m.Config.NVocab, prompt, GenerateOptions{EOS: -1, MaxTokens: 24, Sampler: opts, LogProbs: true})
	require.NoError(t, err)
	assert.Equal(t, len(onDevice.Tokens), c.draws, "none with log-probabilities")
	assert.Equal(t, onHost.Tokens, onDevice.Tokens)
	greedy, err := Generate(context.Background(), c, m.Config.NVocab, prompt, GenerateOptions{EOS: -1, MaxTokens: 24, Sampler: DefaultSampler()})
	require.NoError(t, err)
	assert.NotEqual(t, greedy.Tokens, onDevice.Tokens, "a draw at temperature 1, not the argmax")
}
