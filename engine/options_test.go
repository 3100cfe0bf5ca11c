package engine

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBackendOptionsCheck: Check refuses each wrong field with an
// OptionError that names it in words (the API) and by its flag (the
// command line), and passes the defaults and every accepted value.
func TestBackendOptionsCheck(t *testing.T) {
	for _, o := range []BackendOptions{
		{Name: BackendAuto}, {Name: BackendCPU, KVType: "f16"}, {Name: BackendReference, KVType: "f32"},
		{Name: BackendVulkan, ContextLen: 100, UBatch: 7, Device: 2},
	} {
		assert.NoError(t, o.Check(), "%+v", o)
	}
	for _, tc := range []struct {
		o          BackendOptions
		err, flags string
	}{
		{BackendOptions{Name: "gpu"}, `backend "gpu" is not auto, cpu, reference or vulkan`, `--backend "gpu" is not auto, cpu, reference or vulkan`},
		{BackendOptions{}, `backend "" is not auto, cpu, reference or vulkan`, `--backend "" is not auto, cpu, reference or vulkan`},
		{BackendOptions{Name: BackendCPU, ContextLen: -1}, "context length -1: must be positive (or 0: the model's)", "--ctx -1: must be positive (or 0: the model's)"},
		{BackendOptions{Name: BackendCPU, UBatch: -3}, "prompt batch (UBatch) -3: must be positive (or 0: the backend's default)", "--ubatch -3: must be positive (or 0: the backend's default)"},
		{BackendOptions{Name: BackendVulkan, KVType: "q8"}, `KV type "q8" is not f16 or f32`, `--kv-type "q8" is not f16 or f32`},
	} {
		err := tc.o.Check()
		var oe *OptionError
		require.True(t, errors.As(err, &oe), "%+v: %v", tc.o, err)
		assert.EqualError(t, err, tc.err)
		assert.Equal(t, tc.flags, oe.FlagError())
	}
}
