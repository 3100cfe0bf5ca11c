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
	maxRows uint32     // the most rows there can be (a routed block's n is a GPU-side count's bound): sets the row groups; 0: n
	kv      shaders.KV // k and v's element type: shaders.KVF32, or KVF16 (a generate-mode cache)
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
	return r.ks.prof.AttentionSplitLen(uint32(r.c.HeadDim))
}

// attentionGroupRows is how many query rows one attention_split and
// attention_merge pair takes, of a batch of up to n rows over entries
// entries: all of them when their partial results fit in a binding
// (maxStorageBufferRange: a long context's tiles times 512 rows of a 7B
// model's 32 heads of 128 are 226 MB, over lavapipe's 128 MiB), else the
// most that do in a multiple of 64 rows (their offsets then stay aligned).
func (r *Runner) attentionGroupRows(n, entries uint32) uint32 {
	splits := uint64(shaders.AttentionSplits(entries, r.attentionSplitLen()))
	perRow := 4 * uint64(r.c.NHead) * splits * uint64(r.c.HeadDim)
	limit := r.ks.prof.MaxStorageBufferRange
	if attentionRange != 0 {
		limit = attentionRange
	}
	if per, ok := splitRows(limit, int(n), perRow, 64); ok {
		return uint32(per)
	}
	return 64 // over the range: the recorder refuses it by name
}

// attentionRange, when not 0, replaces the binding range in
// attentionGroupRows: tests set it to make row groups on a small model.
var attentionRange uint64

// batchAttentionParts makes the partial-result buffers of attention over up
// to n rows (a group of them: attentionGroupRows) and entries entries.
func (r *Runner) batchAttentionParts(must func(uint64, vk.BufferKind) *vk.Buffer, n, entries int) (partO, partML *vk.Buffer) {
	splits := uint64(shaders.AttentionSplits(uint32(entries), r.attentionSplitLen()))
	rows := uint64(r.attentionGroupRows(uint32(n), uint32(entries))) * uint64(r.c.NHead) * splits
	return must(4*rows*uint64(r.c.HeadDim), vk.DeviceLocal), must(8*rows, vk.DeviceLocal)
}

// batchAttentionOps are the dispatches of a batched attention: a pair of
// attention_split and attention_merge per group of rows (one group unless
// the partial results would pass a binding's range). The number of
// dispatches depends on maxRows only; a group past the n rows is a
// dispatch of no workgroups.
func (r *Runner) batchAttentionOps(a attentionArgs) ([]op, error) {
	c := r.c
	counts := a.counts
	if counts == nil {
		counts = a.qPos // unread: any buffer
	}
	splitName, splitSpec := r.ks.prof.AttentionSplit(a.kv, a.counts != nil, uint32(c.HeadDim))
	split, err := r.ks.get(splitName, splitSpec)
	if err != nil {
		return nil, err
	}
	merge, err := r.ks.get("attention_merge", nil)
	if err != nil {
		return nil, err
	}
	maxRows := max(a.maxRows, a.n)
	group := r.attentionGroupRows(maxRows, a.entries)
	splitLen := r.attentionSplitLen()
	splits := shaders.AttentionSplits(a.entries, splitLen)
	qB := 4 * uint64(c.NHead*c.HeadDim) // a row of q and out
	var ops []op
	for i0 := uint32(0); i0 < maxRows; i0 += group {
		rows := min(group, a.n-min(a.n, i0))
		push := shaders.AttentionSplitPush{N: rows, Entries: a.entries, NHead: uint32(c.NHead), NKVHead: uint32(c.NKVHead),
			HeadDim: uint32(c.HeadDim), Scale: float32(1 / math.Sqrt(float64(c.HeadDim))), Layer: a.layer,
			Splits: splits, SplitLen: splitLen, Sorted: 1}
		q, qPos, out := rd(a.q, 0, 0), rd(a.qPos, 0, 0), wr(a.out, 0, 0)
		if group < maxRows { // bind the group's rows
			g := uint64(min(group, maxRows-i0))
			q = rd(a.q, uint64(i0)*qB, g*qB)
			qPos = rd(a.qPos, 4*uint64(i0), 4*g)
			out = wr(a.out, uint64(i0)*qB, g*qB)
		}
		ops = append(ops,
			newOp(split, push, shaders.AttentionSplitGroupsOf(splitName, splitSpec, rows, uint32(c.NHead), splits),
				q, rd(a.k, 0, 0), rd(a.v, 0, 0), rd(a.kPos, 0, 0), qPos, rd(counts, 0, 0),
				wr(a.partO, 0, 0), wr(a.partML, 0, 0)),
			newOp(merge, push, shaders.AttentionMergeGroups(rows, uint32(c.NHead)),
				rd(a.partO, 0, 0), rd(a.partML, 0, 0), out))
	}
	return ops, nil
}
