package vulkan

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/require"
)

// downloadF32 gives the buffer's floats whether it copies them straight in
// (a little-endian host) or converts each word, including the bit patterns
// a conversion could disturb (NaN payloads, -0, subnormals, infinities).
func TestDownloadF32(t *testing.T) {
	dev := openDevice(t, false)
	want := []float32{0, float32(math.Copysign(0, -1)), 1.5, -3.25e-40, float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7fc00123), 6.5e37}
	for i := 0; i < 1000; i++ {
		want = append(want, float32(i)*0.37-100)
	}
	raw := make([]byte, 4*len(want))
	for i, v := range want {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	for _, kind := range []vk.BufferKind{vk.HostVisible, vk.DeviceLocal} {
		b, err := dev.NewBuffer(uint64(len(raw)), kind)
		require.NoError(t, err)
		defer b.Close()
		require.NoError(t, b.Upload(raw, 0))
		for _, straight := range []bool{true, false} {
			was := littleEndianHost
			littleEndianHost = straight && was
			got, err := downloadF32(b, len(want))
			littleEndianHost = was
			require.NoError(t, err)
			require.Len(t, got, len(want))
			for i := range want {
				require.Equal(t, math.Float32bits(want[i]), math.Float32bits(got[i]), "kind %v, straight %v, float %d", kind, straight, i)
			}
		}
	}
	got, err := downloadF32(nil, 0)
	require.NoError(t, err)
	require.Empty(t, got)
}

// BenchmarkDownloadF32 reads a sampled token's logits (32,000 floats) from
// a host-visible buffer: copied straight in, and by the conversion a word
// it replaced.
func BenchmarkDownloadF32(b *testing.B) {
	dev := openDevice(b, false)
	const n = 32000
	buf, err := dev.NewBuffer(4*n, vk.HostVisible)
	require.NoError(b, err)
	defer buf.Close()
	for _, straight := range []bool{true, false} {
		name := map[bool]string{true: "straight", false: "convert"}[straight]
		b.Run(name, func(b *testing.B) {
			was := littleEndianHost
			littleEndianHost = straight && was
			defer func() { littleEndianHost = was }()
			for i := 0; i < b.N; i++ {
				if _, err := downloadF32(buf, n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDownloadArgmax reads a greedy token's argmax, 4 bytes of a
// host-visible buffer, as FeedArgmax does each token.
func BenchmarkDownloadArgmax(b *testing.B) {
	dev := openDevice(b, false)
	buf, err := dev.NewBuffer(4, vk.HostVisible)
	require.NoError(b, err)
	defer buf.Close()
	raw := make([]byte, 4)
	for i := 0; i < b.N; i++ {
		if err := buf.Download(raw, 0); err != nil {
			b.Fatal(err)
		}
	}
}
