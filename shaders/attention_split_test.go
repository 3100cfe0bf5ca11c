package shaders

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/require"
)

// runSplit computes c with attention_split (or attention_split_counts, the
// entry count in counts[1] and entries only a bound) and attention_merge, in
// key tiles of splitLen. groups is the split kernel's dispatch size (nil:
// attention_split's, AttentionSplitGroups).
func (c *attentionCase) runSplit(t testing.TB, dev *vk.Device, split, merge *vk.Kernel, splitLen uint32, counts, f16 bool, sorted uint32, groups func(n, nHead, splits uint32) [3]uint32) []float32 {
	t.Helper()
	rec, out := c.splitRecorder(t, dev, split, merge, splitLen, counts, f16, sorted, groups)
	require.NoError(t, dev.Run(rec))
	return download(t, out, c.n*c.nHead*c.hd)
}

// splitRecorder is runSplit's recording (its buffers freed at the test's
// end) and the output buffer it fills.
func (c *attentionCase) splitRecorder(t testing.TB, dev *vk.Device, split, merge *vk.Kernel, splitLen uint32, counts, f16 bool, sorted uint32, groups func(n, nHead, splits uint32) [3]uint32) (*vk.Recorder, *vk.Buffer) {
	t.Helper()
	if groups == nil {
		groups = AttentionSplitGroups
	}
	b := c.upload(t, dev)
	t.Cleanup(b.close)
	if f16 { // the cache as halves (c's keys and values are already rounded to them)
		for _, kv := range []struct {
			buf **vk.Buffer
			x   []float32
		}{{&b.k, c.k}, {&b.v, c.v}} {
			h, err := gguf.Quantize(gguf.TypeF16, kv.x)
			require.NoError(t, err)
			(*kv.buf).Close()
			*kv.buf = newBuffer(t, dev, h)
		}
	}
	entries := uint32(c.entries)
	var cnt []uint32
	if counts {
		cnt = []uint32{0, entries, 0}
		entries += 5 + splitLen // a bound past the count, by a whole tile: the entries beyond must not be read, the tile past them is empty
	} else {
		cnt = []uint32{0}
	}
	bCounts := newBuffer(t, dev, u32bytes(cnt))
	t.Cleanup(bCounts.Close)
	splits := AttentionSplits(entries, splitLen)
	rows := uint64(c.n * c.nHead * int(splits))
	partO, err := dev.NewBuffer(4*rows*uint64(c.hd), vk.DeviceLocal)
	require.NoError(t, err)
	t.Cleanup(partO.Close)
	partML, err := dev.NewBuffer(8*rows, vk.DeviceLocal)
	require.NoError(t, err)
	t.Cleanup(partML.Close)
	push := vk.MustPackPush(AttentionSplitPush{N: uint32(c.n), Entries: entries, NHead: uint32(c.nHead),
		NKVHead: uint32(c.nKVHead), HeadDim: uint32(c.hd), Scale: float32(1 / math.Sqrt(float64(c.hd))),
		Layer: 1, Splits: splits, SplitLen: splitLen, Sorted: sorted})
	rec := dev.NewRecorder()
	t.Cleanup(rec.Close)
	rec.Fill(b.out, 0, b.out.Size(), 0x7fc00000)
	// NaN partials: a tile that saw no key leaves its partO as it was, and
	// the merge must not read it (nor a (m, l) the kernel failed to write).
	rec.Fill(partO, 0, partO.Size(), 0x7fc00000)
	rec.Fill(partML, 0, partML.Size(), 0x7fc00000)
	r := func(x *vk.Buffer) vk.Bind { return vk.Bind{Buf: x, Access: vk.Read} }
	w := func(x *vk.Buffer) vk.Bind { return vk.Bind{Buf: x, Access: vk.Write} }
	rec.Dispatch(split, push, groups(uint32(c.n), uint32(c.nHead), splits),
		r(b.q), r(b.k), r(b.v), r(b.kPos), r(b.qPos), r(bCounts), w(partO), w(partML))
	rec.Dispatch(merge, push, AttentionMergeGroups(uint32(c.n), uint32(c.nHead)), r(partO), r(partML), w(b.out))
	return rec, b.out
}

// splitCase is a batched attention problem of TestAttentionSplit and
// TestAttentionCoopEmulated: n query rows over a cache of entries, heads
// and KV heads of hd, q times qScale, in key tiles of splitLen.
type splitCase struct {
	n, entries, nHead, nKVHead, hd int
	qScale                         float64
	splitLen                       uint32
}

func (tc splitCase) String() string {
	return fmt.Sprintf("n%d/entries%d/heads%d:%d/hd%d/q%g/tile%d", tc.n, tc.entries, tc.nHead, tc.nKVHead, tc.hd, tc.qScale, tc.splitLen)
}

// build makes the case's inputs from seed; with nothingSeen every entry
// moves one position later and row 0 sits at position 0, before all of
// them: it sees none (zeros).
func (tc splitCase) build(seed int64, nothingSeen bool) *attentionCase {
	c := newAttentionCase(tc.n, tc.entries, tc.nHead, tc.nKVHead, tc.hd, tc.qScale, seed)
	if nothingSeen {
		c.qPos[0] = 0
		for e := range c.kPos {
			c.kPos[e]++
		}
	}
	return c
}

// TestAttentionSplit: attention in key tiles against mod.Attend, at
// attentionTolerance (the softmax's roundings, plus the merge
// of tiles by their common max). Tiles of 1, 3, 7, 64 and the CPU and GPU
// lengths; more rows than a workgroup takes; ragged heads and GQA; rows
// that see no entry (zeros); a context of 5000 (past what a single pass
// could walk under lavapipe's loop limit with the largest head) with the
// CPU tile; the counts variant with a bound past the count, also reading
// an F16 cache (the keys and values rounded to halves for the reference);
// each with Sorted 0 and 1 (the caches ascend).
func TestAttentionSplit(t *testing.T) {
	dev := openDevice(t)
	merge := newKernel(t, dev, lookup(t, "attention_merge"))
	cases := []splitCase{
		{1, 1, 1, 1, 8, 1, 1},
		{5, 5, 2, 1, 8, 1, 3},
		{7, 100, 6, 3, 16, 1, 7},
		{40, 300, 4, 2, 8, 8, 64},
		{9, 64, 3, 1, 16, 40, 3}, // scores up to ~+-120: the merge must subtract the max
		{33, 600, 5, 1, 64, 1, AttentionSplitLenGPU},
		{70, 700, 2, 2, 48, 1, AttentionSplitLen(48, true)},   // three blocks of rows
		{2, 5000, 2, 1, 128, 1, AttentionSplitLen(128, true)}, // many tiles of the largest head
		{33, 200, 2, 1, 6, 1, 200},                            // one tile of more keys than are staged at a time
	}
	// Each variant one invocation a row, and the ATTN_LANES ones with 2, 4
	// and 8 lanes a row where the subgroups hold them (lavapipe's 8: all):
	// heads of fewer quads than lanes leave lanes idle.
	type run struct {
		variant string
		lpr     uint32
	}
	var runs []run
	for _, kv := range []KV{KVF32, KVF16} {
		for _, counts := range []bool{false, true} {
			if kv == KVF16 && !counts {
				continue // no such variant: an eval window's cache is F32
			}
			runs = append(runs, run{AttentionSplitName(kv, counts), 1})
			d := deviceOf(dev)
			for _, lpr := range []uint32{2, 4, 8} {
				if d.SubgroupShuffle && d.SubgroupSize >= lpr {
					runs = append(runs, run{AttentionSplitLanesName(kv, counts), lpr})
				}
			}
		}
	}
	for _, r := range runs {
		variant := r.variant
		f16 := strings.HasSuffix(variant, "_f16")
		var stats errStats
		for i, tc := range cases {
			spec := AttentionSplitSpec(uint32(tc.hd))
			if r.lpr > 1 {
				spec = AttentionSplitLanesSpec(uint32(tc.hd), r.lpr)
			}
			split := newKernel(t, dev, lookup(t, variant), spec...)
			name := fmt.Sprintf("%s%v/%v", variant, spec, tc)
			c := tc.build(int64(i), i == 1)
			if f16 {
				roundToHalf(t, c.k)
				roundToHalf(t, c.v)
			}
			want, scale := c.reference()
			if r.lpr > 1 {
				scale = c.lanesScale(scale, r.lpr)
			}
			for _, sorted := range []uint32{0, 1} { // the cases' kPos ascend
				got := c.runSplit(t, dev, split, merge, tc.splitLen, strings.Contains(variant, "_counts"), f16, sorted, nil)
				stats.add(got, want, scale)
				if err := closeness(got, want, scale, attentionTolerance); err != nil {
					t.Errorf("%s/sorted%d: %v", name, sorted, err)
				}
			}
		}
		t.Logf("%s, %d lanes a row: %v (tolerance %g)", variant, r.lpr, stats, attentionTolerance)
	}
}

// lanesScale is scale widened for attention_split's ATTN_LANES variants
// with lpr lanes a row, whose scores sum in another order than the oracle's
// (mod.Attend: element by element; a lane: its 4*ceil(hd/4/lpr) elements
// in order, then log2(lpr) sums across lanes). Each order's float32 sum of
// hd products is within gamma(terms) * sum_d |q_d k_d| of the exact one
// (gamma(n) = n u / (1 - n u), u = 2^-24: Higham, Accuracy and Stability
// of Numerical Algorithms, 3.1), so a score may differ by delta = (gamma(hd)
// + gamma(lane terms)) * max_e sum_d |q_d k_e,d| / sqrt(hd). Every score
// moved by up to delta moves each probability by a factor within
// exp(+-2 delta), so an output by at most (exp(2 delta) - 1) sum_e p_e
// |v_e[d]|: that much is added to attentionTolerance, per row and head.
func (c *attentionCase) lanesScale(scale []float64, lpr uint32) []float64 {
	gamma := func(n int) float64 {
		u := math.Ldexp(1, -24)
		return float64(n) * u / (1 - float64(n)*u)
	}
	quads := (c.hd + 3) / 4
	laneTerms := 4*((quads+int(lpr)-1)/int(lpr)) + bits.Len32(lpr) - 1
	qd, kvd := c.nHead*c.hd, c.nKVHead*c.hd
	out := slices.Clone(scale)
	for i := range c.n {
		for h := range c.nHead {
			kvh := h / (c.nHead / c.nKVHead)
			var maxAbs float64
			for e, pos := range c.kPos {
				if pos > c.qPos[i] {
					continue
				}
				var sum float64
				for d := range c.hd {
					sum += math.Abs(float64(c.q[i*qd+h*c.hd+d]) * float64(c.k[e*kvd+kvh*c.hd+d]))
				}
				maxAbs = math.Max(maxAbs, sum)
			}
			delta := (gamma(c.hd) + gamma(laneTerms)) * maxAbs / math.Sqrt(float64(c.hd))
			widen := 1 + math.Expm1(2*delta)/attentionTolerance
			for d := range c.hd {
				out[i*qd+h*c.hd+d] *= widen
			}
		}
	}
	return out
}

// roundToHalf rounds x to IEEE halves, in place.
func roundToHalf(t testing.TB, x []float32) {
	t.Helper()
	h, err := gguf.Quantize(gguf.TypeF16, x)
	require.NoError(t, err)
	require.NoError(t, gguf.Dequantize(gguf.TypeF16, h, x))
}
