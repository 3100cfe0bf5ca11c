package shaders

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/require"
)

// decodeAttendBenchShape is a model's attention heads, a context (the
// entries a decode step attends over) and the cache's capacity, which sets
// the chunks (AttentionSplits on a GPU's profile).
type decodeAttendBenchShape struct {
	name               string
	nHead, nKVHead, hd int
	ctx, capacity      int
}

// decodeAttendGPUShapes: TinyLlama-1.1B (32 query heads over 4 kv heads of
// 64) at the context of the H200's --profile of issue 42 (70, capacity
// 2048: 8 chunks), a prompt's (512) and a long one (4096); Llama-2-7B's
// 32 heads of 128 at the same.
var decodeAttendGPUShapes = []decodeAttendBenchShape{
	{"1.1b", 32, 4, 64, 70, 2048}, {"1.1b", 32, 4, 64, 512, 2048}, {"1.1b", 32, 4, 64, 4096, 4096},
	{"7b", 32, 32, 128, 70, 4096}, {"7b", 32, 32, 128, 512, 4096}, {"7b", 32, 32, 128, 4096, 4096},
}

// decodeAttendCPUShapes are tiny, so that the benchmark's code and its
// validation run in seconds on lavapipe.
var decodeAttendCPUShapes = []decodeAttendBenchShape{
	{"tiny", 4, 2, 64, 70, 2048}, {"tiny", 4, 2, 64, 512, 2048},
}

// BenchmarkDecodeAttendGPU times decode_attend (old) against
// decode_attend_keys (keys) on decode steps' attention (issue 42 item 5:
// decode_attend took 24.97 us a layer on an H200 at a context under 70,
// docs/decode-attention-cost.md), F16 cache, as the engine dispatches them
// (DecodeAttendGroups(nHead, splits), one after another with the barrier
// between). The cache holds ctx entries and counts says ctx with
// maxEntries = ctx, so no call appends (the count stays, every call
// attends over the same ctx old entries: the token's own key and value,
// one entry from shared memory, is the only work left out). Each kernel is
// checked against attention's CPU reference before timing; with
// timestamps the GPU's clock times the dispatches. Reported: us/call and
// the cache's bytes read per second (the K and V of ctx entries of every
// kv head).
//
// Run from the compiled test binary on a GPU machine:
//
//	shaders.test -test.run '^$' -test.bench BenchmarkDecodeAttendGPU -test.benchtime 200x
func BenchmarkDecodeAttendGPU(b *testing.B) {
	dev := openDeviceWith(b, vk.InstanceOptions{})
	d := deviceOf(dev)
	prof := GPUProfile(d)
	shapes := decodeAttendGPUShapes
	if d.CPU {
		shapes = decodeAttendCPUShapes
	}
	kv := KVF16
	for _, sh := range shapes {
		splits := prof.AttentionSplits(sh.capacity)
		b.Run(fmt.Sprintf("%s/ctx%d/splits%d", sh.name, sh.ctx, splits), func(b *testing.B) {
			in := newDecodeAttendBenchInput(b, dev, kv, sh, splits)
			for _, kern := range []struct {
				label string
				name  string
				spec  []uint32
			}{
				{"old", DecodeAttendName(kv), prof.Fit(lookup(b, DecodeAttendName(kv)), DecodeAttendSpec(splits))},
				{"keys", DecodeAttendKeysName(kv), DecodeAttendKeysSpec(uint32(sh.hd), splits)},
			} {
				b.Run(fmt.Sprintf("%s%v", kern.label, kern.spec), func(b *testing.B) {
					k := newKernel(b, dev, lookup(b, kern.name), kern.spec...)
					in.bench(b, dev, k, splits)
				})
			}
		})
	}
}

// decodeAttendBenchInput is one shape's buffers and the CPU's output.
type decodeAttendBenchInput struct {
	sh                                                  decodeAttendBenchShape
	qkv, pos, freq, k, v, kPos, counts, part, done, out *vk.Buffer
	push                                                []byte
	want, scale                                         []float64
	cacheBytes                                          float64
}

func newDecodeAttendBenchInput(b *testing.B, dev *vk.Device, kv KV, sh decodeAttendBenchShape, splits uint32) *decodeAttendBenchInput {
	qd, kvd := sh.nHead*sh.hd, sh.nKVHead*sh.hd
	kOff, vOff := qd, qd+kvd
	freqs := ropeTable(b, sh.hd, "llama3.2+linear4")
	c := newAttentionCase(1, sh.ctx, sh.nHead, sh.nKVHead, sh.hd, 3, int64(sh.ctx))
	kRaw, kRounded := kvEncode(b, kv, c.k)
	vRaw, vRounded := kvEncode(b, kv, c.v)
	pos := c.kPos[sh.ctx-1] + 1
	qkv := denseNormals(rand.New(rand.NewSource(int64(sh.hd))), vOff+kvd, 3)
	q := slices.Clone(qkv[:qd])
	mod.RoPE(q, int32(pos), freqs)
	ref := &attentionCase{n: 1, entries: sh.ctx, nHead: sh.nHead, nKVHead: sh.nKVHead, hd: sh.hd, q: q,
		k: kRounded, v: vRounded, kPos: c.kPos, qPos: []uint32{pos}}
	in := &decodeAttendBenchInput{sh: sh,
		qkv: newBuffer(b, dev, f32bytes(qkv)), pos: newBuffer(b, dev, u32bytes([]uint32{pos})),
		freq: newBuffer(b, dev, u32bytes(RopeFreqs(freqs))),
		k:    newBuffer(b, dev, kRaw), v: newBuffer(b, dev, vRaw), kPos: newBuffer(b, dev, u32bytes(c.kPos)),
		counts: newBuffer(b, dev, u32bytes([]uint32{uint32(sh.ctx)})),
		part:   denseNaNBuffer(b, dev, sh.nHead*int(splits)*(2+sh.hd)),
		done:   newBuffer(b, dev, u32bytes(make([]uint32, DecodeAttendDoneWords(uint32(sh.nHead))))),
		out:    denseNaNBuffer(b, dev, qd),
		push: vk.MustPackPush(DecodeAttendPush{HeadDim: uint32(sh.hd), NHead: uint32(sh.nHead), NKVHead: uint32(sh.nKVHead),
			KOff: uint32(kOff), VOff: uint32(vOff), MaxEntries: uint32(sh.ctx), Scale: float32(1 / math.Sqrt(float64(sh.hd)))}),
		cacheBytes: float64(2 * sh.ctx * kvd * int(kv.ElementBytes())),
	}
	in.want, in.scale = ref.reference()
	return in
}

// bench checks kernel k's output, then times it.
func (in *decodeAttendBenchInput) bench(b *testing.B, dev *vk.Device, k *vk.Kernel, splits uint32) {
	groups := DecodeAttendGroups(uint32(in.sh.nHead), splits)
	binds := decodeAttendBinds(in.qkv, in.pos, in.freq, in.k, in.v, in.kPos, in.counts, in.part, in.done, in.out)
	check := dev.NewRecorder()
	check.Dispatch(k, in.push, groups, binds...)
	require.NoError(b, dev.Run(check))
	check.Close()
	qd := in.sh.nHead * in.sh.hd
	if err := closeness(download(b, in.out, qd), in.want, in.scale, attentionTolerance+ropeTol); err != nil {
		b.Fatalf("wrong before timing: %v", err)
	}
	require.Equal(b, []uint32{uint32(in.sh.ctx)}, downloadU32(b, in.counts, 1), "no append: the count stays")

	const perRun = 32 // a decode step's layers, one after another
	rec := dev.NewRecorder()
	defer rec.Close()
	for i := 0; i < perRun; i++ {
		rec.Dispatch(k, in.push, groups, binds...)
	}
	perCall := timeReplays(b, dev, rec) / perRun
	b.ReportMetric(perCall/1e3, "us/call")
	b.ReportMetric(in.cacheBytes/perCall, "cache-GB/s")
}
