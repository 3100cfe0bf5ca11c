package shaders

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/modrun/modrun/vk"
	"github.com/modrun/modrun/vk/vktest"
	"github.com/stretchr/testify/require"
)

// openDevice opens the default Vulkan device with the validation layer (when
// installed), or skips t when this machine has none. At cleanup it fails t on
// any validation message.
func openDevice(t testing.TB) *vk.Device {
	t.Helper()
	return openDeviceWith(t, vk.InstanceOptions{Validation: true})
}

// openDeviceWith is openDevice with options: benchmarks run without the
// validation layer, whose checks would be timed too.
func openDeviceWith(t testing.TB, opts vk.InstanceOptions) *vk.Device {
	t.Helper()
	return vktest.Open(t, opts)
}

// lookup is the variant named name.
func lookup(t testing.TB, name string) Variant {
	t.Helper()
	v, err := Lookup(name)
	require.NoError(t, err)
	return v
}

// newKernel makes v's kernel, with spec overriding its default
// specialization constants when given.
func newKernel(t testing.TB, dev *vk.Device, v Variant, spec ...uint32) *vk.Kernel {
	t.Helper()
	if spec == nil {
		spec = v.Spec
	}
	k, err := dev.NewKernel(v.SPIRV(), vk.KernelSpec{Name: v.Name, Bindings: len(v.Bindings),
		PushConstantBytes: v.PushBytes(), Specialization: spec})
	require.NoError(t, err)
	t.Cleanup(k.Close)
	return k
}

func newBuffer(t testing.TB, dev *vk.Device, data []byte) *vk.Buffer {
	t.Helper()
	b, err := dev.NewBuffer(uint64(len(data)), vk.DeviceLocal)
	require.NoError(t, err)
	t.Cleanup(b.Close)
	require.NoError(t, b.Upload(data, 0))
	return b
}

func f32bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func download(t testing.TB, b *vk.Buffer, n int) []float32 {
	t.Helper()
	raw := make([]byte, 4*n)
	require.NoError(t, b.Download(raw, 0))
	x := make([]float32, n)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return x
}

// downloadU32 is the first n words of b (n may be 0: it reads one word).
func downloadU32(t testing.TB, b *vk.Buffer, n int) []uint32 {
	t.Helper()
	raw := make([]byte, 4*max(n, 1))
	require.NoError(t, b.Download(raw, 0))
	x := make([]uint32, n)
	for i := range x {
		x[i] = binary.LittleEndian.Uint32(raw[4*i:])
	}
	return x
}

// closeness compares got with want element by element: element i is bad when
// |got-want| > tol*scale[i] (scale: the size of the terms that were summed,
// so the bound is relative to what rounding could lose). On failure it reports
// the max abs and rel error, the first bad index and a few pairs.
func closeness(got []float32, want, scale []float64, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	var maxAbs, maxRel float64
	first, bad := -1, 0
	for i := range got {
		g := float64(got[i])
		d := math.Abs(g - want[i])
		if math.IsNaN(g) {
			d = math.Inf(1)
		}
		maxAbs = math.Max(maxAbs, d)
		if want[i] != 0 {
			maxRel = math.Max(maxRel, d/math.Abs(want[i]))
		}
		if d > tol*scale[i] {
			bad++
			if first < 0 {
				first = i
			}
		}
	}
	if bad == 0 {
		return nil
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d of %d values off by more than %g of their scale: max abs err %.3g, max rel err %.3g, first bad index %d\n",
		bad, len(got), tol, maxAbs, maxRel, first)
	for i := first; i < len(got) && i < first+5; i++ {
		fmt.Fprintf(&sb, "  [%d] got %.8g want %.8g (scale %.3g)\n", i, got[i], want[i], scale[i])
	}
	return errors.New(sb.String())
}
