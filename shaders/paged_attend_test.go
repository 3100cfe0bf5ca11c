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

// TestPagedAttend: paged_attend (the key tiles walked in chunks of 16
// entries, and in the last tile of each row-head their merge: one
// dispatch) merges its own partials as attention_merge does, bit for bit
// (attention_merge run on the partials it left), gives the attention of
// paged_attention then attention_merge (lavapipe's walk: an invocation
// every 16th entry) within float32 rounding (the same bits where a tile
// has at most 16 entries: then both sum the same terms in the same
// order), and leaves its counts zero for the next dispatch (run twice,
// the same bits): F32 and F16 pools, rows seeing from one entry to
// several tiles of up to 64 entries, a tile past a row's entries (its
// partial empty), grouped KV heads, rows past rows[0] not written.
func TestPagedAttend(t *testing.T) {
	dev := openDevice(t)
	merge := newKernel(t, dev, lookup(t, "attention_merge"))
	rng := rand.New(rand.NewSource(11))
	for _, kv := range []KV{KVF32, KVF16} {
		for _, sh := range []struct{ hd, nh, nkv, n, rows, splits, splitLen int }{
			{64, 2, 1, 3, 3, 4, 8}, {128, 4, 2, 5, 4, 3, 16}, {32, 1, 1, 1, 1, 1, 64}, {64, 4, 2, 4, 4, 3, 64}, {128, 2, 1, 3, 2, 2, 48},
		} {
			t.Run(fmt.Sprintf("%s/hd%d/heads%d-%d/n%d/rows%d/splits%d", kv, sh.hd, sh.nh, sh.nkv, sh.n, sh.rows, sh.splits), func(t *testing.T) {
				spec := PagedAttentionSpec(uint32(sh.hd))
				plain, fused := newKernel(t, dev, lookup(t, PagedAttentionName(kv)), spec...), newKernel(t, dev, lookup(t, PagedAttendName(kv)), spec...)
				const bt = 4
				kvDim := sh.nkv * sh.hd
				most := sh.splits * sh.splitLen // entries a table holds
				blocks := most / bt
				pages := sh.n * blocks
				perm := rng.Perm(pages)
				ent, toff := make([]uint32, sh.n), make([]uint32, sh.n)
				var tables []uint32
				for i := range sh.n {
					ent[i] = uint32(rng.Intn(most))
					if i == 0 {
						ent[i] = 0 // one entry: every tile but the first empty
					}
					toff[i] = uint32(len(tables))
					for range blocks {
						tables = append(tables, uint32(perm[len(tables)]))
					}
				}
				pool := func() *vk.Buffer {
					vals := denseNormals(rng, pages*bt*kvDim, 1)
					if kv == KVF32 {
						return newBuffer(t, dev, f32bytes(vals))
					}
					words := make([]uint32, len(vals)/2)
					for j := range words {
						words[j] = uint32(gguf.F32ToF16(vals[2*j])) | uint32(gguf.F32ToF16(vals[2*j+1]))<<16
					}
					return newBuffer(t, dev, u32bytes(words))
				}
				kp, vp := pool(), pool()
				q := newBuffer(t, dev, f32bytes(denseNormals(rng, sh.n*sh.nh*sh.hd, 1)))
				buf := func(x []uint32) *vk.Buffer { return newBuffer(t, dev, u32bytes(x)) }
				rowsB, entB, toffB, tabB := buf([]uint32{uint32(sh.rows)}), buf(ent), buf(toff), buf(tables)
				parts := sh.n * sh.nh * sh.splits
				po0, pml0 := denseNaNBuffer(t, dev, parts*sh.hd), denseNaNBuffer(t, dev, 2*parts)
				po1, pml1 := denseNaNBuffer(t, dev, parts*sh.hd), denseNaNBuffer(t, dev, 2*parts)
				out0, out1 := denseNaNBuffer(t, dev, sh.n*sh.nh*sh.hd), denseNaNBuffer(t, dev, sh.n*sh.nh*sh.hd)
				done := newBuffer(t, dev, make([]byte, 4*sh.n*sh.nh))
				push := PagedPush{N: uint32(sh.n), KVDim: uint32(kvDim), Width: 1, BlockTokens: bt, NHead: uint32(sh.nh), NKVHead: uint32(sh.nkv),
					HeadDim: uint32(sh.hd), Scale: float32(1 / math.Sqrt(float64(sh.hd))), Splits: uint32(sh.splits), SplitLen: uint32(sh.splitLen)}
				pp := vk.MustPackPush(push)
				groups := PagedAttentionGroups(uint32(sh.n), uint32(sh.nh), uint32(sh.splits))
				b := func(x *vk.Buffer, a vk.Access) vk.Bind { return denseBind(x, a) }
				common := []vk.Bind{b(q, vk.Read), b(kp, vk.Read), b(vp, vk.Read), b(rowsB, vk.Read), b(entB, vk.Read), b(toffB, vk.Read), b(tabB, vk.Read)}
				rec := dev.NewRecorder()
				defer rec.Close()
				rec.Dispatch(plain, pp, groups, append(common[:7:7], b(po0, vk.Write), b(pml0, vk.Write))...)
				rec.Dispatch(merge, vk.MustPackPush(AttentionSplitPush{N: uint32(sh.rows), NHead: uint32(sh.nh), HeadDim: uint32(sh.hd), Splits: uint32(sh.splits)}),
					AttentionMergeGroups(uint32(sh.rows), uint32(sh.nh)), b(po0, vk.Read), b(pml0, vk.Read), b(out0, vk.Write))
				require.NoError(t, dev.Run(rec))
				want := download(t, out0, sh.n*sh.nh*sh.hd)
				w := sh.rows * sh.nh * sh.hd
				var first []uint32
				for run := range 2 {
					rec := dev.NewRecorder()
					rec.Dispatch(fused, pp, groups, append(common[:7:7], b(po1, vk.ReadWrite), b(pml1, vk.ReadWrite), b(done, vk.ReadWrite), b(out1, vk.Write))...)
					require.NoError(t, dev.Run(rec))
					rec.Close()
					got := download(t, out1, sh.n*sh.nh*sh.hd)
					bits := f32Bits(got[:w])
					if run == 0 {
						first = bits
						// Its merge: attention_merge over the partials it left.
						rec := dev.NewRecorder()
						rec.Dispatch(merge, vk.MustPackPush(AttentionSplitPush{N: uint32(sh.rows), NHead: uint32(sh.nh), HeadDim: uint32(sh.hd), Splits: uint32(sh.splits)}),
							AttentionMergeGroups(uint32(sh.rows), uint32(sh.nh)), b(po1, vk.Read), b(pml1, vk.Read), b(out0, vk.Write))
						require.NoError(t, dev.Run(rec))
						rec.Close()
						assert.Equal(t, f32Bits(download(t, out0, w)), bits, "its merge is attention_merge's, bit for bit")
						if sh.splitLen <= PagedAttentionRows {
							assert.Equal(t, f32Bits(want[:w]), bits, "tiles of at most 16 entries: the same bits as paged_attention's")
						}
						worst := 0.0
						for j := range w {
							worst = max(worst, math.Abs(float64(got[j]-want[j])))
						}
						t.Logf("max |paged_attend - paged_attention| %.2g", worst)
						assert.Less(t, worst, 1e-5, "within float32 rounding of paged_attention's (outputs of order 1)")
					} else {
						assert.Equal(t, first, bits, "run %d: the same bits", run)
					}
					for _, x := range got[w:] {
						require.True(t, math.IsNaN(float64(x)), "run %d: a row past rows[0] not written", run)
					}
					assert.Equal(t, make([]uint32, sh.n*sh.nh), downloadU32(t, done, sh.n*sh.nh), "run %d: the counts back to zero", run)
				}
			})
		}
	}
}

func f32Bits(x []float32) []uint32 {
	out := make([]uint32, len(x))
	for i, v := range x {
		out[i] = math.Float32bits(v)
	}
	return out
}

// TestPagedAttendFallback: paged_attend failing its self-check on a GPU
// falls back to paged_attention and attention_merge (FuseAttention off:
// the decode step's fused attention, whose hand-off is the same, goes
// with it), and there is nothing past that; a CPU device's profile never
// fuses.
func TestPagedAttendFallback(t *testing.T) {
	gpu := GPUProfile(lavapipeProfile.Device)
	require.True(t, gpu.FuseAttention)
	for _, kv := range KVTypes {
		v := lookup(t, PagedAttendName(kv))
		assert.Equal(t, OpPagedAttend, v.Op)
		fb, safe, ok := gpu.Fallback(v)
		require.True(t, ok, kv)
		assert.Equal(t, PagedAttentionName(kv)+" + attention_merge", safe)
		assert.False(t, fb.FuseAttention)
		assert.Equal(t, RoleKV, fb.DecodeAttention(kv, 2048, 64)[0].Role, "the decode step unfused too")
		_, _, ok = fb.Fallback(v)
		assert.False(t, ok, "no second fallback")
		_, _, ok = NewProfile(lavapipeProfile.Device).Fallback(v)
		assert.False(t, ok, "a CPU device's profile runs paged_attention")
	}
}
