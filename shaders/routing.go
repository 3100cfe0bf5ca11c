package shaders

import (
	"math/bits"
	"slices"
)

// The MoD routing kernels (DESIGN.md §3 and §6): router and predictor
// scores, top-k by bitonic sort, threshold selection and compaction into an
// index list, a count and indirect-dispatch arguments, and the gather of
// the selected rows (their gated residual is mod_residual, dense.go, for
// every gate target). Everything that decides how much of a routed block
// runs stays on the GPU.
//
// Eval (top-k) step, n tokens, k = mod.TopK(capacity, n):
//
//	router_score (PlanScore)      x, w, b  -> r
//	topk (n <= TopkLocal)         r        -> mask, idx    (or TopkPasses for larger n)
//	compact_mask                  mask     -> idx, count, args
//	gather (indirect on args)     x, idx   -> xs
//	... the block on xs[0:count] -> o ...
//	mod_residual (indirect on args) o, r   -> x
//
// Generate (causal) step: compact_positive on r (router) or p (the
// predictor: router_score twice, W1 with SiLU then w2) in place of topk +
// compact_mask. A decode step (one token) fuses the score, the decision,
// the block's indirect arguments and the copy of x into route_decode:
//
//	[router_score W1 x, SiLU -> h]          predictor routing only
//	route_decode  x, w, b [h, w2] -> xs = x, r, count, args (block and mod_residual)
//	... the block on xs, every dispatch indirect on args ...
//	mod_residual (indirect on args) xs, r  -> x

// Push-constant structs, mirroring include/push_routing.glsl member for member.

// RouterPush is router_score's push-constant block: y[i][r] = act(W[r] .
// x[i] + bias) for r < Rows, i < N.
type RouterPush struct {
	N       uint32 // tokens: x is [N][Cols], y is [N][Rows]
	Rows    uint32 // rows of W: 1 for a score, predHidden for the predictor's hidden layer
	Cols    uint32 // elements of each W row and x row
	HasBias uint32 // 1: add bias[0]; 0: the bias binding is not read (bind any buffer)
	Act     uint32 // RouterActNone or RouterActSiLU
}

// router_score's activations (RouterPush.Act).
const (
	RouterActNone uint32 = 0 // the dot product (+ bias): router and predictor scores
	RouterActSiLU uint32 = 1 // SiLU of it: the predictor's hidden layer
)

// RouteDecodePush is route_decode's push-constant block.
type RouteDecodePush struct {
	NEmbd      uint32 // elements of x, xs and w
	HasBias    uint32 // 1: add bias[0]; 0: the bias binding is not read
	PredHidden uint32 // route_decode_pred*: elements of h and w2; 0 otherwise
	M          uint32 // dispatches in the groups and args tables
	PredBias   uint32 // route_decode_pred*: 1 adds pb[0] to p (a linear predictor's bias); 0: pb is not read
}

// RouteRowsPush is route_rows's push-constant block.
type RouteRowsPush struct {
	N          uint32 // rows, at most RouteRowsMost
	NEmbd      uint32 // elements of each row of x and xs, and of w
	HasBias    uint32 // 1: add bias[0]; 0: the bias binding is not read
	PredHidden uint32 // route_rows_pred: elements of each row of h, and of w2
	M          uint32 // dispatches in args and in each count's row of the table
	PredBias   uint32 // route_rows_pred: 1 adds pb[0] to p (a linear predictor's bias)
	NRouted    uint32 // routed layers (rmeta's width)
	Routed     uint32 // this routed layer's index among them
	Compact    uint32 // 1: RoPE at the entry (mod.PositionsCompact)
	TraceRows  uint32 // rows a field of the trace ([nRouted][3][TraceRows]); 0: no trace written
}

// RouteRowsMost is the most rows route_rows takes (its shared arrays):
// VecRowsMost, the most a batched step runs as matvecs.
const RouteRowsMost = VecRowsMost

// RouteRowsName is route_rows's variant, with predictor routing its
// predictor's.
func RouteRowsName(predictor bool) string {
	if predictor {
		return "route_rows_pred"
	}
	return "route_rows"
}

func routeRows(predictor bool) Variant {
	v := Variant{
		Name: RouteRowsName(predictor), Source: "route_rows.comp",
		Bindings: []Binding{
			{"w", Read, "[nEmbd] f32 mod_router.weight"},
			{"bias", Read, "[1] f32 (any buffer when hasBias is 0)"},
			{"x", ReadWrite, "[n][nEmbd] f32 (a row NaN when its deciding score is not finite)"},
			{"xs", Write, "[count][nEmbd] f32 the selected rows"},
			{"r", Write, "[n] f32 router scores"},
			{"count", Write, "[1] u32"},
			{"table", Read, "[n+1][m][3] u32 each dispatch's workgroups by count"},
			{"args", Write, "[m][3] u32 VkDispatchIndirectCommand"},
			{"idx", Write, "[n] u32: the first count are the selected, ascending"},
			{"trace", Write, "[nRouted][3][traceRows] u32: r and p (f32 bits), selected (0/1) of every row, at this layer's place (none when traceRows is 0)"},
			{"rowPos", Read, "[n] u32 every row's position"},
			{"rowSeq", Read, "[n] u32 a word per sequence"},
			{"rmeta", Read, "[n][nRouted][2] u32 (table offset, length before the step)"},
			{"pos", Write, "[n] u32 the selected rows' positions"},
			{"ropePos", Write, "[n] u32 RoPE's positions"},
			{"ent", Write, "[n] u32 their entries"},
			{"toff", Write, "[n] u32 their tables' offsets"},
		},
		Push: RouteRowsPush{}, LocalSize: [3]uint32{64, 1, 1},
		Notes: "a batched step's routed layer on its matvec path (n <= RouteRowsMost); dispatch (1, 1, 1)",
	}
	if predictor {
		v.Defines = []string{"PREDICTOR"}
		v.Bindings = append(v.Bindings,
			Binding{"h", Read, "[n][predHidden] f32 SiLU(W1 x), or x for a linear predictor"},
			Binding{"w2", Read, "[predHidden] f32"},
			Binding{"pb", Read, "[1] f32 (any buffer when predBias is 0)"})
	}
	return v
}

// TopkPush is the push-constant block of every topk variant.
type TopkPush struct {
	N      uint32 // scores
	K      uint32 // how many to select (clamped to N)
	Block  uint32 // topk_merge_*: size of the bitonic sequences being merged
	Stride uint32 // topk_merge_global: compare-exchange distance
	Cols   uint32 // topk, topk_sort: elements of each row of x (nEmbd), NaN when its score is not finite; the caller sets it
}

// CompactPush is compact's push-constant block.
type CompactPush struct {
	N            uint32 // mask (or score) entries
	RowsPerGroup uint32 // rows one workgroup of the indirectly dispatched kernel covers (>= 1)
	Cols         uint32 // compact_positive: elements of each row of x (nEmbd), NaN when its score is not finite
	M            uint32 // compact_positive_table: dispatches in args and in each count's row of the table
}

// GatherPush is gather's push-constant block.
type GatherPush struct {
	NEmbd uint32 // elements of each row
	Layer uint32 // gather_pos_compact: the layer's index in counts
}

// gatherPos is gather with the selected rows' positions (gather_pos), and
// with compact their compact positions too (gather_pos_compact).
func gatherPos(compact bool) Variant {
	v := Variant{
		Name: "gather_pos", Source: "gather.comp", Defines: []string{"GATHER_POS"},
		Bindings: []Binding{
			{"idx", Read, "[count] u32"},
			{"count", Read, "[1] u32"},
			{"x", Read, "[n][nEmbd] f32"},
			{"xs", Write, "[count][nEmbd] f32"},
			{"rowPos", Read, "[n] u32 every row's position"},
			{"pos", Write, "[n] u32: the first count are the selected rows' positions"},
		},
		Push: GatherPush{}, LocalSize: [3]uint32{64, 1, 1},
		Notes: "dispatch Groups(most rows)",
	}
	if compact {
		v.Name, v.Defines = "gather_pos_compact", append(v.Defines, "COMPACT")
		v.Bindings = append(v.Bindings,
			Binding{"counts", Read, "[nLayer] u32 entries per layer, before the batch's append"},
			Binding{"ropePos", Write, "[n] u32: the first count are counts[layer] + j, the compact positions"})
		v.Notes = "push NEmbd, Layer; dispatch Groups(most rows) before prefill_count"
	}
	return v
}

// Routing specialization constants.
var (
	// TopkSpec is [workgroup size, keys sorted in shared memory]: 2048 keys
	// of 8 bytes fill 16 KiB, the least shared memory Vulkan guarantees.
	TopkSpec = []uint32{256, TopkLocal}
	// CompactSpec is [workgroup size]: the scan's width.
	CompactSpec = []uint32{256}
)

// TopkLocal is the most scores the one-workgroup topk takes (TopkSpec[1]).
const TopkLocal = 2048

// RoutingRowsPerGroup is what gather and mod_residual cover per workgroup: pass it
// as CompactPush.RowsPerGroup when compact's arguments dispatch them.
const RoutingRowsPerGroup = 1

func init() {
	Variants = append(Variants, routingVariants()...)
}

// poisonedX is the binding of the residual rows that a deciding kernel
// sets to NaN where a score is not finite (mod.PoisonRows).
var poisonedX = Binding{"x", ReadWrite, "[n][cols] f32: a row whose score is not finite becomes NaN (mod.PoisonRows)"}

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
		scoreVariant("router_score", nil),
		scoreVariant("router_score_sg", []string{"SUBGROUP"}),
		routeDecodeVariant("route_decode", nil),
		routeDecodeVariant("route_decode_sg", []string{"SUBGROUP"}),
		routeDecodeVariant("route_decode_pred", []string{"PREDICTOR"}),
		routeDecodeVariant("route_decode_pred_sg", []string{"PREDICTOR", "SUBGROUP"}),
		topk("topk", "TOPK_SINGLE", "n <= TopkLocal; dispatch (1, 1, 1); see TopkPasses",
			Binding{"scores", Read, "[n] f32"}, Binding{"mask", Write, "[n] u32"}, Binding{"idx", Write, "[k] u32, ascending"}, poisonedX),
		topk("topk_sort", "TOPK_SORT", "n > TopkLocal; see TopkPasses",
			Binding{"scores", Read, "[n] f32"}, Binding{"keys", Write, "[P] (u32, u32), P = next power of two >= n"}, poisonedX),
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
				poisonedX,
			},
			Push: CompactPush{}, LocalSize: [3]uint32{256, 1, 1}, LocalSizeSpec: true, Spec: CompactSpec,
			Notes: "dispatch (1, 1, 1): one workgroup for any n",
		},
		{
			Name: "compact_positive_table", Source: "compact.comp", Defines: []string{"FROM_POSITIVE", "TABLE_ARGS"},
			Bindings: []Binding{
				{"scores", Read, "[n] f32: selected iff > 0"},
				{"idx", Write, "[n] u32: the first count are the selected, ascending"},
				{"count", Write, "[1] u32"},
				{"args", Write, "[m][3] u32: the table's VkDispatchIndirectCommands for count"},
				{"mask", Write, "[n] u32"},
				poisonedX,
				{"table", Read, "[n+1][m][3] u32: each dispatch's workgroups by count"},
			},
			Push: CompactPush{}, LocalSize: [3]uint32{256, 1, 1}, LocalSizeSpec: true, Spec: CompactSpec,
			Notes: "push N, Cols, M; dispatch (1, 1, 1): one workgroup for any n; a routed block's indirect dispatches read args",
		},
		gatherPos(false),
		gatherPos(true),
		routeRows(false),
		routeRows(true),
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
	}
}

func scoreVariant(name string, defines []string) Variant {
	return Variant{
		Name: name, Source: "router.comp", Defines: defines, Op: OpRouterScore, Reduce: reduceOf(defines),
		Bindings: []Binding{
			{"w", Read, "[rows][cols] f32"},
			{"bias", Read, "[1] f32 (any buffer when hasBias is 0)"},
			{"x", Read, "[n][cols] f32"},
			{"y", Write, "[n][rows] f32"},
		},
		Push: RouterPush{}, LocalSize: [3]uint32{64, 1, 1}, LocalSizeSpec: true, Spec: []uint32{64, 64},
		Notes: "use PlanScore for the variant, spec ([workgroup size, invocations per dot]) and groups; " +
			"_sg needs subgroup arithmetic",
	}
}

// reduceOf is the reduction of a routing variant compiled with defines.
func reduceOf(defines []string) string {
	if slices.Contains(defines, "SUBGROUP") {
		return ReduceSubgroup
	}
	return ReduceShared
}

func routeDecodeVariant(name string, defines []string) Variant {
	v := Variant{
		Name: name, Source: "route_decode.comp", Defines: defines, Op: OpRouteDecode, Reduce: reduceOf(defines),
		Bindings: []Binding{
			{"w", Read, "[nEmbd] f32"},
			{"bias", Read, "[1] f32 (any buffer when hasBias is 0)"},
			{"x", ReadWrite, "[nEmbd] f32: NaN when the deciding score is not finite (mod.PoisonRows)"},
			{"xs", Write, "[nEmbd] f32: a copy of x"},
			{"r", Write, "[1] f32: the router score"},
			{"count", Write, "[1] u32: 1 when the token is selected, else 0"},
			{"groups", Read, "[m][3] u32: each dispatch's workgroups when selected"},
			{"args", Write, "[m][3] u32: groups, or (0, 1, 1) when not selected"},
		},
		Push: RouteDecodePush{}, LocalSize: [3]uint32{64, 1, 1}, LocalSizeSpec: true, Spec: []uint32{64},
		Notes: "dispatch (1, 1, 1); Spec: RouteDecodeSpec; _sg needs subgroup arithmetic",
	}
	if slices.Contains(defines, "PREDICTOR") {
		v.Op = OpRouteDecodePred
		v.Bindings = append(v.Bindings,
			Binding{"h", Read, "[predHidden] f32: SiLU(W1 x), router_score with RouterActSiLU"},
			Binding{"w2", Read, "[predHidden] f32"},
			Binding{"p", Write, "[1] f32: the predictor score, which decides"},
			Binding{"pb", Read, "[1] f32: the predictor's bias (any buffer when predBias is 0)"})
		v.Notes = "decides on p = w2 . h [+ pb]: an MLP predictor's h is SiLU(W1 x), a linear one's is x itself; " + v.Notes
	}
	return v
}

// ScoreDevice is what PlanScore needs to know of the device.
type ScoreDevice struct {
	CPU                bool   // a CPU device (lavapipe): wide loops are cheap, barriers dear, loops capped
	SubgroupSize       uint32 // every dispatch's (DispatchSubgroupSize); 0 when not sure
	SubgroupArithmetic bool   // subgroupAdd in compute shaders
}

// ScorePlan is one router_score dispatch: the variant, its specialization
// constants [workgroup size, invocations per dot product] and its grid.
type ScorePlan struct {
	Variant string
	Spec    []uint32
	Groups  [3]uint32
}

// subgroupOK says whether the device's subgroups suit the _sg variants:
// they must divide every workgroup size used here (64 and up).
func (d ScoreDevice) subgroupOK() bool {
	return subgroupsUsable(d.SubgroupArithmetic, d.SubgroupSize, 64)
}

// PlanScore plans router_score over n tokens and rows rows of cols columns
// (n*rows dot products). A few dot products (a decode token's router score)
// take a whole workgroup each, so the one row is read in parallel; many (the
// predictor's hidden layer, eval's scores) take a subgroup each on a GPU
// with subgroup arithmetic, no barrier at all. On a CPU device an
// invocation takes a dot product (no reduction) unless the row would pass
// lavapipe's loop cap, which then sets how many share it. preferSubgroup
// false forces the shared-memory tree (tests run both). On lavapipe the
// tree measured faster for the decode score at nEmbd 2048 (BenchmarkScores,
// 2026-11: router_score 26 us tree, 33 us subgroup; route_decode 41 us
// tree, 76 us subgroup), so the engine asks for subgroups on GPUs only.
func PlanScore(dev ScoreDevice, n, rows, cols uint32, preferSubgroup bool) ScorePlan {
	sg := dev.subgroupOK() && preferSubgroup
	dots := n * rows
	var wg, tpr uint32
	switch {
	case dev.CPU:
		wg, tpr = 64, 1
		if dots < 8 { // a decode score: spread it, as on a GPU but narrower
			tpr = 64
		}
		for tpr < wg && ScoreLoopIterations(cols, tpr) > LavapipeLoopIterations {
			tpr *= 2
		}
	case dots < 64:
		wg, tpr = 256, 256
	case sg:
		wg, tpr = max(128, dev.SubgroupSize), dev.SubgroupSize
	default:
		wg, tpr = 64, 64
	}
	name := "router_score"
	if sg && tpr > 1 && tpr%dev.SubgroupSize == 0 { // TPR 1 has no reduction to speed up
		name = "router_score_sg"
	}
	per := wg / tpr
	return ScorePlan{Variant: name, Spec: []uint32{wg, tpr}, Groups: Groups((dots + per - 1) / per)}
}

// ScoreLoopIterations bounds the loop iterations of one router_score
// invocation: its share of the row and the tree's steps.
func ScoreLoopIterations(cols, tpr uint32) uint32 {
	return (cols+tpr-1)/tpr + uint32(bits.Len32(tpr))
}

// RouteDecodeSpec is route_decode's specialization [workgroup size]: 256
// on a GPU (a 2048-wide row is 8 loads an invocation), 64 on a CPU device.
func RouteDecodeSpec(dev ScoreDevice) []uint32 {
	if dev.CPU {
		return []uint32{64}
	}
	return []uint32{256}
}

// RouteDecodeVariant is route_decode's variant for the device and routing.
func RouteDecodeVariant(dev ScoreDevice, predictor, preferSubgroup bool) string {
	name := "route_decode"
	if predictor {
		name += "_pred"
	}
	if dev.subgroupOK() && preferSubgroup {
		name += "_sg"
	}
	return name
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
