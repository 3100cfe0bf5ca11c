package shaders

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/vk"
)

// TestPagedAttendOwn: paged_attend_own (paged_qkv and paged_attend in one
// dispatch, for rows that are each their sequence's only one) gives what
// paged_qkv then paged_attend give, bit for bit: every row's attention,
// and every word of both pools (the own entries written, the rest left as
// they were), run twice over the same counts (left zero). F32 and F16
// pools; head dimensions 32 to 128 with grouped KV heads; tables of width
// 1 and 3 (a layer in the middle) with their pages scattered; rows whose
// own entry is the first of their table, the first or the last of a tile,
// or in a tile after empty ones; rows past rows[0] not written, their
// entries' slots untouched. The own entries' slots hold other values until
// the kernel writes them, and the writer of a kv head's entry is the last
// of its query heads in the grid, so that a kernel reading the slot
// instead of its own turned k and v fails here too (lavapipe runs the
// workgroups in order), not only on a GPU.
func TestPagedAttendOwn(t *testing.T) {
	dev := openDevice(t)
	rng := rand.New(rand.NewSource(43))
	for _, kv := range []KV{KVF32, KVF16} {
		qkvK := newKernel(t, dev, lookup(t, PagedQKVName(kv)))
		for _, sh := range []struct{ hd, nh, nkv, n, rows, splits, splitLen, width, layer int }{
			{64, 2, 1, 3, 3, 4, 8, 1, 0}, {128, 4, 2, 5, 4, 3, 16, 3, 1}, {32, 1, 1, 1, 1, 1, 64, 1, 0},
			{64, 8, 2, 4, 4, 3, 64, 3, 2}, {128, 2, 1, 3, 2, 2, 48, 1, 0}, {64, 4, 4, 6, 6, 5, 4, 1, 0},
		} {
			name := fmt.Sprintf("%s/hd%d/heads%d-%d/n%d/rows%d/splits%d-%d/width%d", kv, sh.hd, sh.nh, sh.nkv, sh.n, sh.rows, sh.splits, sh.splitLen, sh.width)
			t.Run(name, func(t *testing.T) {
				spec := PagedAttentionSpec(uint32(sh.hd))
				attend, own := newKernel(t, dev, lookup(t, PagedAttendName(kv)), spec...), newKernel(t, dev, lookup(t, PagedAttendOwnName(kv)), spec...)
				const bt = 4
				qd, kvDim := sh.nh*sh.hd, sh.nkv*sh.hd
				stride := qd + 2*kvDim + 6
				most := sh.splits * sh.splitLen
				blocks := most / bt
				pages := sh.n * blocks * sh.width
				perm := rng.Perm(pages)
				ent, toff, rpos := make([]uint32, sh.n), make([]uint32, sh.n), make([]uint32, sh.n)
				var tables []uint32
				for i := range sh.n {
					switch i {
					case 0:
						ent[i] = 0 // its own entry alone
					case 1:
						ent[i] = uint32(most - 1) // the last of the last tile
					case 2:
						ent[i] = uint32(sh.splitLen * (sh.splits - 1)) // the first of the last tile
					default:
						ent[i] = uint32(rng.Intn(most))
					}
					rpos[i] = ent[i] + uint32(rng.Intn(100_000))
					toff[i] = uint32(len(tables))
					for range blocks * sh.width {
						tables = append(tables, uint32(perm[len(tables)]))
					}
				}
				pool := func() []byte {
					vals := denseNormals(rng, pages*bt*kvDim, 1)
					if kv == KVF32 {
						return f32bytes(vals)
					}
					words := make([]uint32, len(vals)/2)
					for j := range words {
						words[j] = uint32(gguf.F32ToF16(vals[2*j])) | uint32(gguf.F32ToF16(vals[2*j+1]))<<16
					}
					return u32bytes(words)
				}
				kInit, vInit := pool(), pool()
				rad := make([]float64, sh.hd/2)
				for j := range rad {
					rad[j] = math.Pow(10000, -2*float64(j)/float64(sh.hd))
				}
				buf := func(b []byte) *vk.Buffer { return newBuffer(t, dev, b) }
				qkvB, posB, freqB := buf(f32bytes(denseNormals(rng, sh.n*stride, 1))), buf(u32bytes(rpos)), buf(u32bytes(RopeFreqs(rad)))
				rowsB, entB, toffB, tabB := buf(u32bytes([]uint32{uint32(sh.rows)})), buf(u32bytes(ent)), buf(u32bytes(toff)), buf(u32bytes(tables))
				k0, v0, k1, v1 := buf(kInit), buf(vInit), buf(kInit), buf(vInit)
				qr := denseNaNBuffer(t, dev, sh.n*qd)
				parts := sh.n * sh.nh * sh.splits
				po0, pml0 := denseNaNBuffer(t, dev, parts*sh.hd), denseNaNBuffer(t, dev, 2*parts)
				po1, pml1 := denseNaNBuffer(t, dev, parts*sh.hd), denseNaNBuffer(t, dev, 2*parts)
				out0, out1 := denseNaNBuffer(t, dev, sh.n*qd), denseNaNBuffer(t, dev, sh.n*qd)
				done0, done1 := buf(make([]byte, 4*sh.n*sh.nh)), buf(make([]byte, 4*sh.n*sh.nh))
				push := PagedPush{N: uint32(sh.n), KVDim: uint32(kvDim), Width: uint32(sh.width), Layer: uint32(sh.layer), BlockTokens: bt,
					NHead: uint32(sh.nh), NKVHead: uint32(sh.nkv), HeadDim: uint32(sh.hd), Scale: float32(1 / math.Sqrt(float64(sh.hd))),
					Splits: uint32(sh.splits), SplitLen: uint32(sh.splitLen), Stride: uint32(stride), KOff: uint32(qd), VOff: uint32(qd + kvDim)}
				pp := vk.MustPackPush(push)
				groups := PagedAttentionGroups(uint32(sh.n), uint32(sh.nh), uint32(sh.splits))
				b := denseBind
				rec := dev.NewRecorder()
				defer rec.Close()
				rec.Dispatch(qkvK, pp, Groups(uint32(sh.n)), b(qkvB, vk.Read), b(posB, vk.Read), b(freqB, vk.Read), b(rowsB, vk.Read), b(entB, vk.Read),
					b(toffB, vk.Read), b(tabB, vk.Read), b(qr, vk.Write), b(k0, vk.Write), b(v0, vk.Write))
				rec.Dispatch(attend, pp, groups, b(qr, vk.Read), b(k0, vk.Read), b(v0, vk.Read), b(rowsB, vk.Read), b(entB, vk.Read), b(toffB, vk.Read),
					b(tabB, vk.Read), b(po0, vk.ReadWrite), b(pml0, vk.ReadWrite), b(done0, vk.ReadWrite), b(out0, vk.Write))
				require.NoError(t, dev.Run(rec))
				w := sh.rows * qd
				want := f32Bits(download(t, out0, sh.n*qd))
				words := len(kInit) / 4
				wantK, wantV := downloadU32(t, k0, words), downloadU32(t, v0, words)
				assert.NotEqual(t, u32From(kInit), wantK, "paged_qkv wrote keys")
				for run := range 2 {
					rec := dev.NewRecorder()
					rec.Dispatch(own, pp, groups, b(qkvB, vk.Read), b(k1, vk.ReadWrite), b(v1, vk.ReadWrite), b(rowsB, vk.Read), b(entB, vk.Read),
						b(toffB, vk.Read), b(tabB, vk.Read), b(po1, vk.ReadWrite), b(pml1, vk.ReadWrite), b(done1, vk.ReadWrite), b(out1, vk.Write),
						b(posB, vk.Read), b(freqB, vk.Read))
					require.NoError(t, dev.Run(rec))
					rec.Close()
					got := f32Bits(download(t, out1, sh.n*qd))
					assert.Equal(t, want[:w], got[:w], "run %d: the attention of paged_qkv then paged_attend, bit for bit", run)
					for _, x := range got[w:] {
						require.True(t, math.IsNaN(float64(math.Float32frombits(x))), "run %d: a row past rows[0] not written", run)
					}
					assert.Equal(t, wantK, downloadU32(t, k1, words), "run %d: the keys' pool", run)
					assert.Equal(t, wantV, downloadU32(t, v1, words), "run %d: the values' pool", run)
					assert.Equal(t, make([]uint32, sh.n*sh.nh), downloadU32(t, done1, sh.n*sh.nh), "run %d: the counts back to zero", run)
				}
			})
		}
	}
}

// TestPagedAttendOwnFallback: paged_attend_own failing its self-check
// falls back to paged_qkv and paged_attend apart (AttendOwn off, the fused
// attention kept), and paged_attend failing takes AttendOwn with it (the
// own kernel merges as paged_attend does). CPU devices' profiles run
// neither.
func TestPagedAttendOwnFallback(t *testing.T) {
	gpu := GPUProfile(lavapipeProfile.Device)
	require.True(t, gpu.AttendOwn)
	assert.False(t, NewProfile(lavapipeProfile.Device).AttendOwn)
	off := lavapipeProfile.Device
	off.CPU, off.NoAttendOwn = false, true
	assert.False(t, NewProfile(off).AttendOwn, "MODRUN_ATTEND_OWN=0")
	for _, kv := range KVTypes {
		v := lookup(t, PagedAttendOwnName(kv))
		require.True(t, IsAttendOwn(v))
		assert.False(t, IsAttendOwn(lookup(t, PagedAttendName(kv))))
		fb, safe, ok := gpu.Fallback(v)
		require.True(t, ok, kv)
		assert.Equal(t, PagedQKVName(kv)+" + "+PagedAttendName(kv), safe)
		assert.False(t, fb.AttendOwn)
		assert.True(t, fb.FuseAttention, "the fused attention stays")
		_, _, ok = fb.Fallback(v)
		assert.False(t, ok, "no second fallback")
		fb, _, ok = gpu.Fallback(lookup(t, PagedAttendName(kv)))
		require.True(t, ok)
		assert.False(t, fb.AttendOwn, "paged_attend's fallback takes paged_attend_own too")
	}
}
