package engine

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/synthtest"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/synth"
)

// An interrupt between windows returns what was scored, with ctx's error
// (bench's TestCompareInterrupted: the comparison).
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

	m, err := synth.Build(synthtest.Tiny, synth.Options{Seed: 5, Capacity: 0.25, Type: gguf.TypeF32})
	require.NoError(t, err)
	defer m.Close()
	w, err := PerplexityOptions{Routing: mod.RoutingTopK, Capacity: &half}.Apply(m.Model)
	require.NoError(t, err)
	assert.Equal(t, synthtest.Tiny.ContextLen, w, "0: the model's context length")
	assert.Equal(t, float32(0.5), m.Config.Capacity)
	_, err = PerplexityOptions{Window: synthtest.Tiny.ContextLen + 1, Routing: mod.RoutingTopK}.Apply(m.Model)
	var oe *OptionError
	require.ErrorAs(t, err, &oe)
	assert.Contains(t, oe.Error(), "Window 129: must be in [2, 128] (the context length of")
}
