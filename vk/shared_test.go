package vk

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openCycle opens an instance handle and the default device, allocates a
// buffer (with roundTrip, uploads and reads back a few bytes through it),
// and closes them: what a program that opens and closes a model does to
// vk.
func openCycle(t *testing.T, opts InstanceOptions, i int, roundTrip bool) {
	t.Helper()
	inst, err := NewInstance(opts)
	if errors.Is(err, ErrNoVulkan) {
		noVulkan(t, err)
	}
	require.NoError(t, err, "open %d", i)
	defer inst.Close()
	devs, err := inst.Devices()
	require.NoError(t, err)
	info, err := ChooseDevice(devs, -1)
	if errors.Is(err, ErrNoVulkan) {
		noVulkan(t, err)
	}
	require.NoError(t, err)
	dev, err := inst.NewDevice(info)
	require.NoError(t, err, "open %d", i)
	deviceOpened.Store(true)
	defer dev.Close()
	buf, err := dev.NewBuffer(16, DeviceLocal)
	require.NoError(t, err)
	defer buf.Close()
	if !roundTrip {
		return
	}
	want := f32bytesU32(uint32(i), 1, 2, 3)
	require.NoError(t, buf.Upload(want, 0))
	got := make([]byte, 16)
	require.NoError(t, buf.Download(got, 0))
	require.Equal(t, want, got)
}

// TestOneInstancePerProcess: opening and closing a device 1,000 times, each
// with its own NewInstance and Close, creates at most one Vulkan instance
// (none when an earlier test of the process made it), as NVIDIA's driver
// refuses vkCreateInstance after ~30 create/destroy cycles; every Close
// frees what its device held. One device stays open meanwhile (a resident
// model beside the ones that come and go), so the 1,000 share its VkDevice:
// creating a VkDevice takes long on an H200 (1,000 of them did not fit in
// 20 s there), and TestDeviceCycles makes and destroys them.
func TestOneInstancePerProcess(t *testing.T) {
	opts := InstanceOptions{} // the engine's: no validation layer
	resident := openDeviceWith(t, opts)
	before, live, devices := InstancesCreated(), LiveObjects(), DevicesCreated()
	openCycle(t, opts, 0, true)
	first := InstancesCreated()
	assert.LessOrEqual(t, first-before, 1)
	for i := 1; i < 1000; i++ {
		openCycle(t, opts, i, i%100 == 0)
	}
	assert.Equal(t, first, InstancesCreated(), "999 more opens made no instance")
	assert.Equal(t, devices, DevicesCreated(), "each open shared the resident device's VkDevice")
	assert.Equal(t, live, LiveObjects(), "every device and buffer closed")
	require.NoError(t, axpyRounds(resident, readSPIRV(t, "axpy.spv"), 1), "the resident device works on")
	t.Logf("instances created in this process: %d; VkDevices: %d", InstancesCreated(), DevicesCreated())

	// The validation layer's instance is another, made once too.
	validating := InstancesCreated()
	for i := 0; i < 3; i++ {
		inst, err := NewInstance(InstanceOptions{Validation: true})
		require.NoError(t, err)
		inst.Close()
	}
	assert.LessOrEqual(t, InstancesCreated()-validating, 1)
}

// TestDeviceCycles: with nothing else open on it, each open of the device
// creates a VkDevice and its Close destroys it (LiveObjects back, one
// DevicesCreated per open), on the one instance. It logs what a VkDevice
// costs to create and destroy here.
func TestDeviceCycles(t *testing.T) {
	const cycles = 8
	opts := InstanceOptions{Validation: true}
	openCycle(t, opts, 0, true) // the instance, made once
	instances, devices, live := InstancesCreated(), DevicesCreated(), LiveObjects()
	start := time.Now()
	for i := 0; i < cycles; i++ {
		openCycle(t, opts, i, true)
	}
	t.Logf("%d opens and closes with a VkDevice each: %v per open", cycles, time.Since(start)/cycles)
	assert.Equal(t, instances, InstancesCreated())
	assert.Equal(t, devices+cycles, DevicesCreated(), "one VkDevice per open: the last Close destroyed each")
	assert.Equal(t, live, LiveObjects())
}

// TestClosedInstanceHandle: a closed handle lists and opens nothing (the
// instance it named lives on for other handles).
func TestClosedInstanceHandle(t *testing.T) {
	dev := openDevice(t)
	inst, err := NewInstance(InstanceOptions{Validation: dev.inst.Validating()})
	require.NoError(t, err)
	devs, err := inst.Devices()
	require.NoError(t, err)
	inst.Close()
	_, err = inst.Devices()
	assert.ErrorContains(t, err, "closed")
	_, err = inst.NewDevice(devs[dev.Info().Index])
	assert.ErrorContains(t, err, "closed")
	_, err = dev.inst.Devices()
	assert.NoError(t, err, "another handle on the same instance still works")
}

// TestDevicesShareVkDevice: two Devices open at once on the same physical
// device with the same features share one VkDevice, work concurrently
// (their submits serialized on the shared queue: run with -race), and the
// VkDevice outlives the first Close; a device with a feature turned off is
// a VkDevice of its own.
func TestDevicesShareVkDevice(t *testing.T) {
	a := openDevice(t)
	before := DevicesCreated()
	b, err := a.inst.NewDevice(a.Info())
	require.NoError(t, err)
	assert.Equal(t, before, DevicesCreated(), "b shares a's VkDevice")
	assert.Same(t, a.shared, b.shared)

	spirv := readSPIRV(t, "axpy.spv")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, d := range []*Device{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = axpyRounds(d, spirv, 20)
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])

	b.Close()
	require.NoError(t, axpyRounds(a, spirv, 1), "a works on after b closed")

	if a.Info().Features.ShaderFloat16 {
		info := a.Info()
		info.Features.ShaderFloat16 = false
		c, err := a.inst.NewDevice(info)
		require.NoError(t, err)
		assert.Equal(t, before+1, DevicesCreated(), "features differ: another VkDevice")
		assert.NotSame(t, a.shared, c.shared)
		c.Close()
	}
}

// axpyRounds runs y += x on d n times and checks y.
func axpyRounds(d *Device, spirv []byte, n int) error {
	k, err := d.NewKernel(spirv, KernelSpec{Name: "axpy", Bindings: 2, PushConstantBytes: 8, Specialization: []uint32{64, 0x3f800000}})
	if err != nil {
		return err
	}
	defer k.Close()
	const m = 256
	x, err := d.NewBuffer(4*m, DeviceLocal)
	if err != nil {
		return err
	}
	defer x.Close()
	y, err := d.NewBuffer(4*m, DeviceLocal)
	if err != nil {
		return err
	}
	defer y.Close()
	xs := make([]float32, m)
	for i := range xs {
		xs[i] = float32(i)
	}
	if err := x.Upload(f32bytes(xs), 0); err != nil {
		return err
	}
	r := d.NewRecorder()
	defer r.Close()
	r.Fill(y, 0, 4*m, 0)
	for i := 0; i < n; i++ {
		r.Dispatch(k, MustPackPush(axpyPush{N: m, Scale: 1}), [3]uint32{m / 64, 1, 1},
			Bind{Buf: x, Access: Read}, Bind{Buf: y, Access: ReadWrite})
	}
	if err := d.Run(r); err != nil {
		return err
	}
	got := make([]byte, 4*m)
	if err := y.Download(got, 0); err != nil {
		return err
	}
	for i, v := range bytesF32(got) {
		if v != float32(n)*xs[i] {
			return errors.New("axpy: wrong sum")
		}
	}
	return nil
}
