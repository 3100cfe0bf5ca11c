package shaders

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/vk"
)

// TestPagedQKV: paged_qkv (split, RoPE of q and k, the KV write, one
// dispatch) gives what the four kernels it replaces give one after another
// (paged_split, rope on q, rope on k, paged_kv), bit for bit: the rotated
// q rows, and every word of both pools, for an F32 and an F16 pool; rows
// at random entries of random tables (of width 1 and 3, a layer in the
// middle), positions up to 10^6, rows past rows[0] left alone (their q
// rows too), head dimensions with more pairs than invocations, grouped
// KV heads, a stride with padding after v.
func TestPagedQKV(t *testing.T) {
	dev := openDevice(t)
	split, ropeK := newKernel(t, dev, lookup(t, "paged_split")), newKernel(t, dev, lookup(t, "rope"))
	rng := rand.New(rand.NewSource(9))
	for _, kv := range []KV{KVF32, KVF16} {
		fused, kvK := newKernel(t, dev, lookup(t, PagedQKVName(kv))), newKernel(t, dev, lookup(t, PagedKVName(kv)))
		for _, sh := range []struct{ hd, nh, nkv, n, rows, width, layer int }{
			{8, 2, 1, 1, 1, 1, 0}, {64, 4, 2, 5, 3, 3, 1}, {256, 2, 2, 7, 7, 1, 0}, {128, 8, 1, 4, 2, 3, 2},
		} {
			name := fmt.Sprintf("%s/hd%d/heads%d-%d/n%d/rows%d/width%d", kv, sh.hd, sh.nh, sh.nkv, sh.n, sh.rows, sh.width)
			t.Run(name, func(t *testing.T) {
				const bt = 4
				pages := sh.n * 2 * sh.width // two blocks of each row's table: its own pages, in random order
				perm := rng.Perm(pages)
				qd, kvDim := sh.nh*sh.hd, sh.nkv*sh.hd
				stride := qd + 2*kvDim + 6
				qkv := denseNormals(rng, sh.n*stride, 1)
				rpos := make([]uint32, sh.n)
				ent := make([]uint32, sh.n)
				toff := make([]uint32, sh.n)
				var tables []uint32
				for i := range sh.n {
					rpos[i] = uint32(rng.Intn(1_000_000))
					ent[i] = uint32(rng.Intn(2 * bt))
					toff[i] = uint32(len(tables))
					for range 2 * sh.width {
						tables = append(tables, uint32(perm[len(tables)]))
					}
				}
				rad := make([]float64, sh.hd/2)
				for j := range rad {
					rad[j] = math.Pow(10000, -2*float64(j)/float64(sh.hd))
				}
				freq := RopeFreqs(rad)
				elem := 4
				if kv == KVF16 {
					elem = 2
				}
				poolB := pages * bt * kvDim * elem
				noise := make([]byte, poolB)
				for i := range noise {
					noise[i] = byte(rng.Intn(256))
				}
				buf := func(b []byte) *vk.Buffer { return newBuffer(t, dev, b) }
				qkvB, posB, freqB := buf(f32bytes(qkv)), buf(u32bytes(rpos)), buf(u32bytes(freq))
				rowsB, entB, toffB, tabB := buf(u32bytes([]uint32{uint32(sh.rows)})), buf(u32bytes(ent)), buf(u32bytes(toff)), buf(u32bytes(tables))
				q0, q1 := denseNaNBuffer(t, dev, sh.n*qd), denseNaNBuffer(t, dev, sh.n*qd)
				k0, v0, k1, v1 := buf(noise), buf(noise), buf(noise), buf(noise)
				qs, ks, vs := denseNaNBuffer(t, dev, sh.n*qd), denseNaNBuffer(t, dev, sh.n*kvDim), denseNaNBuffer(t, dev, sh.n*kvDim)
				kr := denseNaNBuffer(t, dev, sh.n*kvDim)
				push := PagedPush{N: uint32(sh.n), KVDim: uint32(kvDim), Width: uint32(sh.width), Layer: uint32(sh.layer), BlockTokens: bt,
					NHead: uint32(sh.nh), NKVHead: uint32(sh.nkv), HeadDim: uint32(sh.hd), Stride: uint32(stride), KOff: uint32(qd), VOff: uint32(qd + kvDim)}
				pp := vk.MustPackPush(push)
				rd, wr := func(b *vk.Buffer) vk.Bind { return denseBind(b, vk.Read) }, func(b *vk.Buffer) vk.Bind { return denseBind(b, vk.Write) }
				rec := dev.NewRecorder()
				defer rec.Close()
				// The four kernels; the rows past rows[0] are turned too, but
				// only those below it reach q0 (copied row by row below).
				rec.Dispatch(split, pp, Groups(uint32(sh.n)), rd(qkvB), wr(qs), wr(ks), wr(vs))
				rope := func(x, out *vk.Buffer, heads int) {
					rec.Dispatch(ropeK, vk.MustPackPush(RopePush{HeadDim: uint32(sh.hd), NHead: uint32(heads), N: uint32(sh.rows)}), Groups(uint32(sh.rows)),
						rd(x), rd(posB), rd(freqB), wr(out))
				}
				rope(qs, q0, sh.nh)
				rope(ks, kr, sh.nkv)
				rec.Dispatch(kvK, pp, Groups(uint32(sh.n)), rd(kr), rd(vs), rd(rowsB), rd(entB), rd(toffB), rd(tabB), wr(k0), wr(v0))
				rec.Dispatch(fused, pp, Groups(uint32(sh.n)), rd(qkvB), rd(posB), rd(freqB), rd(rowsB), rd(entB), rd(toffB), rd(tabB), wr(q1), wr(k1), wr(v1))
				require.NoError(t, dev.Run(rec))
				want, got := f32Bits(download(t, q0, sh.n*qd)), f32Bits(download(t, q1, sh.n*qd))
				assert.Equal(t, want[:sh.rows*qd], got[:sh.rows*qd], "q of the rows written")
				for _, x := range got[sh.rows*qd:] {
					require.True(t, math.IsNaN(float64(math.Float32frombits(x))), "a row past rows[0] left alone")
				}
				words := poolB / 4
				assert.Equal(t, downloadU32(t, k0, words), downloadU32(t, k1, words), "the keys' pool")
				assert.Equal(t, downloadU32(t, v0, words), downloadU32(t, v1, words), "the values' pool")
				assert.NotEqual(t, u32From(noise), downloadU32(t, k1, words), "keys written")
			})
		}
	}
}

func u32From(b []byte) []uint32 {
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24
	}
	return out
}
