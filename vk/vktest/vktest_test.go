package vktest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeT is the part of testing.TB that session.open uses, recording what
// happened; FailNow and Skipf end the goroutine as the real ones do.
type fakeT struct {
	testing.TB // nil: anything not below would panic
	failed     bool
	skipped    bool
	log        []string
	cleanups   []func()
}

func (f *fakeT) Helper()                         {}
func (f *fakeT) Name() string                    { return "fake" }
func (f *fakeT) Logf(format string, args ...any) { f.log = append(f.log, fmt.Sprintf(format, args...)) }
func (f *fakeT) Errorf(format string, args ...any) {
	f.failed = true
	f.Logf(format, args...)
}
func (f *fakeT) FailNow() { f.failed = true; runtime.Goexit() }
func (f *fakeT) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	f.FailNow()
}
func (f *fakeT) Skipf(format string, args ...any) {
	f.skipped = true
	f.Logf(format, args...)
	runtime.Goexit()
}
func (f *fakeT) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeT) Failed() bool      { return f.failed }

// openWith runs s.open on a fakeT in a goroutine of its own (Goexit ends it)
// and runs the cleanups, as a test's end would.
func openWith(s *session, open opener) *fakeT {
	f := &fakeT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.open(f, vk.InstanceOptions{}, Restriction{}, open)
	}()
	<-done
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	return f
}

// scripted is an opener that answers with errs in turn (nil: a device,
// here none, as the fake tests need nothing of it) and counts its calls.
type scripted struct {
	errs  []error
	calls int
}

func (o *scripted) open(vk.InstanceOptions, Restriction) (*vk.Instance, *vk.Device, error) {
	err := o.errs[o.calls]
	o.calls++
	return nil, nil, err
}

var (
	noDriver  = fmt.Errorf("vk: vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER: %w", vk.ErrNoVulkan)
	otherFail = fmt.Errorf("vk: vkCreateDevice: VK_ERROR_INITIALIZATION_FAILED")
)

// TestLostVulkanFails: once a device has opened in the process, a later
// attempt that finds no Vulkan fails the test instead of skipping it (as
// NVIDIA's driver refusing vkCreateInstance after ~30 cycles made every
// later test skip).
func TestLostVulkanFails(t *testing.T) {
	var s session
	o := &scripted{errs: []error{nil, noDriver, nil}}
	first := openWith(&s, o.open)
	require.False(t, first.failed, "%v", first.log)
	require.False(t, first.skipped, "%v", first.log)

	lost := openWith(&s, o.open)
	assert.True(t, lost.failed, "a later open that finds no Vulkan fails")
	assert.False(t, lost.skipped, "and is not a skip")
	assert.Contains(t, strings.Join(lost.log, "\n"), "Vulkan is gone")
	assert.Contains(t, strings.Join(lost.log, "\n"), "VK_ERROR_INCOMPATIBLE_DRIVER")

	again := openWith(&s, o.open)
	assert.False(t, again.failed || again.skipped, "the session is not poisoned: %v", again.log)
}

// TestNoVulkanSkips: when the process's first attempt finds no Vulkan, that
// test and every later one skip, without trying again.
func TestNoVulkanSkips(t *testing.T) {
	var s session
	o := &scripted{errs: []error{noDriver}}
	first := openWith(&s, o.open)
	assert.True(t, first.skipped, "%v", first.log)
	assert.False(t, first.failed)
	later := openWith(&s, o.open)
	assert.True(t, later.skipped)
	assert.False(t, later.failed)
	assert.Equal(t, 1, o.calls, "the first attempt decided")
	assert.Contains(t, strings.Join(later.log, "\n"), "first attempt")
}

// TestOtherOpenErrorsFail: an error that is not a missing Vulkan fails the
// test even at the first attempt, and decides nothing: a later attempt
// that finds no Vulkan is then the first to say so, and skips.
func TestOtherOpenErrorsFail(t *testing.T) {
	var s session
	o := &scripted{errs: []error{otherFail, noDriver}}
	first := openWith(&s, o.open)
	assert.True(t, first.failed, "%v", first.log)
	assert.False(t, first.skipped)
	second := openWith(&s, o.open)
	assert.True(t, second.skipped, "%v", second.log)
}

// TestOpen opens the real default device (skipped on a machine without
// Vulkan) and runs a transfer on it.
func TestOpen(t *testing.T) {
	dev := Open(t, vk.InstanceOptions{Validation: true})
	assert.NotEmpty(t, dev.Info().Name)
	buf, err := dev.NewBuffer(8, vk.DeviceLocal)
	require.NoError(t, err)
	defer buf.Close()
	require.NoError(t, buf.Upload([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 0))
	got := make([]byte, 8)
	require.NoError(t, buf.Download(got, 0))
	assert.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8}, got)
}
