package shaders

// The MoD routing kernels (DESIGN.md §3 and §6): router and predictor
// scores, top-k by bitonic sort, threshold selection and compaction into an
// index list, a count and indirect-dispatch arguments, and the gather and
// gated scatter of the selected rows. Everything that decides how much of a
// routed block runs stays on the GPU.
//
// Eval (top-k) step, n tokens, k = mod.TopK(capacity, n):
//
//	router_score                  x, w, b  -> r
//	topk (n <= TopkLocal)         r        -> mask, idx    (or TopkPasses for larger n)
//	compact_mask                  mask     -> idx, count, args
//	gather (indirect on args)     x, idx   -> xs
//	... the block on xs[0:count] -> o ...
//	scatter (indirect on args)    o, r     -> x
//
// Generate (causal) step: compact_positive on r (router) or p
// (predictor_score) in place of topk + compact_mask.

// Push-constant structs, mirroring include/push_routing.glsl member for member.

// RouterPush is router_score's push-constant block.
type RouterPush struct {
	N       uint32 // tokens: x is [N][NEmbd], r is [N]
	NEmbd   uint32 // elements of each x row and of w
	HasBias uint32 // 1: add bias[0]; 0: the bias binding is not read (bind any buffer)
}

// PredictorPush is predictor_score's push-constant block.
type PredictorPush struct {
	N          uint32 // tokens: x is [N][NEmbd], p is [N]
	NEmbd      uint32 // columns of W1
	PredHidden uint32 // rows of W1, elements of w2
}

// TopkPush is the push-constant block of every topk variant.
type TopkPush struct {
	N      uint32 // scores
	K      uint32 // how many to select (clamped to N)
	Block  uint32 // topk_merge_*: size of the bitonic sequences being merged
	Stride uint32 // topk_merge_global: compare-exchange distance
}

// CompactPush is compact's push-constant block.
type CompactPush struct {
	N            uint32 // mask (or score) entries
	RowsPerGroup uint32 // rows one workgroup of the indirectly dispatched kernel covers (>= 1)
}

// GatherPush is gather's push-constant block.
type GatherPush struct {
	NEmbd uint32 // elements of each row
}

// ScatterPush is scatter's push-constant block.
type ScatterPush struct {
	NEmbd uint32 // elements of each row
}

// Routing specialization constants.
var (
	// TopkSpec is [workgroup size, keys sorted in shared memory]: 2048 keys
	// of 8 bytes fill 16 KiB, the least shared memory Vulkan guarantees.
	TopkSpec = []uint32{256, TopkLocal}
	// CompactSpec is [workgroup size]: the scan's width.
	CompactSpec = []uint32{256}
	// ScatterGateSigmoid and ScatterGateIdentity choose scatter's g.
	ScatterGateSigmoid  = []uint32{0}
	ScatterGateIdentity = []uint32{1}
)

// TopkLocal is the most scores the one-workgroup topk takes (TopkSpec[1]).
const TopkLocal = 2048

// RoutingRowsPerGroup is what gather and scatter cover per workgroup: pass it
// as CompactPush.RowsPerGroup when compact's arguments dispatch them.
const RoutingRowsPerGroup = 1

func init() {
	Variants = append(Variants, routingVariants()...)
}

func routingVariants() []Variant {
	topk := func(name, define, notes string, bindings ...Binding) Variant {
		spec := TopkSpec
		if define == "TOPK_MERGE_GLOBAL" || define == "TOPK_SELECT" {
			spec = TopkSpec[:1] // no shared memory
		}
		return Variant{Name: name, Source: "topk.comp", Defines: []string{define}, Bindings: bindings,
			Push: TopkPush{}, LocalSize: [3]uint32{256, 1, 1}, LocalSizeSpec: true, Spec: spec, Notes: notes}
	}
	return []Variant{
		{
			Name: "router_score", Source: "router.comp", Defines: []string{"ROUTER"},
			Bindings: []Binding{
				{"w", Read, "[nEmbd] f32"},
				{"bias", Read, "[1] f32 (any buffer when hasBias is 0)"},
				{"x", Read, "[n][nEmbd] f32"},
				{"r", Write, "[n] f32"},
			},
			Push: RouterPush{}, LocalSize: [3]uint32{64, 1, 1},
			Notes: "dispatch Groups(ceil(n / 64)); sums in mod's dotF32 order, so r equals the CPU's",
		},
		{
			Name: "predictor_score", Source: "router.comp", Defines: []string{"PREDICTOR"},
			Bindings: []Binding{
				{"w1", Read, "[predHidden][nEmbd] f32"},
				{"w2", Read, "[predHidden] f32"},
				{"x", Read, "[n][nEmbd] f32"},
				{"p", Write, "[n] f32"},
			},
			Push: PredictorPush{}, LocalSize: [3]uint32{64, 1, 1},
			Notes: "dispatch Groups(ceil(n / 64)); p = w2 . silu(W1 x), fused, one invocation per token",
		},
		topk("topk", "TOPK_SINGLE", "n <= TopkLocal; dispatch (1, 1, 1); see TopkPasses",
			Binding{"scores", Read, "[n] f32"}, Binding{"mask", Write, "[n] u32"}, Binding{"idx", Write, "[k] u32, ascending"}),
		topk("topk_sort", "TOPK_SORT", "n > TopkLocal; see TopkPasses",
			Binding{"scores", Read, "[n] f32"}, Binding{"keys", Write, "[P] (u32, u32), P = next power of two >= n"}),
		topk("topk_merge_global", "TOPK_MERGE_GLOBAL", "see TopkPasses",
			Binding{"keys", ReadWrite, "[P] (u32, u32)"}),
		topk("topk_merge_local", "TOPK_MERGE_LOCAL", "see TopkPasses",
			Binding{"keys", ReadWrite, "[P] (u32, u32)"}),
		topk("topk_select", "TOPK_SELECT", "see TopkPasses; then compact_mask for the index list",
			Binding{"keys", Read, "[P] (u32, u32), sorted"}, Binding{"mask", Write, "[n] u32"}),
		{
			Name: "compact_mask", Source: "compact.comp", Defines: []string{"FROM_MASK"},
			Bindings: []Binding{
				{"mask", Read, "[n] u32"},
				{"idx", Write, "[n] u32: the first count are the selected, ascending"},
				{"count", Write, "[1] u32"},
				{"args", Write, "[3] u32: VkDispatchIndirectCommand over count rows"},
			},
			Push: CompactPush{}, LocalSize: [3]uint32{256, 1, 1}, LocalSizeSpec: true, Spec: CompactSpec,
			Notes: "dispatch (1, 1, 1): one workgroup for any n",
		},
		{
			Name: "compact_positive", Source: "compact.comp", Defines: []string{"FROM_POSITIVE"},
			Bindings: []Binding{
				{"scores", Read, "[n] f32: selected iff > 0"},
				{"idx", Write, "[n] u32: the first count are the selected, ascending"},
				{"count", Write, "[1] u32"},
				{"args", Write, "[3] u32: VkDispatchIndirectCommand over count rows"},
				{"mask", Write, "[n] u32"},
			},
			Push: CompactPush{}, LocalSize: [3]uint32{256, 1, 1}, LocalSizeSpec: true, Spec: CompactSpec,
			Notes: "dispatch (1, 1, 1): one workgroup for any n",
		},
		{
			Name: "gather", Source: "gather.comp",
			Bindings: []Binding{
				{"idx", Read, "[count] u32"},
				{"count", Read, "[1] u32"},
				{"x", Read, "[n][nEmbd] f32"},
				{"xs", Write, "[count][nEmbd] f32"},
			},
			Push: GatherPush{}, LocalSize: [3]uint32{64, 1, 1},
			Notes: "dispatch indirectly on compact's args (RoutingRowsPerGroup), or Groups(most rows)",
		},
		{
			Name: "scatter", Source: "scatter.comp",
			Bindings: []Binding{
				{"idx", Read, "[count] u32"},
				{"count", Read, "[1] u32"},
				{"r", Read, "[n] f32"},
				{"o", Read, "[count][nEmbd] f32"},
				{"x", ReadWrite, "[n][nEmbd] f32"},
			},
			Push: ScatterPush{}, LocalSize: [3]uint32{64, 1, 1}, Spec: ScatterGateSigmoid,
			Notes: "Spec: ScatterGateSigmoid or ScatterGateIdentity; dispatch as gather",
		},
	}
}

// TopkPass is one dispatch of a top-k plan.
type TopkPass struct {
	Variant string // topk, topk_sort, topk_merge_global, topk_merge_local, topk_select
	Push    TopkPush
	Groups  [3]uint32
}

// TopkPasses plans top-k of n scores with the default TopkSpec. For n <=
// TopkLocal it is the one-workgroup topk, which writes mask and idx. Beyond,
// it is a bitonic sort of TopkKeys(n) keys in a scratch buffer: chunks sorted
// in shared memory, each later merge as global stages down to distance
// TopkLocal and one shared-memory pass for the rest, then topk_select for
// the mask; compact_mask makes idx. The number of passes grows as
// log2(n/TopkLocal)^2 / 2.
func TopkPasses(n, k uint32) []TopkPass {
	const wg = 256
	if n <= TopkLocal {
		return []TopkPass{{"topk", TopkPush{N: n, K: k}, [3]uint32{1, 1, 1}}}
	}
	size := TopkKeys(n)
	chunks := Groups(size / TopkLocal)
	passes := []TopkPass{{"topk_sort", TopkPush{N: n, K: k}, chunks}}
	for block := uint32(2 * TopkLocal); block <= size; block <<= 1 {
		for stride := block / 2; stride >= TopkLocal; stride >>= 1 {
			passes = append(passes, TopkPass{"topk_merge_global",
				TopkPush{N: n, K: k, Block: block, Stride: stride}, Groups(size / 2 / wg)})
		}
		passes = append(passes, TopkPass{"topk_merge_local", TopkPush{N: n, K: k, Block: block}, chunks})
	}
	return append(passes, TopkPass{"topk_select", TopkPush{N: n, K: k}, Groups((n + wg - 1) / wg)})
}

// TopkKeys is the number of 8-byte keys in the multi-pass plan's scratch
// buffer: n rounded up to a power of two.
func TopkKeys(n uint32) uint32 {
	size := uint32(1)
	for size < n {
		size <<= 1
	}
	return size
}
