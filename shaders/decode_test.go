package shaders

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decodeBuffer is a device-local buffer holding data, padded with NaN words
// to n floats: what a kernel must not read or write shows.
func decodeBuffer(t testing.TB, dev *vk.Device, data []byte, n int) *vk.Buffer {
	t.Helper()
	padded := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		copy(padded[4*i:], f32bytes([]float32{float32(math.NaN())}))
	}
	copy(padded, data)
	return newBuffer(t, dev, padded)
}

// kvHalfTol is the F16 cache's rounding: a half keeps 11 significant bits,
// so a value rounded to nearest is off by at most 2^-11 of itself (of the
// pair's norm for a rotated key). F32 caches are exact (v) or ropeTol (k).
const kvHalfTol = 1.0 / 2048

// decodeNaNWord is a float32 NaN as f32bytes writes it: the word a kernel
// must leave alone in decodeBuffer's padding.
var decodeNaNWord = math.Float32bits(float32(math.NaN()))

// kvDecode decodes a downloaded cache of words: floats (F32) or pairs of
// halves (F16).
func kvDecode(t testing.TB, kv KV, words []uint32) []float32 {
	raw := u32bytes(words)
	if kv == KVF32 {
		out := make([]float32, len(words))
		for i, w := range words {
			out[i] = math.Float32frombits(w)
		}
		return out
	}
	out := make([]float32, 2*len(words))
	require.NoError(t, gguf.Dequantize(gguf.TypeF16, raw, out))
	return out
}

// kvEncode is x as a cache of kv's type stores it, and x rounded to it.
func kvEncode(t testing.TB, kv KV, x []float32) ([]byte, []float32) {
	if kv == KVF32 {
		return f32bytes(x), slices.Clone(x)
	}
	raw, err := gguf.Quantize(gguf.TypeF16, x)
	require.NoError(t, err)
	back := make([]float32, len(x))
	require.NoError(t, gguf.Dequantize(gguf.TypeF16, raw, back))
	return raw, back
}

// TestDecodeKV: q rotated in place, k rotated into cache entry c = counts[layer],
// v copied there, kPos[c] = pos, counts[layer] = c+1, nothing else touched;
// and a full cache (c = maxEntries) left as it was; for an F32 and an F16
// cache. Tolerance ropeTol (as rope: the same angle computation), relative
// to each pair's norm, and kvHalfTol more for F16 keys; v exact in F32,
// within kvHalfTol of itself in F16; kPos and counts exact.
func TestDecodeKV(t *testing.T) {
	dev := openDevice(t)
	for _, kv := range KVTypes {
		k := newKernel(t, dev, lookup(t, DecodeKVName(kv)))
		var worst float64
		for i, tc := range []struct {
			headDim, nHead, nKVHead int
			pos                     uint32
			count, maxEntries       uint32
		}{
			{8, 8, 4, 0, 0, 3},
			{8, 8, 4, 37, 2, 3},
			{6, 3, 1, 1000, 1, 5},    // ragged: 3 pairs a head, MQA
			{64, 4, 4, 70000, 4, 9},  // a long head, a far position
			{130, 2, 1, 12345, 0, 1}, // more pairs than invocations
			{8, 8, 4, 9, 3, 3},       // full: nothing is written
		} {
			rope := ropeKinds[i%len(ropeKinds)]
			freqs := ropeTable(t, tc.headDim, rope)
			name := fmt.Sprintf("kv%s_hd%d_h%d_kv%d_pos%d_c%d_max%d_%s", kv, tc.headDim, tc.nHead, tc.nKVHead, tc.pos, tc.count, tc.maxEntries, rope)
			rng := rand.New(rand.NewSource(int64(tc.pos) + 1))
			qd, kvd := tc.nHead*tc.headDim, tc.nKVHead*tc.headDim
			// qkv with k and v at offsets that are not aligned: decode_kv takes
			// element offsets.
			kOff, vOff := qd+1, qd+1+kvd+3
			qkv := denseNormals(rng, vOff+kvd, 1)
			const layer, nLayer = 1, 3
			counts := []uint32{77, tc.count, 88}
			bQKV := newBuffer(t, dev, f32bytes(qkv))
			bPos := newBuffer(t, dev, u32bytes([]uint32{tc.pos}))
			bFreq := newBuffer(t, dev, u32bytes(RopeFreqs(freqs)))
			capEntries := int(tc.maxEntries) + 1 // one entry past the end, which must stay NaN
			words := capEntries * kvd * int(kv.ElementBytes()) / 4
			bK, bV := decodeBuffer(t, dev, nil, words), decodeBuffer(t, dev, nil, words)
			bKPos := newBuffer(t, dev, u32bytes(decodeRepeat([]uint32{0xdeadbeef}, capEntries)))
			bCounts := newBuffer(t, dev, u32bytes(counts))
			rec := dev.NewRecorder()
			rec.Dispatch(k, vk.MustPackPush(DecodeKVPush{HeadDim: uint32(tc.headDim), NHead: uint32(tc.nHead), NKVHead: uint32(tc.nKVHead),
				KOff: uint32(kOff), VOff: uint32(vOff), Layer: layer, MaxEntries: tc.maxEntries}), [3]uint32{1, 1, 1},
				denseBind(bQKV, vk.ReadWrite), denseBind(bPos, vk.Read), denseBind(bFreq, vk.Read),
				denseBind(bK, vk.Write), denseBind(bV, vk.Write), denseBind(bKPos, vk.Write), denseBind(bCounts, vk.ReadWrite))
			require.NoError(t, dev.Run(rec))
			rec.Close()

			wantQ := slices.Clone(qkv[:qd])
			mod.RoPE(wantQ, int32(tc.pos), freqs)
			wantK := slices.Clone(qkv[kOff : kOff+kvd])
			mod.RoPE(wantK, int32(tc.pos), freqs)
			gotQKV := download(t, bQKV, len(qkv))
			w, s := ropeScale(wantQ)
			require.NoError(t, closeness(gotQKV[:qd], w, s, ropeTol), "%s: q", name)
			assert.Equal(t, qkv[qd:], gotQKV[qd:], "%s: k and v are left", name)
			worst = math.Max(worst, maxRelPair(gotQKV[:qd], w, s))

			rawK, rawV := downloadU32(t, bK, words), downloadU32(t, bV, words)
			gotK, gotV := kvDecode(t, kv, rawK), kvDecode(t, kv, rawV)
			gotPos := downloadU32(t, bKPos, capEntries)
			gotCounts := downloadU32(t, bCounts, nLayer)
			c := int(tc.count)
			if tc.count >= tc.maxEntries {
				assert.Equal(t, counts, gotCounts, "%s: a full cache keeps its count", name)
				c = -1
			} else {
				assert.Equal(t, []uint32{77, tc.count + 1, 88}, gotCounts, "%s: counts", name)
				w, s := ropeScale(wantK)
				wantV := qkv[vOff : vOff+kvd]
				if kv == KVF32 {
					require.NoError(t, closeness(gotK[c*kvd:(c+1)*kvd], w, s, ropeTol), "%s: k entry", name)
					assert.Equal(t, wantV, gotV[c*kvd:(c+1)*kvd], "%s: v entry", name)
				} else {
					require.NoError(t, closeness(gotK[c*kvd:(c+1)*kvd], w, s, ropeTol+kvHalfTol), "%s: k entry", name)
					vw, vs := make([]float64, kvd), make([]float64, kvd)
					for i, x := range wantV {
						vw[i], vs[i] = float64(x), math.Abs(float64(x))
					}
					require.NoError(t, closeness(gotV[c*kvd:(c+1)*kvd], vw, vs, kvHalfTol), "%s: v entry", name)
				}
				assert.Equal(t, tc.pos, gotPos[c], "%s: kPos", name)
			}
			perEntry := len(rawK) / capEntries
			for e := 0; e < capEntries; e++ {
				if e == c {
					continue
				}
				for j := e * perEntry; j < (e+1)*perEntry; j++ {
					require.True(t, rawK[j] == decodeNaNWord && rawV[j] == decodeNaNWord, "%s: entry %d was written", name, e)
				}
				assert.Equal(t, uint32(0xdeadbeef), gotPos[e], "%s: kPos[%d] was written", name, e)
			}
		}
		t.Logf("%s cache: max q err/scale %.3g (tolerance %g)", kv, worst, ropeTol)
	}
}

func maxRelPair(got []float32, want, scale []float64) float64 {
	var m float64
	for i := range got {
		m = math.Max(m, math.Abs(float64(got[i])-want[i])/scale[i])
	}
	return m
}

// TestDecodeAttention: attention whose entry count is counts[layer] gives
// attention's results (same reference and tolerance, attentionTolerance),
// and reads no entry past the count (they are NaN); from an F32 and an F16
// cache. The F16 case's reference attends over the keys and values rounded
// to halves, as the cache holds them, so its tolerance is the same: what
// the rounding itself costs against an F32 cache is the engine's test
// (engine/vulkan TestKVCacheF16).
func TestDecodeAttention(t *testing.T) {
	dev := openDevice(t)
	for _, kv := range KVTypes {
		k := newKernel(t, dev, lookup(t, DecodeAttentionName(kv)))
		for i, sh := range []struct{ n, entries, nHead, nKVHead, hd int }{
			{1, 1, 8, 4, 8},
			{1, 37, 8, 4, 8},
			{1, 300, 3, 1, 6},
			{3, 70, 4, 2, 64}, // several query rows: some entries masked by position
			{1, 5, 2, 2, 128},
		} {
			name := fmt.Sprintf("kv%s_n%d_e%d_h%d_kv%d_hd%d", kv, sh.n, sh.entries, sh.nHead, sh.nKVHead, sh.hd)
			in := newDecodeAttentionInputs(t, dev, kv, sh.n, sh.entries, sh.nHead, sh.nKVHead, sh.hd, int64(i)+1)
			qd := sh.nHead * sh.hd
			rec := dev.NewRecorder()
			out := denseNaNBuffer(t, dev, sh.n*qd)
			rec.Dispatch(k, vk.MustPackPush(in.push), AttentionGroups(uint32(sh.n), uint32(sh.nHead)),
				append(in.binds, denseBind(out, vk.Write))...)
			require.NoError(t, dev.Run(rec))
			rec.Close()
			assert.NoError(t, closeness(download(t, out, sh.n*qd), in.want, in.scale, attentionTolerance), name)
		}
	}
}

// TestDecodeAttentionSplit: flash-decoding (decode_attention_split, then
// decode_attention_combine, recorded together so the barrier between them
// is derived) gives attention's results over contexts of 1, 17, 300 and
// 2100 entries, with 1, 4, 7 and 16 chunks (more chunks than entries
// included: empty chunks), from an F32 and an F16 cache. Tolerance
// attentionTolerance, as decode_attention: the chunks are one more level of
// the same online-softmax merge (rescale by exp(m - max), sum). The F16
// reference attends over the rounded keys and values, as in
// TestDecodeAttention.
func TestDecodeAttentionSplit(t *testing.T) {
	dev := openDevice(t)
	combine := newKernel(t, dev, lookup(t, "decode_attention_combine"))
	for _, kv := range KVTypes {
		v := lookup(t, DecodeAttentionSplitName(kv))
		for _, splits := range []uint32{1, 4, 7, 16} {
			k := newKernel(t, dev, v, DecodeAttentionSplitSpec(splits)...)
			for i, sh := range []struct{ n, entries, nHead, nKVHead, hd int }{
				{1, 1, 8, 4, 8},
				{1, 17, 4, 2, 64},
				{1, 300, 3, 1, 6},
				{3, 70, 4, 2, 64}, // several query rows: some entries masked by position
				{1, 2100, 4, 2, 64},
			} {
				name := fmt.Sprintf("kv%s_splits%d_n%d_e%d_h%d_kv%d_hd%d", kv, splits, sh.n, sh.entries, sh.nHead, sh.nKVHead, sh.hd)
				in := newDecodeAttentionInputs(t, dev, kv, sh.n, sh.entries, sh.nHead, sh.nKVHead, sh.hd, int64(i)+1)
				qd := sh.nHead * sh.hd
				part := denseNaNBuffer(t, dev, int(DecodeAttentionPartialFloats(uint32(sh.n), uint32(sh.nHead), uint32(sh.hd), splits)))
				out := denseNaNBuffer(t, dev, sh.n*qd)
				rec := dev.NewRecorder()
				rec.Dispatch(k, vk.MustPackPush(in.push), DecodeAttentionSplitGroups(uint32(sh.n), uint32(sh.nHead), splits),
					append(in.binds, denseBind(part, vk.Write))...)
				rec.Dispatch(combine, vk.MustPackPush(DecodeAttentionCombinePush{N: uint32(sh.n), NHead: uint32(sh.nHead),
					HeadDim: uint32(sh.hd), Splits: splits}), Groups(uint32(sh.n*sh.nHead)),
					denseBind(part, vk.Read), denseBind(out, vk.Write))
				require.NoError(t, dev.Run(rec))
				rec.Close()
				assert.NoError(t, closeness(download(t, out, sh.n*qd), in.want, in.scale, attentionTolerance), name)
			}
		}
	}
}

// decodeAttentionInputs are a decode attention case's push constants, its
// six input bindings (q, k, v, kPos, qPos, counts) and its reference.
type decodeAttentionInputs struct {
	push        DecodeAttentionPush
	binds       []vk.Bind
	want, scale []float64
}

// newDecodeAttentionInputs makes a case of n query rows over entries cache
// entries in a cache of type kv (the reference attends over the keys and
// values as the cache holds them), whose count counts[2] is entries, with
// four more entries past it that are visible by position and must be unread.
func newDecodeAttentionInputs(t *testing.T, dev *vk.Device, kv KV, n, entries, nHead, nKVHead, hd int, seed int64) decodeAttentionInputs {
	t.Helper()
	c := newAttentionCase(n, entries, nHead, nKVHead, hd, 3, seed)
	kRaw, kRounded := kvEncode(t, kv, c.k)
	vRaw, vRounded := kvEncode(t, kv, c.v)
	c.k, c.v = kRounded, vRounded
	want, scale := c.reference()
	capWords := (entries + 4) * nKVHead * hd * int(kv.ElementBytes()) / 4
	kPos := append(slices.Clone(c.kPos), 0, 0, 0, 0)
	const layer = 2
	return decodeAttentionInputs{
		push: DecodeAttentionPush{N: uint32(n), Layer: layer, NHead: uint32(nHead), NKVHead: uint32(nKVHead),
			HeadDim: uint32(hd), Scale: float32(1 / math.Sqrt(float64(hd)))},
		binds: []vk.Bind{
			denseBind(newBuffer(t, dev, f32bytes(c.q)), vk.Read),
			denseBind(decodeBuffer(t, dev, kRaw, capWords), vk.Read),
			denseBind(decodeBuffer(t, dev, vRaw, capWords), vk.Read),
			denseBind(newBuffer(t, dev, u32bytes(kPos)), vk.Read),
			denseBind(newBuffer(t, dev, u32bytes(c.qPos)), vk.Read),
			denseBind(newBuffer(t, dev, u32bytes([]uint32{5, 6, uint32(entries), 7})), vk.Read),
		},
		want: want, scale: scale,
	}
}

// decodeRepeat is x repeated n times (slices.Repeat needs Go 1.23).
func decodeRepeat(x []uint32, n int) []uint32 {
	var out []uint32
	for i := 0; i < n; i++ {
		out = append(out, x...)
	}
	return out
}

// decodeAttendBinds are decode_attend's bindings in order, each with the
// access the kernel makes.
func decodeAttendBinds(qkv, pos, freq, k, v, kPos, counts, part, done, out *vk.Buffer) []vk.Bind {
	return []vk.Bind{denseBind(qkv, vk.Read), denseBind(pos, vk.Read), denseBind(freq, vk.Read),
		denseBind(k, vk.ReadWrite), denseBind(v, vk.ReadWrite), denseBind(kPos, vk.ReadWrite), denseBind(counts, vk.ReadWrite),
		denseBind(part, vk.ReadWrite), denseBind(done, vk.ReadWrite), denseBind(out, vk.Write)}
}

// decodeAttendKernels are the two kernels of a fused decode attention:
// decode_attend and decode_attend_keys (the GPU profile's), each with its
// specialization for heads of hd and splits chunks.
var decodeAttendKernels = []struct {
	name func(KV) string
	spec func(hd, splits uint32) []uint32
}{
	{DecodeAttendName, func(_, splits uint32) []uint32 { return DecodeAttendSpec(splits) }},
	{DecodeAttendKeysName, DecodeAttendKeysSpec},
	// The GPU profile's with its hand-off (withHandoff: the same checks).
	{func(kv KV) string { return DecodeAttendKeysName(kv) + HandoffSuffix }, DecodeAttendKeysSpec},
}

// decodeAttendShape is one case of a fused decode attention: heads, the
// old entries before the token and how many of them lie after its
// position (masked), the cache's chunks.
type decodeAttendShape struct {
	nHead, nKVHead, hd int
	old, later         int // old entries; the last later of them at positions past the token's
	splits             uint32
}

// TestDecodeAttend: decode_attend and decode_attend_keys, a step's whole
// attention in one dispatch, over caches of c = 0, 16, 299 and 2099 old
// entries (contexts of 1, 17, 300 and 2100 with the token's own), split
// into 1, 4 and 16 chunks, with F32 and F16 caches (checkDecodeAttend).
func TestDecodeAttend(t *testing.T) {
	dev := openDevice(t)
	for _, kv := range KVTypes {
		for _, kern := range decodeAttendKernels {
			v := lookup(t, kern.name(kv))
			for _, splits := range []uint32{1, 4, 16} {
				k := newKernel(t, dev, v, kern.spec(64, splits)...)
				for _, old := range []int{0, 16, 299, 2099} {
					checkDecodeAttend(t, dev, k, v.Name, kv, decodeAttendShape{nHead: 4, nKVHead: 2, hd: 64, old: old, splits: splits})
				}
			}
		}
	}
}

// TestDecodeAttendKeys: decode_attend_keys over ragged shapes, against the
// CPU reference (checkDecodeAttend): contexts of 1, 2, 31, 33, 70 and 257
// (old entries 0, 1, 30, 32, 69, 256: less than a tile of the workgroup,
// one past it, several tiles), heads of 64, 96 (pairs not a power of two)
// and 128, query heads per kv head
// 1, 4 and 8, F32 and F16 caches, a cache in 1, 3 and 16 chunks (more
// chunks than entries too), some old entries masked (positions past the
// token's).
func TestDecodeAttendKeys(t *testing.T) {
	dev := openDevice(t)
	type heads struct{ nHead, nKVHead int }
	for _, kv := range KVTypes {
		v := lookup(t, DecodeAttendKeysName(kv))
		for _, hd := range []int{64, 96, 128} {
			for _, splits := range []uint32{1, 3, 16} {
				k := newKernel(t, dev, v, DecodeAttendKeysSpec(uint32(hd), splits)...)
				for i, hs := range []heads{{2, 2}, {8, 2}, {8, 1}} {
					for j, old := range []int{0, 1, 30, 32, 69, 256} {
						if (i+j)%2 == 1 && old > 40 {
							continue // the long contexts at half the head shapes: lavapipe's time
						}
						later := 0
						if old >= 30 {
							later = old / 10
						}
						checkDecodeAttend(t, dev, k, v.Name, kv, decodeAttendShape{nHead: hs.nHead, nKVHead: hs.nKVHead, hd: hd,
							old: old, later: later, splits: splits})
					}
				}
			}
		}
	}
}

// TestDecodeAttendFull: with the cache full (counts[layer] = maxEntries),
// decode_attend and decode_attend_keys append nothing (the cache and the
// count unchanged) and the token attends over the old entries alone, as
// the CPU's attention over them (BenchmarkDecodeAttendGPU's steady state).
func TestDecodeAttendFull(t *testing.T) {
	dev := openDevice(t)
	const nHead, nKVHead, hd, old = 4, 2, 64, 40
	qd, kvd := nHead*hd, nKVHead*hd
	freqs := ropeTable(t, hd, "llama3.2+linear4")
	for _, kv := range KVTypes {
		for _, kern := range decodeAttendKernels {
			for _, splits := range []uint32{1, 4} {
				name := fmt.Sprintf("%s/splits%d", kern.name(kv), splits)
				k := newKernel(t, dev, lookup(t, kern.name(kv)), kern.spec(hd, splits)...)
				c := newAttentionCase(1, old, nHead, nKVHead, hd, 3, 11)
				kRaw, kRounded := kvEncode(t, kv, c.k)
				vRaw, vRounded := kvEncode(t, kv, c.v)
				words := old * kvd * int(kv.ElementBytes()) / 4
				bK, bV := decodeBuffer(t, dev, kRaw, words), decodeBuffer(t, dev, vRaw, words)
				bKPos := newBuffer(t, dev, u32bytes(c.kPos))
				bCounts := newBuffer(t, dev, u32bytes([]uint32{old}))
				bDone := newBuffer(t, dev, u32bytes(make([]uint32, DecodeAttendDoneWords(nHead))))
				pos := c.kPos[old-1] + 1
				qkv := denseNormals(rand.New(rand.NewSource(5)), qd+2*kvd, 3)
				out := denseNaNBuffer(t, dev, qd)
				rec := dev.NewRecorder()
				push, binds := withHandoff(t, dev, k, vk.MustPackPush(DecodeAttendPush{HeadDim: hd, NHead: nHead, NKVHead: nKVHead, KOff: uint32(qd), VOff: uint32(qd + kvd),
					MaxEntries: old, Scale: float32(1 / math.Sqrt(hd))}),
					DecodeAttendGroups(nHead, splits), decodeAttendBinds(newBuffer(t, dev, f32bytes(qkv)), newBuffer(t, dev, u32bytes([]uint32{pos})),
						newBuffer(t, dev, u32bytes(RopeFreqs(freqs))), bK, bV, bKPos, bCounts,
						denseNaNBuffer(t, dev, nHead*int(splits)*(2+hd)), bDone, out))
				rec.Dispatch(k, push, DecodeAttendGroups(nHead, splits), binds...)
				require.NoError(t, dev.Run(rec))
				rec.Close()
				q := slices.Clone(qkv[:qd])
				mod.RoPE(q, int32(pos), freqs)
				ref := &attentionCase{n: 1, entries: old, nHead: nHead, nKVHead: nKVHead, hd: hd, q: q, k: kRounded, v: vRounded,
					kPos: c.kPos, qPos: []uint32{pos}}
				want, scale := ref.reference()
				assert.NoError(t, closeness(download(t, out, qd), want, scale, attentionTolerance+ropeTol), "%s: output", name)
				assert.Equal(t, []uint32{old}, downloadU32(t, bCounts, 1), "%s: the count", name)
				assert.Equal(t, c.kPos, downloadU32(t, bKPos, old), "%s: kPos", name)
				gotK, gotV := downloadU32(t, bK, words), downloadU32(t, bV, words)
				assert.Equal(t, kRaw, u32bytes(gotK), "%s: the keys", name)
				assert.Equal(t, vRaw, u32bytes(gotV), "%s: the values", name)
				assert.Equal(t, make([]uint32, DecodeAttendDoneWords(nHead)), downloadU32(t, bDone, int(DecodeAttendDoneWords(nHead))), "%s: done", name)
			}
		}
	}
}

// checkDecodeAttend runs kernel k (decode_attend's bindings) for two
// tokens of shape sh, one submit each, so the second sees the first's
// append and the done counters the first left at zero. Checked: the output
// against attention's reference over the rotated q, the old entries (as
// stored: rounded in F16) and the token's own k and v (exact in F32; in
// F16 as the cache holds them, the halves it appended, as the batched
// prefill and decode_attention read them), at attentionTolerance plus
// ropeTol (the GPU's rotation against mod.RoPE); the appended entry as
// TestDecodeKV checks decode_kv's; counts[layer] incremented once per token
// and no other count touched; done back to 0.
func checkDecodeAttend(t *testing.T, dev *vk.Device, k *vk.Kernel, kernel string, kv KV, sh decodeAttendShape) {
	t.Helper()
	nHead, nKVHead, hd, old, splits := sh.nHead, sh.nKVHead, sh.hd, sh.old, sh.splits
	const layer = 1
	qd, kvd := nHead*hd, nKVHead*hd
	kOff, vOff := qd+3, qd+3+kvd+1 // unaligned element offsets, as a qkv stack may give
	freqs := ropeTable(t, hd, "llama3.2+linear4")
	name := fmt.Sprintf("%s/kv%s/heads%d:%d/hd%d/splits%d/old%d", kernel, kv, nHead, nKVHead, hd, splits, old)
	rng := rand.New(rand.NewSource(int64(old) + int64(splits) + int64(hd) + int64(nHead)))
	maxEntries := old + 3
	// The old entries: random keys (already rotated) and values,
	// at ascending positions with gaps (a routed layer's).
	c := newAttentionCase(1, max(old, 1), nHead, nKVHead, hd, 3, int64(old)+7)
	oldK, oldV, oldPos := c.k[:old*kvd], c.v[:old*kvd], c.kPos[:old]
	kRaw, kRounded := kvEncode(t, kv, oldK)
	vRaw, vRounded := kvEncode(t, kv, oldV)
	words := maxEntries * kvd * int(kv.ElementBytes()) / 4
	bK, bV := decodeBuffer(t, dev, kRaw, words), decodeBuffer(t, dev, vRaw, words)
	pos := uint32(0)
	if old > sh.later {
		pos = oldPos[old-sh.later-1] + 2
	}
	for e := old - sh.later; e < old; e++ {
		oldPos[e] = pos + 100 + uint32(e) // past both tokens: masked
	}
	bKPos := newBuffer(t, dev, u32bytes(append(slices.Clone(oldPos), decodeRepeat([]uint32{0xdeadbeef}, maxEntries-old)...)))
	bCounts := newBuffer(t, dev, u32bytes([]uint32{77, uint32(old), 88}))
	bFreq := newBuffer(t, dev, u32bytes(RopeFreqs(freqs)))
	bPart := denseNaNBuffer(t, dev, nHead*int(splits)*(2+hd))
	bDone := newBuffer(t, dev, u32bytes(make([]uint32, DecodeAttendDoneWords(uint32(nHead)))))
	refK, refV, refPos := slices.Clone(kRounded), slices.Clone(vRounded), slices.Clone(oldPos)
	for step := 0; step < 2; step++ {
		qkv := denseNormals(rng, vOff+kvd, 1)
		for i := 0; i < qd; i++ {
			qkv[i] *= 3 // sharpen the softmax, as newAttentionCase
		}
		bQKV, bPos := newBuffer(t, dev, f32bytes(qkv)), newBuffer(t, dev, u32bytes([]uint32{pos}))
		out := denseNaNBuffer(t, dev, qd)
		rec := dev.NewRecorder()
		groups := DecodeAttendGroups(uint32(nHead), splits)
		push, binds := withHandoff(t, dev, k, vk.MustPackPush(DecodeAttendPush{HeadDim: uint32(hd), NHead: uint32(nHead), NKVHead: uint32(nKVHead), KOff: uint32(kOff), VOff: uint32(vOff),
			Layer: layer, MaxEntries: uint32(maxEntries), Scale: float32(1 / math.Sqrt(float64(hd)))}),
			groups, decodeAttendBinds(bQKV, bPos, bFreq, bK, bV, bKPos, bCounts, bPart, bDone, out))
		rec.Dispatch(k, push, groups, binds...)
		require.NoError(t, dev.Run(rec))
		rec.Close()

		q := slices.Clone(qkv[:qd])
		mod.RoPE(q, int32(pos), freqs)
		kNew := slices.Clone(qkv[kOff : kOff+kvd])
		mod.RoPE(kNew, int32(pos), freqs)
		vNew := qkv[vOff : vOff+kvd]
		n := old + step + 1
		gotK := kvDecode(t, kv, downloadU32(t, bK, words))[(n-1)*kvd : n*kvd]
		gotV := kvDecode(t, kv, downloadU32(t, bV, words))[(n-1)*kvd : n*kvd]
		selfK, selfV := kNew, vNew
		if kv == KVF16 {
			selfK, selfV = gotK, gotV
		}
		ref := &attentionCase{n: 1, entries: len(refPos) + 1, nHead: nHead, nKVHead: nKVHead, hd: hd, q: q,
			k: append(slices.Clone(refK), selfK...), v: append(slices.Clone(refV), selfV...),
			kPos: append(slices.Clone(refPos), pos), qPos: []uint32{pos}}
		want, scale := ref.reference()
		assert.NoError(t, closeness(download(t, out, qd), want, scale, attentionTolerance+ropeTol), "%s step %d: output", name, step)

		assert.Equal(t, []uint32{77, uint32(n), 88}, downloadU32(t, bCounts, 3), "%s step %d: counts", name, step)
		assert.Equal(t, make([]uint32, DecodeAttendDoneWords(uint32(nHead))), downloadU32(t, bDone, int(DecodeAttendDoneWords(uint32(nHead)))), "%s: done left at zero", name)
		gotPos := downloadU32(t, bKPos, maxEntries)
		assert.Equal(t, pos, gotPos[n-1], "%s step %d: kPos", name, step)
		tol := ropeTol
		if kv == KVF16 {
			tol += kvHalfTol
		}
		w, s := ropeScale(kNew)
		assert.NoError(t, closeness(gotK, w, s, tol), "%s step %d: appended k", name, step)
		vw, vs := make([]float64, kvd), make([]float64, kvd)
		for i, x := range vNew {
			vw[i], vs[i] = float64(x), math.Abs(float64(x))
			if kv == KVF16 {
				// Below 2^-14 a half is a subnormal, in absolute steps of
				// 2^-24: kvHalfTol of 2^-14 is half a step, its rounding.
				vs[i] = max(vs[i], 1.0/16384)
			}
		}
		assert.NoError(t, closeness(gotV, vw, vs, tol), "%s step %d: appended v", name, step)
		// The next token attends over this one as the cache holds it.
		refK, refV, refPos = append(refK, gotK...), append(refV, gotV...), append(refPos, pos)
		pos += 3
	}
}
