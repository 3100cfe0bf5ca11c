// Package vktest opens a Vulkan device for tests of packages that use vk:
// the default device, with the Khronos validation layer when asked for and
// installed, and failing the test at cleanup on any validation message.
//
// A test is skipped for want of Vulkan only when the process's first
// attempt to open a device found none (a machine without Vulkan); once a
// device has opened, a later failure to open one fails the test (a lost
// Vulkan, such as a driver that stopped creating instances, is a bug to
// see, not a skip).
package vktest

import (
	"errors"
	"sync"
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
	return process.open(t, opts, r, openDefault)
}

// opener opens the default device made smaller by r, or says why not: an
// error wrapping vk.ErrNoVulkan when there is no Vulkan or no usable device.
// It closes whatever it made when it fails.
type opener func(opts vk.InstanceOptions, r Restriction) (*vk.Instance, *vk.Device, error)

func openDefault(opts vk.InstanceOptions, r Restriction) (*vk.Instance, *vk.Device, error) {
	inst, err := vk.NewInstance(opts)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*vk.Instance, *vk.Device, error) { inst.Close(); return nil, nil, err }
	devs, err := inst.Devices()
	if err != nil {
		return fail(err)
	}
	info, err := vk.ChooseDevice(devs, -1)
	if err != nil {
		return fail(err)
	}
	if info, err = r.Apply(info); err != nil {
		return fail(err)
	}
	dev, err := inst.NewDevice(info)
	if err != nil {
		return fail(err)
	}
	return inst, dev, nil
}

// session remembers what the process's first attempt found.
type session struct {
	mu     sync.Mutex
	opened bool  // a device has opened
	absent error // the first attempt found no Vulkan (wraps vk.ErrNoVulkan)
}

// process is the test binary's session.
var process session

func (s *session) open(t testing.TB, opts vk.InstanceOptions, r Restriction, open opener) *vk.Device {
	t.Helper()
	opts.Validation = opts.Validation && vk.HasValidationLayer()
	s.mu.Lock()
	absent := s.absent
	s.mu.Unlock()
	if absent != nil {
		t.Skipf("no Vulkan on this machine (the first attempt of this process found none): %v", absent)
	}
	inst, dev, err := open(opts, r)
	if err != nil {
		s.mu.Lock()
		first := !s.opened && s.absent == nil
		if first && errors.Is(err, vk.ErrNoVulkan) {
			s.absent = err
		}
		s.mu.Unlock()
		switch {
		case first && errors.Is(err, vk.ErrNoVulkan):
			t.Skipf("no Vulkan on this machine: %v", err)
		case errors.Is(err, vk.ErrNoVulkan):
			t.Fatalf("vktest: Vulkan is gone: an earlier test of this process opened a device, now: %v", err)
		}
		require.NoError(t, err)
	}
	s.mu.Lock()
	s.opened = true
	s.mu.Unlock()
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
