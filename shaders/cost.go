package shaders

import (
	"bytes"
	"encoding/binary"
	"strings"
)

// The arithmetic of a dispatch, from its variant's name and push constants:
// what `modrun run --profile` divides by a kernel's GPU time for its
// TFLOP/s, and the path whose peak (the compute probe's) that rate is a
// share of.
//
// Counted: the multiply-adds of the products, 2 FLOPs each. A matmul or
// matvec computes rows x cols products per token (gate and up stacked for
// the _swiglu fusion: twice the rows); attention, per query row, head and
// key it attends to, a q.k dot product and a v accumulation of headDim
// each: 4*headDim. Not counted: norms, softmax exponentials, scales,
// dequantization, the fusions' adds, and every kernel that only moves or
// selects (their cost is bytes or dispatches, not FLOPs).
//
// A causal row attends to the keys at or before its position, not to the
// whole cache: attention's FLOPs sum, over the dispatch's rows i (0-based),
// the keys row i sees. With the entry count in the push constants
// (attention_split: an eval window, a routed layer's selected rows), the
// rows are the last N of Entries in position order, so row i sees
// Entries-N+i+1. Where the count lives on the GPU (the generate-mode
// cache's counts[layer]) the host knows it from the pass's first position
// only: row i of a pass starting at position start sees start+i+1 keys
// (a dense layer's cache holds every position). That part of the count is
// Cost.PerStart, multiplied by start when a replay's position is known.

// Path is the arithmetic a kernel's products run on, whose peak its rate is
// a share of.
type Path string

const (
	PathShader Path = "fp32"   // shader arithmetic: FP32 FMAs (the compute probe's probe_fma)
	PathTensor Path = "tensor" // tensor cores: cooperative matrices, f16 x f16 -> f32 (probe_coop)
)

// Cost is the arithmetic of one dispatch.
type Cost struct {
	FLOPs    uint64 // at a pass starting at position 0
	PerStart uint64 // more FLOPs per position of the pass's first row (keys counted on the GPU)
	Path     Path
}

// At is the dispatch's FLOPs in a pass whose first row is at position start.
func (c Cost) At(start uint32) uint64 { return c.FLOPs + c.PerStart*uint64(start) }

// costRule counts the FLOPs of the variants whose name starts with prefix
// (the first rule that matches decides): cost reads the push constants.
type costRule struct {
	prefix string
	path   Path
	cost   func(name string, push []byte) (Cost, bool)
}

// costRules: a new kernel family is one row. A split-K matmul whose partial
// products go to a reduce kernel would be {"matmul_split_", PathShader,
// pushCost(matmulCost)} when it takes MatmulPush (its FLOPs are the whole
// product's, wherever the sums end up; a push block of its own needs its
// own cost function), and its reduce kernel, which adds partial sums,
// {"matmul_reduce", PathShader, nil}, so that "matmul_" does not count it
// as a product (TestKernelCostCoversVariants fails until it has a row).
// The first matching row decides: longer prefixes first.
var costRules = []costRule{
	{"matmul_coop_emu_", PathShader, pushCost(matmulCost)}, // the tile product emulated in shader arithmetic
	{"matmul_coop_hilo_emu_", PathShader, pushCost(matmulCost)},
	// The hilo kernel's FLOPs are the product's (2·n·rows·cols), not the
	// three tensor products it takes for them: its share of the tensor peak
	// is of useful work.
	{"matmul_coop_", PathTensor, pushCost(matmulCost)},
	// The direct matmul: the same count (its columns padded to 32, as the
	// planes are: every model's are already), and its planes passes none.
	{"matmul_direct_emu", PathShader, pushCost(directCost)},
	{"matmul_direct_hilo_emu", PathShader, pushCost(directCost)},
	{"matmul_direct", PathTensor, pushCost(directCost)},
	{"planes_", PathShader, nil},
	{"matmul_", PathShader, pushCost(matmulCost)}, // matmul_<type>, matmul_pf_<type>
	{"matvec_", PathShader, pushCost(matvecCost)},
	{"attention_split_counts", PathShader, pushCost(attentionSplitCountsCost)},
	{"attention_split", PathShader, pushCost(attentionSplitCost)},
	{"decode_attention_split", PathShader, pushCost(decodeAttentionCost)},
	{"decode_attention_combine", PathShader, nil},
	{"decode_attention", PathShader, pushCost(decodeAttentionCost)},
	{"decode_attend_keys", PathShader, pushCost(decodeAttendCost)}, // decode_attend's push and arithmetic, keys across invocations
	{"decode_attend", PathShader, pushCost(decodeAttendCost)},
}

// KernelCost is the arithmetic of a dispatch of variant name with push
// constants push (packed as vk.PackPush packs them); ok is false for a
// kernel whose FLOPs are not counted (see above) or a push block that is
// not its variant's.
func KernelCost(name string, push []byte) (c Cost, ok bool) {
	if base, cut := strings.CutSuffix(name, HandoffSuffix); cut { // its base's arithmetic, before the hand-off's push constants
		hb := binary.Size(HandoffPush{})
		if len(push) < hb {
			return Cost{}, false
		}
		name, push = base, push[:len(push)-hb]
	}
	for _, r := range costRules {
		if !strings.HasPrefix(name, r.prefix) {
			continue
		}
		if r.cost == nil {
			return Cost{}, false
		}
		c, ok = r.cost(name, push)
		c.Path = r.path
		return c, ok
	}
	return Cost{}, false
}

// pushCost adapts a cost of push-constant struct P to a costRule's: the
// bytes must be exactly one P.
func pushCost[P any](f func(name string, p P) Cost) func(string, []byte) (Cost, bool) {
	return func(name string, push []byte) (Cost, bool) {
		var p P
		if binary.Size(p) != len(push) {
			return Cost{}, false
		}
		if err := binary.Read(bytes.NewReader(push), binary.LittleEndian, &p); err != nil {
			return Cost{}, false
		}
		return f(name, p), true
	}
}

func matmulCost(_ string, p MatmulPush) Cost {
	return Cost{FLOPs: 2 * uint64(p.N) * uint64(p.Rows) * uint64(p.Cols)}
}

func directCost(_ string, p MatmulDirectPush) Cost {
	return Cost{FLOPs: 2 * uint64(p.N) * uint64(p.Rows) * uint64(p.ColsP)}
}

func matvecCost(name string, p MatvecPush) Cost {
	rows := uint64(p.Rows)
	if strings.HasSuffix(name, FuseNormSwiGLU) { // gate and up: [2*rows][cols]
		rows *= 2
	}
	return Cost{FLOPs: 2 * uint64(p.N) * rows * uint64(p.Cols)}
}

// causalKeys is the keys n rows see in all, row i seeing first+i+1.
func causalKeys(first, n uint64) uint64 { return n*first + n*(n+1)/2 }

// perKey is the FLOPs of one query row, over every head, for one key: a
// q.k dot product and a v accumulation of headDim each.
func perKey(nHead, headDim uint32) uint64 { return 4 * uint64(nHead) * uint64(headDim) }

func attentionSplitCost(_ string, p AttentionSplitPush) Cost {
	n, entries := uint64(p.N), uint64(p.Entries)
	if p.Sorted == 0 { // no causal stop: every row reads every entry
		return Cost{FLOPs: n * entries * perKey(p.NHead, p.HeadDim)}
	}
	first := entries - min(n, entries)
	return Cost{FLOPs: causalKeys(first, n) * perKey(p.NHead, p.HeadDim)}
}

func attentionSplitCountsCost(_ string, p AttentionSplitPush) Cost {
	n := uint64(p.N)
	return Cost{FLOPs: causalKeys(0, n) * perKey(p.NHead, p.HeadDim), PerStart: n * perKey(p.NHead, p.HeadDim)}
}

func decodeAttentionCost(_ string, p DecodeAttentionPush) Cost {
	n := uint64(p.N)
	return Cost{FLOPs: causalKeys(0, n) * perKey(p.NHead, p.HeadDim), PerStart: n * perKey(p.NHead, p.HeadDim)}
}

// decodeAttendCost: decode_attend appends the step's one row, then attends
// over the cache with it.
func decodeAttendCost(_ string, p DecodeAttendPush) Cost {
	return Cost{FLOPs: perKey(p.NHead, p.HeadDim), PerStart: perKey(p.NHead, p.HeadDim)}
}
