package vk

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOutOfMemory: an allocation past Device.MemoryLimit fails with an
// *OutOfMemoryError that says what was asked and what was held, and the
// live counts follow every buffer made and closed.
func TestOutOfMemory(t *testing.T) {
	dev := openDevice(t)
	before := LiveObjects()
	dev.MemoryLimit = 1 << 20
	a, err := dev.NewBuffer(512<<10, DeviceLocal)
	require.NoError(t, err)
	assert.Equal(t, Live{Devices: before.Devices, Buffers: before.Buffers + 1, Bytes: before.Bytes + 512<<10}, LiveObjects())

	_, err = dev.NewBuffer(768<<10, HostVisible)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, OutOfMemoryError{Kind: HostVisible, Asked: 768 << 10, Held: 512 << 10, Heap: dev.Info().DeviceLocalBytes, Limit: 1 << 20,
		Err: &Error{Call: "vkAllocateMemory", Result: ErrorOutOfDeviceMemory}}, *oom)
	assert.EqualError(t, err, "vk: out of GPU memory: a host-visible buffer of 768.0 KiB did not fit "+
		"(Device.MemoryLimit is 1.0 MiB, 512.0 KiB of it held already): vk: vkAllocateMemory: VK_ERROR_OUT_OF_DEVICE_MEMORY")
	assert.Equal(t, before.Buffers+1, LiveObjects().Buffers, "nothing made by the failed call")

	a.Close()
	b, err := dev.NewBuffer(768<<10, HostVisible)
	require.NoError(t, err, "room again once a is closed")
	b.Close()
	assert.Equal(t, before, LiveObjects())
}

// TestFaultBreaksDevice: a lost device or a fence wait that timed out is an
// error naming the result, and every later submit, upload or download
// returns it at once instead of waiting on a GPU in an unknown state.
func TestFaultBreaksDevice(t *testing.T) {
	for _, c := range []struct {
		r    Result
		says string
	}{
		{ErrorDeviceLost, "VK_ERROR_DEVICE_LOST: the GPU stopped"},
		{Timeout, "VK_TIMEOUT: the GPU did not finish within Device.Timeout (5m0s)"},
	} {
		t.Run(c.r.String(), func(t *testing.T) {
			dev := openDevice(t)
			buf := newBuffer(t, dev, 64, DeviceLocal)
			host := newBuffer(t, dev, 64, HostVisible)
			require.NoError(t, buf.Upload(make([]byte, 64), 0))
			InjectFault(c.r)
			err := buf.Upload(make([]byte, 64), 0)
			require.Error(t, err)
			assert.ErrorContains(t, err, c.says)
			var vkErr *Error
			require.True(t, errors.As(err, &vkErr))
			assert.Equal(t, c.r, vkErr.Result)

			start := time.Now()
			for _, again := range []error{buf.Upload(make([]byte, 4), 0), buf.Download(make([]byte, 4), 0), host.Download(make([]byte, 4), 0)} {
				assert.Equal(t, err, again, "the same error, at once")
			}
			assert.Less(t, time.Since(start), time.Second)
		})
	}
}

// TestHeapIsALimit: device-local buffers past the device's heap fail with
// an *OutOfMemoryError before the driver is asked (which would take it as
// invalid usage, or, lavapipe, take host memory until the system runs out).
func TestHeapIsALimit(t *testing.T) {
	dev := openDevice(t)
	heap := dev.Info().DeviceLocalBytes
	if heap == 0 {
		t.Skip("the device reports no device-local heap")
	}
	held := newBuffer(t, dev, 1<<20, DeviceLocal)
	_, err := dev.NewBuffer(heap, DeviceLocal)
	var oom *OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, heap, oom.Asked)
	assert.Equal(t, held.Size(), oom.Held)
	assert.ErrorContains(t, err, "a device-local buffer of "+Bytes(heap)+" did not fit (the device's memory heap is "+Bytes(heap)+", 1.0 MiB of it held already)")
}
