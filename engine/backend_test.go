package engine

import (
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBackendContextAndKV: BackendOptions.ContextLen sizes the runner (the
// default is the model's context, at most DefaultMaxContext), out-of-range
// values and unknown KV cache types are refused, and the CPU runner stops
// at the context length it was given.
func TestBackendContextAndKV(t *testing.T) {
	m, err := mod.Open(benchModel)
	require.NoError(t, err)
	defer m.Close()
	model := m.Config.ContextLen

	o := BackendOptions{Name: BackendCPU}
	ctx, err := o.contextLen(m)
	require.NoError(t, err)
	assert.Equal(t, min(model, DefaultMaxContext), ctx)
	big := *m
	big.Config.ContextLen = 32768
	ctx, err = o.contextLen(&big)
	require.NoError(t, err)
	assert.Equal(t, DefaultMaxContext, ctx, "a long-context model is capped by default")
	big.Config.ContextLen = 32768
	o.ContextLen = 8192
	ctx, err = o.contextLen(&big)
	require.NoError(t, err)
	assert.Equal(t, 8192, ctx, "asked for: more than the default cap")

	for _, bad := range []BackendOptions{{Name: BackendCPU, ContextLen: model + 1}, {Name: BackendCPU, ContextLen: -1}, {Name: BackendCPU, KVType: "q8"}} {
		_, _, err := OpenBackend(m, mod.RoutingRouter, bad)
		assert.Error(t, err, "%+v", bad)
	}

	b, _, err := OpenBackend(m, mod.RoutingRouter, BackendOptions{Name: BackendCPU, ContextLen: 3, KVType: "f16"})
	require.NoError(t, err)
	defer b.Close()
	assert.Equal(t, 3, b.ContextLen())
	_, err = b.Feed([]int32{1, 2, 3})
	require.NoError(t, err)
	_, err = b.Feed([]int32{4})
	assert.ErrorContains(t, err, "context length 3")
}
