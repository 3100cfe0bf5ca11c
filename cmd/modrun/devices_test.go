package main

import (
	"encoding/json"
	"errors"
	"regexp"
	"testing"

	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// needVulkan skips t when this machine has no Vulkan device.
func needVulkan(t *testing.T) {
	t.Helper()
	inst, err := vk.NewInstance(vk.InstanceOptions{})
	if errors.Is(err, vk.ErrNoVulkan) {
		t.Skipf("no Vulkan on this machine: %v", err)
	}
	require.NoError(t, err)
	defer inst.Close()
	devs, err := inst.Devices()
	require.NoError(t, err)
	if len(devs) == 0 {
		t.Skip("no Vulkan device on this machine")
	}
}

func TestDevices(t *testing.T) {
	needVulkan(t)
	t.Setenv(vk.EnvDevice, "")
	code, out, stderr := modrun(t, "devices")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `(?m)^\* 0: .+  \(default( for --backend vulkan)?\)$`, out, "the default device is marked")
	assert.Regexp(t, `(?m)^default: 0, the (only usable device|first usable .+ device, in the order discrete.*)`, out, "and why it is the default")
	assert.Regexp(t, `(?m)^    subgroups: +(every dispatch gets \d+|size not sure)`, out, "the subgroup size the kernels count on")
	// Where auto runs: lavapipe is a CPU emulation, which auto leaves for
	// the CPU backend, and the list says so rather than call it the default.
	if regexp.MustCompile(`(?m)^\* 0: .+\n    type: +cpu$`).MatchString(out) {
		assert.Contains(t, out, "* 0: llvmpipe")
		assert.Regexp(t, `(?m)^\* 0: .+  \(default for --backend vulkan\)$`, out)
		assert.Contains(t, out, "\n--backend auto: runs on the CPU backend (device 0 is a CPU emulation, slower than it; --backend vulkan or --device 0 uses it)\n")
	} else {
		assert.Contains(t, out, "\n--backend auto: runs on device 0\n")
	}
	for _, want := range []string{"type:", "driver:", "vulkan:", "memory:", "device-local", "shared memory",
		"per binding", "push constants", "subgroup", "features:", "float16"} {
		assert.Contains(t, out, want)
	}

	code, out, stderr = modrun(t, "devices", "--json")
	require.Equal(t, 0, code, stderr)
	var r struct {
		Devices []struct {
			Index      int    `json:"index"`
			Name       string `json:"name"`
			Type       string `json:"type"`
			APIVersion string `json:"api_version"`
			Default    bool   `json:"default"`
			Limits     struct {
				MaxStorageBufferRange uint64 `json:"max_storage_buffer_range"`
				SubgroupSize          uint32 `json:"subgroup_size"`
			} `json:"limits"`
			Features map[string]bool `json:"features"`
		} `json:"devices"`
		Default *int `json:"default"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.NotEmpty(t, r.Devices)
	require.NotNil(t, r.Default)
	d := r.Devices[*r.Default]
	assert.True(t, d.Default)
	assert.NotEmpty(t, d.Name)
	assert.Regexp(t, `^1\.\d+\.\d+$`, d.APIVersion)
	assert.NotZero(t, d.Limits.MaxStorageBufferRange)
	assert.Contains(t, d.Features, "shader_float16")
}

func TestDevicesBadEnvAndArgs(t *testing.T) {
	needVulkan(t)
	t.Setenv(vk.EnvDevice, "99")
	code, out, stderr := modrun(t, "devices")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "default: none (vk: MODRUN_DEVICE 99: no such device")
	assert.NotContains(t, out, "(default)")
	assert.NotContains(t, out, "default: 0")

	t.Setenv(vk.EnvDevice, "0")
	code, out, stderr = modrun(t, "devices")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "default: 0, MODRUN_DEVICE=0")

	code, _, stderr = modrun(t, "devices", "extra")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "devices takes no arguments")
}
