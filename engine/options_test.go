package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBackendOptionsCheck: Check refuses each wrong field with an
// OptionError that names its field (the API) and, by Named, its flag (the
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
		{BackendOptions{Name: "gpu"}, `Name "gpu" is not auto, cpu, reference or vulkan`, `--backend "gpu" is not auto, cpu, reference or vulkan`},
		{BackendOptions{}, `Name "" is not auto, cpu, reference or vulkan`, `--backend "" is not auto, cpu, reference or vulkan`},
		{BackendOptions{Name: BackendCPU, ContextLen: -1}, "ContextLen -1: must be positive (or 0: the model's)", "--ctx -1: must be positive (or 0: the model's)"},
		{BackendOptions{Name: BackendCPU, UBatch: -3}, "UBatch -3: must be positive (or 0: the backend's default)", "--ubatch -3: must be positive (or 0: the backend's default)"},
		{BackendOptions{Name: BackendVulkan, KVType: "q8"}, `KVType "q8" is not f16 or f32`, `--kv-type "q8" is not f16 or f32`},
	} {
		err := tc.o.Check()
		var oe *OptionError
		require.True(t, errors.As(err, &oe), "%+v: %v", tc.o, err)
		assert.EqualError(t, err, tc.err)
		assert.Equal(t, tc.flags, oe.Named(strings.SplitN(tc.flags, " ", 2)[0]))
	}
}

// TestBackendOptionsCheckFlags: what only a command line's flags have is
// refused naming the flag: a --device none of the backends can use, and a
// --ubatch under 1 where the command has the flag; Check's own errors come
// first, and the API's UBatch 0 (the default) passes without the flag.
func TestBackendOptionsCheckFlags(t *testing.T) {
	for _, tc := range []struct {
		o BackendOptions
		f Flags
	}{
		{BackendOptions{Name: BackendCPU, Device: -1}, Flags{Backends: []string{BackendCPU}}},
		{BackendOptions{Name: BackendAuto, Device: 0}, Flags{Backends: []string{BackendAuto}}},
		{BackendOptions{Name: BackendCPU, Device: 1}, Flags{Backends: []string{BackendCPU, BackendVulkan}}},
		{BackendOptions{Name: BackendCPU, Device: -1, UBatch: 1}, Flags{UBatch: true}},
		{BackendOptions{Name: BackendCPU, Device: -1}, Flags{}},
	} {
		assert.NoError(t, tc.o.CheckFlags(tc.f), "%+v %+v", tc.o, tc.f)
	}
	for _, tc := range []struct {
		o          BackendOptions
		f          Flags
		err, flags string
	}{
		{BackendOptions{Name: BackendCPU, Device: 0}, Flags{Backends: []string{BackendCPU}},
			"Device 0 picks a Vulkan device, but the backend is cpu: drop --device, or use --backend vulkan",
			"--device 0 picks a Vulkan device, but the backend is cpu: drop --device, or use --backend vulkan"},
		{BackendOptions{Name: BackendReference, Device: 2}, Flags{},
			"Device 2 picks a Vulkan device, but the backend is reference: drop --device, or use --backend vulkan",
			"--device 2 picks a Vulkan device, but the backend is reference: drop --device, or use --backend vulkan"},
		{BackendOptions{Name: BackendCPU, Device: 3}, Flags{Backends: []string{BackendCPU, BackendReference}},
			"Device 3 picks a Vulkan device, but the backend is cpu,reference: drop --device, or use --backend vulkan",
			"--device 3 picks a Vulkan device, but the backend is cpu,reference: drop --device, or use --backend vulkan"},
		{BackendOptions{Name: BackendAuto}, Flags{UBatch: true},
			"UBatch 0: must be at least 1", "--ubatch 0: must be at least 1"},
		{BackendOptions{Name: BackendVulkan, Device: -4}, Flags{Backends: []string{BackendVulkan}},
			"Device -4: want a device index, 0 or more (modrun devices lists them), or -1 for the default",
			"--device -4: want a device index, 0 or more (modrun devices lists them), or -1 for the default"},
		{BackendOptions{Name: BackendAuto, UBatch: -2}, Flags{UBatch: true},
			"UBatch -2: must be positive (or 0: the backend's default)", "--ubatch -2: must be positive (or 0: the backend's default)"},
	} {
		err := tc.o.CheckFlags(tc.f)
		var oe *OptionError
		require.True(t, errors.As(err, &oe), "%+v %+v: %v", tc.o, tc.f, err)
		assert.EqualError(t, err, tc.err)
		assert.Equal(t, tc.flags, oe.Named(strings.SplitN(tc.flags, " ", 2)[0]))
	}
}

// TestParseBackends: bench's --backends is a comma-separated list of cpu,
// reference and vulkan (spaces around a name dropped); anything else,
// auto and an empty name included, is an OptionError naming the flag.
func TestParseBackends(t *testing.T) {
	names, err := ParseBackends("cpu, vulkan,reference")
	require.NoError(t, err)
	assert.Equal(t, []string{BackendCPU, BackendVulkan, BackendReference}, names)
	for _, tc := range []struct{ list, bad string }{{"cpu,gpu", "gpu"}, {"auto", "auto"}, {"cpu,", ""}} {
		_, err := ParseBackends(tc.list)
		var oe *OptionError
		require.True(t, errors.As(err, &oe), "%q: %v", tc.list, err)
		assert.EqualError(t, err, `Backends: "`+tc.bad+`" is not cpu, reference or vulkan`)
		assert.Equal(t, `--backends: "`+tc.bad+`" is not cpu, reference or vulkan`, oe.Named("--backends"))
	}
}
