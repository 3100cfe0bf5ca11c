package vk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

//go:generate glslc --target-env=vulkan1.2 -O -o testdata/subgroup_size.spv testdata/subgroup_size.comp

func TestSubgroupSizeSpirvIsFresh(t *testing.T) {
	glslc, err := exec.LookPath("glslc")
	if err != nil {
		t.Skip("glslc is not installed (Debian: glslc): cannot check testdata/subgroup_size.spv")
	}
	out := filepath.Join(t.TempDir(), "subgroup_size.spv")
	msg, err := exec.Command(glslc, "--target-env=vulkan1.2", "-O", "-o", out, "testdata/subgroup_size.comp").CombinedOutput()
	require.NoError(t, err, "%s", msg)
	fresh, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(fresh, readSPIRV(t, "subgroup_size.spv")), "testdata/subgroup_size.spv is stale: run go generate ./vk")
}

// openEdited opens the default device as edit makes its DeviceInfo (a
// feature off: a smaller device; see openDevice), or skips t when this
// machine has no Vulkan.
// deviceOpened: a test of this process has opened a device. After that, no
// Vulkan is a failure, not a skip (vktest's rule; vk's tests cannot import
// vktest).
var deviceOpened atomic.Bool

func noVulkan(t testing.TB, err error) {
	t.Helper()
	if deviceOpened.Load() {
		t.Fatalf("Vulkan is gone: an earlier test of this process opened a device, now: %v", err)
	}
	t.Skipf("no Vulkan on this machine: %v", err)
}

func openEdited(t testing.TB, opts InstanceOptions, edit func(*DeviceInfo)) *Device {
	t.Helper()
	inst, err := NewInstance(opts)
	if errors.Is(err, ErrNoVulkan) {
		noVulkan(t, err)
	}
	require.NoError(t, err)
	devs, err := inst.Devices()
	require.NoError(t, err)
	info, err := ChooseDevice(devs, -1)
	if errors.Is(err, ErrNoVulkan) {
		inst.Close()
		noVulkan(t, err)
	}
	require.NoError(t, err)
	if edit != nil {
		edit(&info)
	}
	dev, err := inst.NewDevice(info)
	require.NoError(t, err)
	deviceOpened.Store(true)
	if opts.Validation && !inst.Validating() {
		t.Logf("the validation layer is not installed (Debian: vulkan-validationlayers): running without it")
	}
	t.Cleanup(func() {
		if t.Failed() {
			return // keep the first failure's story short
		}
		dev.Close()
		inst.Close()
		assert.Empty(t, inst.ValidationMessages(), "validation layer messages")
	})
	return dev
}

// subgroupsGot runs testdata/subgroup_size.comp with workgroups of wg and a
// required size, and returns the (size, subgroups) pairs it saw.
func subgroupsGot(t *testing.T, dev *Device, wg, required uint32) map[[2]uint32]int {
	t.Helper()
	k, err := dev.NewKernel(readSPIRV(t, "subgroup_size.spv"), KernelSpec{Name: "subgroup_size", Bindings: 1,
		PushConstantBytes: 4, Specialization: []uint32{wg}, RequiredSubgroupSize: required})
	require.NoError(t, err)
	defer k.Close()
	const n = 256
	out := newBuffer(t, dev, 8*n, HostVisible)
	rec := dev.NewRecorder()
	defer rec.Close()
	rec.Dispatch(k, MustPackPush(struct{ N uint32 }{n}), [3]uint32{n / wg, 1, 1}, Bind{Buf: out, Access: Write})
	require.NoError(t, dev.Run(rec))
	raw := make([]byte, 8*n)
	require.NoError(t, out.Download(raw, 0))
	seen := map[[2]uint32]int{}
	for i := 0; i < n; i++ {
		seen[[2]uint32{binary.LittleEndian.Uint32(raw[8*i:]), binary.LittleEndian.Uint32(raw[8*i+4:])}]++
	}
	return seen
}

// A kernel that requires the device's one compute subgroup size gets it,
// full, under validation; a size outside the declared range is refused
// before Vulkan sees it, naming the range.
func TestRequiredSubgroupSize(t *testing.T) {
	dev := openDevice(t)
	info := dev.Info()
	size := info.Limits.MinSubgroupSize
	if err := info.CanRequireSubgroupSize(size); err != nil {
		t.Skipf("the device cannot require a subgroup size: %v", err)
	}
	const wg = 64
	got := subgroupsGot(t, dev, wg, size)
	assert.Equal(t, map[[2]uint32]int{{size, wg / size}: 256}, got, "every invocation saw the required size")

	_, err := dev.NewKernel(readSPIRV(t, "subgroup_size.spv"), KernelSpec{Name: "subgroup_size", Bindings: 1,
		PushConstantBytes: 4, Specialization: []uint32{wg}, RequiredSubgroupSize: 2 * info.Limits.MaxSubgroupSize})
	assert.ErrorContains(t, err, "not a power of two in the device's compute range")
	assert.ErrorContains(t, err, `kernel "subgroup_size"`)
}

// Without subgroup size control (forced off) a required size is refused:
// the engine must then pick a kernel that does not depend on the size.
func TestRequiredSubgroupSizeWithoutControl(t *testing.T) {
	dev := openEdited(t, InstanceOptions{Validation: true}, func(d *DeviceInfo) {
		d.Features.SubgroupSizeControl, d.Features.ComputeFullSubgroups = false, false
		d.Limits.RequiredSubgroupSizeCompute = false
	})
	assert.False(t, dev.Info().Features.SubgroupSizeControl)
	_, err := dev.NewKernel(readSPIRV(t, "subgroup_size.spv"), KernelSpec{Name: "subgroup_size", Bindings: 1,
		PushConstantBytes: 4, Specialization: []uint32{64}, RequiredSubgroupSize: dev.Info().Limits.SubgroupSize})
	assert.ErrorContains(t, err, "no subgroupSizeControl")
	got := subgroupsGot(t, dev, 64, 0) // no requirement: still runs
	assert.Len(t, got, 1)
}

func TestCanRequireSubgroupSize(t *testing.T) {
	ok := DeviceInfo{Features: Features{SubgroupSizeControl: true, ComputeFullSubgroups: true},
		Limits: Limits{MinSubgroupSize: 8, MaxSubgroupSize: 32, RequiredSubgroupSizeCompute: true}}
	for _, c := range []struct {
		name string
		edit func(*DeviceInfo)
		size uint32
		want string // "" when allowed
	}{
		{"in range", func(*DeviceInfo) {}, 16, ""},
		{"lowest", func(*DeviceInfo) {}, 8, ""},
		{"below the range", func(*DeviceInfo) {}, 4, "compute range [8, 32]"},
		{"above the range", func(*DeviceInfo) {}, 64, "compute range [8, 32]"},
		{"not a power of two", func(*DeviceInfo) {}, 24, "not a power of two"},
		{"no size control", func(d *DeviceInfo) { d.Features.SubgroupSizeControl = false }, 16, "no subgroupSizeControl"},
		{"no full subgroups", func(d *DeviceInfo) { d.Features.ComputeFullSubgroups = false }, 16, "no computeFullSubgroups"},
		{"not for compute", func(d *DeviceInfo) { d.Limits.RequiredSubgroupSizeCompute = false }, 16, "requiredSubgroupSizeStages"},
	} {
		d := ok
		c.edit(&d)
		err := d.CanRequireSubgroupSize(c.size)
		if c.want == "" {
			assert.NoError(t, err, c.name)
		} else {
			assert.ErrorContains(t, err, c.want, c.name)
		}
	}
}
