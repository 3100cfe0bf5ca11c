// Package vktest opens a Vulkan device for tests of packages that use vk:
// the default device, with the Khronos validation layer when asked for and
// installed, skipping the test when the machine has no Vulkan, and failing it
// at cleanup on any validation message.
package vktest

import (
	"errors"
	"testing"

	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Open opens the default device with opts. Benchmarks pass no validation:
// the layer's checks would be timed too.
func Open(t testing.TB, opts vk.InstanceOptions) *vk.Device {
	t.Helper()
	return OpenRestricted(t, opts, Restriction{})
}

// OpenRestricted is Open with the device made smaller by r
// (Restriction.Apply): features off, limits lowered, as a smaller GPU
// would have them.
func OpenRestricted(t testing.TB, opts vk.InstanceOptions, r Restriction) *vk.Device {
	t.Helper()
	opts.Validation = opts.Validation && vk.HasValidationLayer()
	inst, err := vk.NewInstance(opts)
	if errors.Is(err, vk.ErrNoVulkan) {
		t.Skipf("no Vulkan on this machine: %v", err)
	}
	require.NoError(t, err)
	devs, err := inst.Devices()
	require.NoError(t, err)
	info, err := vk.ChooseDevice(devs, -1)
	if errors.Is(err, vk.ErrNoVulkan) {
		inst.Close()
		t.Skipf("no usable Vulkan device: %v", err)
	}
	require.NoError(t, err)
	info, err = r.Apply(info)
	require.NoError(t, err)
	dev, err := inst.NewDevice(info)
	require.NoError(t, err)
	if !vk.HasValidationLayer() {
		t.Logf("the validation layer is not installed (Debian: vulkan-validationlayers): running without it")
	}
	t.Cleanup(func() {
		dev.Close()
		inst.Close()
		assert.Empty(t, inst.ValidationMessages(), "validation layer messages")
	})
	return dev
}
