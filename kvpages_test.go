package modrun_test

import (
	"context"
	"testing"

	"github.com/modrun/modrun"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKVPages: a model with a page pool reports its pages, some in use
// while a session generates; one without reports none.
func TestKVPages(t *testing.T) {
	inUse, total, bt := open(t, modrun.Options{Backend: modrun.BackendCPU}).KVPages()
	assert.Equal(t, [3]int{0, 0, 0}, [3]int{inUse, total, bt}, "no pool: sessions take turns on one cache")

	m := open(t, modrun.Options{Backend: modrun.BackendCPU, Parallel: 2})
	inUse, total, bt = m.KVPages()
	assert.Zero(t, inUse)
	assert.Positive(t, total)
	assert.Positive(t, bt)
	held := 0
	_, err := m.NewSession().Generate(context.Background(), "Once upon a time", modrun.GenerateOptions{MaxTokens: 40}, func(tk modrun.Token) error {
		if tk.Pos == 40 {
			held, _, _ = m.KVPages()
		}
		return nil
	})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, held, 40/bt, "40 tokens fill at least %d pages of %d tokens", 40/bt, bt)
}

// TestSteps: the loop's steps are counted; on the CPU none is chained,
// on Vulkan with the prefix cache (the batched step runner, as serve runs
// it) a greedy generation's decode steps run chained, several a
// submission (MODRUN_CHAIN's default).
func TestSteps(t *testing.T) {
	m := open(t, modrun.Options{Backend: modrun.BackendCPU, Parallel: 2})
	_, err := m.NewSession().Generate(context.Background(), "Once upon a time", modrun.GenerateOptions{MaxTokens: 20}, nil)
	require.NoError(t, err)
	steps, chained := m.Steps()
	assert.GreaterOrEqual(t, steps, 20)
	assert.Zero(t, chained)

	if err := vk.Load(); err != nil {
		t.Skipf("no Vulkan loader: %v", err)
	}
	v, err := modrun.Open(shipped, modrun.Options{Backend: modrun.BackendVulkan, PrefixCache: true})
	if err != nil {
		t.Skipf("no Vulkan device: %v", err)
	}
	t.Cleanup(func() { assert.NoError(t, v.Close()) })
	_, err = v.NewSession().Generate(context.Background(), "Once upon a time", modrun.GenerateOptions{MaxTokens: 20}, nil)
	require.NoError(t, err)
	steps, chained = v.Steps()
	assert.GreaterOrEqual(t, steps, 20)
	assert.Positive(t, chained, "decode steps chained on the batched step runner")
	assert.Less(t, chained, steps, "the prompt's step and the first decode step are not")
}
