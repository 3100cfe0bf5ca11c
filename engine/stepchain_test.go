package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/vulkan"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
	"github.com/modrun/modrun/vk/vktest"
)

// TestLoopChainsBatchedSteps: a Loop on the Vulkan backend's batched step
// runner (LoopOptions.PrefixCache, as serve runs even one stream) chains
// its decode steps (sched.ChainRunner: MODRUN_CHAIN=4) and gives what it
// gives with none (MODRUN_CHAIN=1): for a greedy request met by a stop
// token after its chains began, its continuation (the next turn, served
// from the prefix cache up to blocks its chained steps completed), and a
// plain sampled one (temperature 1, drawn on the device under a GPU's
// profile), each token, its routing bit for bit, the routing counts and
// the end. The calls follow one another, so each step's rows are the
// same in both.
func TestLoopChainsBatchedSteps(t *testing.T) {
	if err := vk.Load(); err != nil {
		t.Skipf("no Vulkan loader: %v", err)
	}
	dev := vktest.Open(t, vk.InstanceOptions{})
	m, err := mod.Open(modTrained)
	require.NoError(t, err)
	defer m.Close()
	own := vulkan.DeviceProfile(dev.Info())
	gpu := shaders.GPUProfile(own.Device)
	gen := func(l *Loop, seq []int32, opts GenerateOptions) routedRun { return generateRouted(t, l, seq, opts) }
	greedy, sampled := DefaultSampler(), DefaultSampler()
	sampled.Temperature, sampled.Seed = 1, 11
	prompt := []int32{1, 403, 407, 261}
	var stop int32 = -1
	calls := func(chain string) ([]routedRun, *vulkan.Stepper) {
		v, err := vulkan.New(dev, m, mod.RoutingRouter, vulkan.Options{DeviceProfile: &gpu, Trace: true, Knobs: vulkan.Knobs{"MODRUN_CHAIN": chain}})
		require.NoError(t, err)
		defer v.Close()
		l, err := NewLoop(&Backend{Runner: gpuRunner{Runner: v, m: m}, Name: "vulkan"}, LoopOptions{ContextLen: m.Config.ContextLen, NVocab: m.Config.NVocab, PrefixCache: true})
		require.NoError(t, err)
		defer l.Close()
		st, ok := l.st.(*vulkan.Stepper)
		require.True(t, ok, "the batched step runner")
		if stop < 0 { // a token met after the chains began: the 14th drawn
			free := gen(l, prompt, GenerateOptions{EOS: -1, MaxTokens: 20, Sampler: greedy})
			stop = free.res.Tokens[13]
			require.NotContains(t, free.res.Tokens[:13], stop)
		}
		first := gen(l, prompt, GenerateOptions{EOS: stop, MaxTokens: 40, Sampler: greedy})
		next := append(append(append([]int32(nil), first.res.Fed...), first.res.Pending...), 13, 500)
		second := gen(l, next, GenerateOptions{EOS: -1, MaxTokens: 9, Sampler: greedy})
		third := gen(l, prompt, GenerateOptions{EOS: -1, MaxTokens: 23, Sampler: sampled})
		return []routedRun{first, second, third}, st
	}
	want, _ := calls("1")
	got, st := calls("4")
	assert.Positive(t, st.Phases().Chains, "chained")
	for i := range want {
		assert.Equal(t, want[i].res.Tokens, got[i].res.Tokens, "call %d: the tokens", i)
		assert.Equal(t, want[i].res.Stop, got[i].res.Stop, "call %d", i)
		assert.Equal(t, want[i].res.RoutingStats, got[i].res.RoutingStats, "call %d: the routing counts", i)
		assert.Equal(t, want[i].tokens, got[i].tokens, "call %d: each token, its routes bit for bit", i)
	}
	assert.Equal(t, StopEOS, got[0].res.Stop)
	assert.Positive(t, got[1].res.CachedTokens, "the continuation served from the prefix cache")
	assert.Len(t, got[2].res.Tokens, 23)
}
