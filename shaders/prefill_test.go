package shaders

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPrefillKV: prefill_kv_f32 and prefill_kv_f16 append rows[0] rows of k
// and v at counts[layer] (dropping those past maxEntries), with their
// positions, and touch nothing else; prefill_count then adds the rows to the
// count, capped at maxEntries. F32 entries are copies (exact); F16 entries
// are the nearest half (packHalf2x16): within half an ulp of a half, 2^-11
// relative, checked at 1e-3 relative to leave the driver's rounding mode
// free (GLSL does not fix it).
func TestPrefillKV(t *testing.T) {
	dev := openDevice(t)
	count := newKernel(t, dev, lookup(t, "prefill_count"))
	for _, kv := range KVTypes {
		k := newKernel(t, dev, lookup(t, PrefillKVName(kv)))
		for _, tc := range []struct {
			kvd, n, rows, base, maxEntries int
		}{
			{2, 1, 1, 0, 4},
			{6, 5, 5, 2, 16},     // ragged: 3 halves a row
			{6, 5, 0, 3, 16},     // a routed chunk that selected none
			{130, 7, 3, 1, 9},    // more elements than invocations, a partial chunk
			{256, 9, 9, 5, 11},   // only 6 fit: the rest is dropped
			{64, 70, 70, 0, 100}, // many rows
		} {
			name := fmt.Sprintf("%s_kvd%d_n%d_rows%d_base%d_max%d", kv, tc.kvd, tc.n, tc.rows, tc.base, tc.maxEntries)
			rng := rand.New(rand.NewSource(int64(tc.kvd*100 + tc.n)))
			kk, vv := denseNormals(rng, tc.n*tc.kvd, 1), denseNormals(rng, tc.n*tc.kvd, 1)
			pos := make([]uint32, tc.n)
			for i := range pos {
				pos[i] = uint32(1000 + 3*i)
			}
			words := tc.kvd // words per entry
			if kv == KVF16 {
				words /= 2
			}
			capEntries := tc.maxEntries + 1
			const layer = 1
			bK, bV := newBuffer(t, dev, f32bytes(kk)), newBuffer(t, dev, f32bytes(vv))
			bPos := newBuffer(t, dev, u32bytes(pos))
			bRows := newBuffer(t, dev, u32bytes([]uint32{uint32(tc.rows)}))
			bCounts := newBuffer(t, dev, u32bytes([]uint32{7, uint32(tc.base), 9}))
			fill := decodeRepeat([]uint32{0xdeadbeef}, capEntries*words)
			bKC, bVC := newBuffer(t, dev, u32bytes(fill)), newBuffer(t, dev, u32bytes(fill))
			bKPos := newBuffer(t, dev, u32bytes(decodeRepeat([]uint32{0xdeadbeef}, capEntries)))
			push := vk.MustPackPush(PrefillPush{N: uint32(tc.n), KVDim: uint32(tc.kvd), Layer: layer, MaxEntries: uint32(tc.maxEntries)})
			rec := dev.NewRecorder()
			rec.Dispatch(k, push, Groups(uint32(tc.n)),
				denseBind(bK, vk.Read), denseBind(bV, vk.Read), denseBind(bPos, vk.Read), denseBind(bRows, vk.Read),
				denseBind(bCounts, vk.Read), denseBind(bKC, vk.Write), denseBind(bVC, vk.Write), denseBind(bKPos, vk.Write))
			rec.Dispatch(count, push, [3]uint32{1, 1, 1}, denseBind(bRows, vk.Read), denseBind(bCounts, vk.ReadWrite))
			require.NoError(t, dev.Run(rec))
			rec.Close()

			appended := min(tc.rows, max(0, tc.maxEntries-tc.base))
			assert.Equal(t, []uint32{7, uint32(tc.base + appended), 9}, downloadU32(t, bCounts, 3), "%s: counts", name)
			gotPos := downloadU32(t, bKPos, capEntries)
			for c := range capEntries {
				want := uint32(0xdeadbeef)
				if i := c - tc.base; i >= 0 && i < appended {
					want = pos[i]
				}
				require.Equal(t, want, gotPos[c], "%s: kPos[%d]", name, c)
			}
			for _, kc := range []struct {
				what string
				src  []float32
				buf  *vk.Buffer
			}{{"k", kk, bKC}, {"v", vv, bVC}} {
				got := downloadU32(t, kc.buf, capEntries*words)
				for c := range capEntries {
					i := c - tc.base
					for w := range words {
						g := got[c*words+w]
						if i < 0 || i >= appended {
							require.Equal(t, uint32(0xdeadbeef), g, "%s: %s entry %d word %d is left", name, kc.what, c, w)
							continue
						}
						if kv == KVF32 {
							require.Equal(t, math.Float32bits(kc.src[i*tc.kvd+w]), g, "%s: %s entry %d [%d]", name, kc.what, c, w)
							continue
						}
						for h := range 2 {
							want := kc.src[i*tc.kvd+2*w+h]
							half := gguf.F16ToF32(uint16(g >> (16 * h)))
							require.InDelta(t, want, half, 1e-3*math.Abs(float64(want))+1e-7, "%s: %s entry %d [%d]", name, kc.what, c, 2*w+h)
						}
					}
				}
			}
		}
	}
}
