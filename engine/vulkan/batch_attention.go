package vulkan

import (
	"math"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// Batched attention (eval windows and prefill chunks) in key tiles
// (attention_split.comp): attention_split runs each (row, head, tile) in a
// workgroup, attention_merge combines the tiles. An invocation's loops are
// bounded by the tile, not the context, so any context runs on any device
// (lavapipe's loop limit included), and a long one gives the GPU more
// workgroups.

// Every cache attended here ascends by position (an eval window's rows or
// selected rows, ascending; a generate-mode cache, appended in position
// order), so the kernel is told so (Sorted): a row stops at its first later
// entry.

// attentionArgs are one batched attention's buffers and sizes.
type attentionArgs struct {
	n       uint32     // query rows
	kv      string     // k and v's element type: shaders.KVF32, or KVF16 (a generate-mode cache)
	entries uint32     // cache entries; with counts, the most there can be
	layer   uint32     // with counts: the entry count is counts[layer]
	counts  *vk.Buffer // nil: entries is exact
	q, k, v *vk.Buffer
	kPos    *vk.Buffer
	qPos    *vk.Buffer
	partO   *vk.Buffer // batchAttentionParts
	partML  *vk.Buffer
	out     *vk.Buffer
}

// attentionSplitLen is the key tile length on this device.
func (r *Runner) attentionSplitLen() uint32 {
	return shaders.AttentionSplitLen(uint32(r.c.HeadDim), r.ks.prof.CPU)
}

// batchAttentionParts makes the partial-result buffers of attention over up to n
// rows and entries entries.
func (r *Runner) batchAttentionParts(must func(uint64, vk.BufferKind) *vk.Buffer, n, entries int) (partO, partML *vk.Buffer) {
	splits := uint64(shaders.AttentionSplits(uint32(entries), r.attentionSplitLen()))
	rows := uint64(n) * uint64(r.c.NHead) * splits
	return must(4*rows*uint64(r.c.HeadDim), vk.DeviceLocal), must(8*rows, vk.DeviceLocal)
}

// batchAttentionOps are the two dispatches of a batched attention.
func (r *Runner) batchAttentionOps(a attentionArgs) ([]op, error) {
	c := r.c
	name, counts := "attention_split", a.counts
	if counts != nil {
		name = "attention_split_counts"
	} else {
		counts = a.qPos // unread: any buffer
	}
	split, err := r.ks.get(name+a.kv, shaders.AttentionSplitSpec(uint32(c.HeadDim)))
	if err != nil {
		return nil, err
	}
	merge, err := r.ks.get("attention_merge", nil)
	if err != nil {
		return nil, err
	}
	splitLen := r.attentionSplitLen()
	splits := shaders.AttentionSplits(a.entries, splitLen)
	push := shaders.AttentionSplitPush{N: a.n, Entries: a.entries, NHead: uint32(c.NHead), NKVHead: uint32(c.NKVHead),
		HeadDim: uint32(c.HeadDim), Scale: float32(1 / math.Sqrt(float64(c.HeadDim))), Layer: a.layer,
		Splits: splits, SplitLen: splitLen, Sorted: 1}
	return []op{
		newOp(split, push, shaders.AttentionSplitGroups(a.n, uint32(c.NHead), splits),
			rd(a.q, 0, 0), rd(a.k, 0, 0), rd(a.v, 0, 0), rd(a.kPos, 0, 0), rd(a.qPos, 0, 0), rd(counts, 0, 0),
			wr(a.partO, 0, 0), wr(a.partML, 0, 0)),
		newOp(merge, push, shaders.AttentionMergeGroups(a.n, uint32(c.NHead)),
			rd(a.partO, 0, 0), rd(a.partML, 0, 0), wr(a.out, 0, 0)),
	}, nil
}
