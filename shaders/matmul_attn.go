package shaders

import (
	"fmt"
	"slices"
)

// The prefill matrix-matrix product (matmul.comp) and causal attention over a
// compact KV cache for batches of rows (attention_split.comp): their push-constant structs, mirroring
// include/push_matmul_attn.glsl member for member (4-byte fields only), their
// specialization constants and dispatch sizes, and their table entries.

// MatmulPush is matmul's push-constant block.
type MatmulPush struct {
	Rows  uint32 // rows of W computed (from WRow0) = outputs per token
	Cols  uint32 // columns of W = elements of each x row (Q8_0, Q4_0: a multiple of 32)
	N     uint32 // tokens: x is [N][Cols]
	WRow0 uint32 // the first row computed, of the binding's
	WRows uint32 // rows in W's binding (the split layouts' scales follow them)
	LdY   uint32 // elements per y row: y is [N][LdY]
	YOff  uint32 // the column of y that row WRow0's output goes to
	// KSplit is the columns of each K slice of a split-K dispatch
	// (MatmulSplitGroups: workgroup z walks slice z, a multiple of the
	// spec's BK), whose y is then [splits][N][Rows] partial sums for
	// splitk_reduce (LdY and YOff unused); 0 walks all of K into y.
	KSplit uint32
}

// MatmulSpec is matmul's specialization constants: a workgroup computes a
// tile of BM tokens by BN rows of W, BK columns per step (a multiple of 4),
// each invocation TM tokens by TN rows. Along stages W and X with
// neighbouring invocations on neighbouring quads of a row (coalesced loads:
// a few rows' runs of bytes per subgroup load) instead of on neighbouring
// rows (a row apart: a cache line per invocation per load). Pipe takes the
// prefetching variant (matmul_pf: the next step's loads in flight during
// the products) with two copies of the staged tiles (one barrier a step).
type MatmulSpec struct {
	BM, BN, BK, TM, TN uint32
	Along, Pipe        bool
}

var (
	// MatmulSpecGPU suits GPUs: 128 invocations (every device has them),
	// 64x64 tiles, 32 outputs each (the usual register-blocked shape; not
	// yet measured on one).
	MatmulSpecGPU = MatmulSpec{BM: 64, BN: 64, BK: 16, TM: 8, TN: 4}
	// MatmulSpecCPU is meant for CPU devices (lavapipe): 64 invocations
	// and 32-column steps, half the barriers per FLOP. On a loaded 2-core
	// machine it was the fastest of eight tiles once (1.5 GFLOP/s against
	// 0.8) but not in a later run: the noise there is as large as the
	// differences, so the choice is not settled.
	MatmulSpecCPU = MatmulSpec{BM: 64, BN: 32, BK: 32, TM: 8, TN: 4}
	// MatmulSpecPipe is the pipelined tile a GPU profile takes without
	// tensor cores (Profile.MatmulPipe): 128 tokens by 64 rows, 256
	// invocations of 8x4 outputs, loads coalesced and in flight during the
	// products, one barrier a step; 24.5 KiB of shared memory (lavapipe's
	// 32 KiB holds it, so CI runs it under the GPU profile; a 128x128 tile
	// would need 33). Chosen by the cost model in docs/matmul-cost.md, not
	// measured on a GPU yet: 3/4 of the staged bytes per FMA of
	// MatmulSpecGPU and a quarter of its cache lines per staged byte, whose
	// row-order staging the H200 measured at 3.3-5.5 TFLOP/s for Q8_0.
	MatmulSpecPipe = MatmulSpec{BM: 128, BN: 64, BK: 16, TM: 8, TN: 4, Along: true, Pipe: true}
)

// Kernel is the matmul.comp variant the spec runs for weights of type typ:
// matmul_pf_<typ> under Pipe, else matmul_<typ>.
func (s MatmulSpec) Kernel(typ string) string {
	if s.Pipe {
		return MatmulPrefetchName(typ)
	}
	return MatmulName(typ)
}

// Invocations is the workgroup size: one invocation per TM x TN outputs.
func (s MatmulSpec) Invocations() uint32 { return (s.BM / s.TM) * (s.BN / s.TN) }

// Constants is the spec as specialization constants 0..7 (constant 0 is the
// workgroup size, 6 WALONG, 7 DBUF).
func (s MatmulSpec) Constants() []uint32 {
	b := func(v bool) uint32 {
		if v {
			return 1
		}
		return 0
	}
	return []uint32{s.Invocations(), s.BM, s.BN, s.BK, s.TM, s.TN, b(s.Along), b(s.Pipe)}
}

// SharedBytes is the shared memory a workgroup uses: the two staged tiles,
// their columns padded by 32/BK quads each under Along (matmul.comp's
// PADW), twice over under Pipe.
func (s MatmulSpec) SharedBytes() uint32 {
	pad, copies := uint32(0), uint32(1)
	if s.Along {
		pad = (32 + s.BK - 1) / s.BK
	}
	if s.Pipe {
		copies = 2
	}
	return copies * 4 * s.BK * (s.BM + s.BN + 2*pad)
}

// Check says whether the tiles divide as the kernel needs.
func (s MatmulSpec) Check() error {
	switch {
	case s.TM == 0 || s.TN == 0 || s.BM%s.TM != 0 || s.BN%s.TN != 0:
		return fmt.Errorf("shaders: matmul spec %+v: TM must divide BM and TN divide BN", s)
	case s.BK == 0 || s.BK%4 != 0:
		return fmt.Errorf("shaders: matmul spec %+v: BK must be a positive multiple of 4", s)
	}
	return nil
}

// MatmulGroupsOf is the dispatch size for rows of W and n tokens of
// either matmul (matmul.comp or matmul_coop.comp) from its specialization
// constants: both have BM at 1 and BN at 2, a workgroup per tile.
func MatmulGroupsOf(rows, n uint32, spec []uint32) [3]uint32 {
	return [3]uint32{(rows + spec[2] - 1) / spec[2], (n + spec[1] - 1) / spec[1], 1}
}

// MatmulGroups is matmul's dispatch size for rows of W and n tokens.
func MatmulGroups(rows, n uint32, s MatmulSpec) [3]uint32 {
	return [3]uint32{(rows + s.BN - 1) / s.BN, (n + s.BM - 1) / s.BM, 1}
}

// MatmulSplitGroups is the dispatch size of either matmul split into
// splits K slices (MatmulPush.KSplit): MatmulGroupsOf's grid, z over the
// slices.
func MatmulSplitGroups(rows, n uint32, spec []uint32, splits uint32) [3]uint32 {
	g := MatmulGroupsOf(rows, n, spec)
	g[2] = max(1, splits)
	return g
}

// MatmulReducePush is splitk_reduce's push-constant block.
type MatmulReducePush struct {
	Rows   uint32 // outputs per token
	N      uint32 // tokens
	Splits uint32 // K slices: part is [Splits][N][Rows]
	LdY    uint32 // elements per y row
	YOff   uint32 // the column of y that output 0 goes to
}

// MatmulReduceGroups is splitk_reduce's dispatch size: an invocation per
// output, 256 a workgroup.
func MatmulReduceGroups(rows, n uint32) [3]uint32 { return ElementGroups(rows * n) }

// Split-K (matmul.comp, matmul_coop.comp with MatmulPush.KSplit, then
// splitk_reduce): at a few tokens a matmul's grid is its row tiles alone,
// rows/BN workgroups (172 for a 7B FFN's 11008 rows at BN 64), about one
// per SM of an H100/H200's 132, each walking all of K serially with two
// barriers a step: one memory round trip at a time per SM, nothing else
// in flight. Cutting K into slices multiplies the workgroups.
const (
	// MatmulSplitTarget is the workgroups a GPU profile's matmul aims to
	// have in flight: about 8 per SM of a 132-SM H100/H200. By Little's
	// law the probe's 4.49 TB/s at a loaded memory latency of about 1 us
	// needs ~34 KB in flight per SM; a few-token workgroup stages 2-4 KB
	// of W a step (64 rows x 32 columns of Q8_0 or F16), so it takes
	// about 8 resident workgroups an SM, which their size allows (64-128
	// invocations, 8-9 KiB of shared memory each; docs/matmul-cost.md).
	// A grid of row tiles x token tiles under it is split into
	// ceil(target/grid) slices, at most MatmulMaxSplits.
	MatmulSplitTarget = 1024
	// MatmulMaxSplits bounds the slices: each adds n x rows f32 partials
	// written and read once (at 5 tokens of 11008 rows, 440 KB a slice
	// against a 48 MB Q8_0 weight), and the reduce's loop.
	MatmulMaxSplits = 8
	// matmulMinSteps is the fewest BK steps a slice takes: a shorter one
	// spends more on its start (the first load, the barriers) and on
	// writing its partials than on its weights.
	matmulMinSteps = 4
)

// MatmulSplit is how a matmul of n tokens through rows x cols weights with
// spec (either matmul's constants: BM at 1, BN at 2, BK at 3) and weights
// in blocks of block columns is cut along K on this profile: splits slices
// of slice columns each (the last may be shorter), slice a multiple of BK
// and of block. splits is 1 (slice = cols) when the profile does not split
// (MatmulSplitTarget 0: CPU devices, where workgroups already outnumber
// the threads and a split only adds a pass) or the grid is big enough.
func (p Profile) MatmulSplit(rows, cols, n uint32, spec []uint32, block uint32) (splits, slice uint32) {
	return p.MatmulSplitAtMost(rows, cols, n, spec, block, MatmulMaxSplits)
}

// MatmulSplitAtMost is MatmulSplit with at most most slices (a caller's
// scratch for the partial sums holds no more).
func (p Profile) MatmulSplitAtMost(rows, cols, n uint32, spec []uint32, block, most uint32) (splits, slice uint32) {
	if p.MatmulSplitTarget == 0 || n == 0 || len(spec) < 4 || most < 2 {
		return 1, cols
	}
	grid := ((rows + spec[2] - 1) / spec[2]) * ((n + spec[1] - 1) / spec[1])
	if grid == 0 || grid >= p.MatmulSplitTarget {
		return 1, cols
	}
	want := min(MatmulMaxSplits, most, (p.MatmulSplitTarget+grid-1)/grid)
	g := lcm32(spec[3], max(1, block))
	up := func(v uint32) uint32 { return (v + g - 1) / g * g }
	slice = max(up((cols+want-1)/want), up(matmulMinSteps*spec[3]))
	if slice >= cols {
		return 1, cols
	}
	return (cols + slice - 1) / slice, slice
}

func lcm32(a, b uint32) uint32 {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

// MatmulSplitScratch is the most bytes of partial sums a split matmul of
// this profile writes with a tile of bm tokens by bn rows: splits x n x
// rows floats, where splits x (row tiles x token tiles) stays under twice
// the target (a split is chosen only for a grid under it, and rounds up).
func (p Profile) MatmulSplitScratch(bm, bn uint32) uint64 {
	return 4 * 2 * uint64(p.MatmulSplitTarget) * uint64(bm) * uint64(bn)
}

// AttentionSpec is decode_attention's specialization constants: [workgroup
// size, MAX_HD]. Shared memory is 4*(MAX_HD*(WG+1) + 2*WG) bytes: 16.6 KiB
// here. MAX_HD is also the largest head the engine takes.
var AttentionSpec = []uint32{32, 128}

// AttentionGroups is decode_attention's dispatch size for n query rows: a
// workgroup per (row, head).
func AttentionGroups(n, nHead uint32) [3]uint32 { return Groups(n * nHead) }

func matmulVariant(name string, defines []string, weightShape string) Variant {
	return Variant{
		Name: name, Source: "matmul.comp", Defines: defines,
		Bindings: []Binding{
			{"w", Read, weightShape},
			{"x", Read, "[n][cols] f32"},
			{"y", Write, "[n][ldy] f32, columns [yOff, yOff+rows)"},
		},
		Push:          MatmulPush{},
		LocalSize:     [3]uint32{128, 1, 1},
		LocalSizeSpec: true,
		Spec:          MatmulSpecGPU.Constants(),
		Notes: "Spec: MatmulSpec.Constants() (MatmulSpecGPU, MatmulSpecCPU); dispatch MatmulGroups(rows, n, spec), " +
			"or with KSplit (Profile.MatmulSplit) MatmulSplitGroups into y = [splits][n][rows] partials, then splitk_reduce; " +
			"bind w with its size rounded up to 4 (vk buffers are); cols a multiple of the type's block (WeightType.Block)",
	}
}

// attentionInputs are the first bindings of attention and decode_attention.
func attentionInputs() []Binding {
	return []Binding{
		{"q", Read, "[n][nHead*headDim] f32, rotated"},
		{"k", Read, "[entries][nKVHead*headDim] f32, rotated"},
		{"v", Read, "[entries][nKVHead*headDim] f32"},
		{"kPos", Read, "[entries] u32 original positions"},
		{"qPos", Read, "[n] u32 original positions"},
	}
}

// MatmulReduceName is the split-K matmuls' second pass (splitk_reduce.comp).
const MatmulReduceName = "splitk_reduce"

// MatmulPrefetchName is matmul.comp's variant for weight type typ that
// loads the next step's slices during the products (MATMUL_PREFETCH): with
// Along and DBUF the pipelined tile a GPU profile takes (MatmulSpecPipe,
// self-checked as OpMatmulPipe).
func MatmulPrefetchName(typ string) string { return "matmul_pf_" + typ }

func init() {
	for _, wt := range WeightTypes {
		v := matmulVariant(MatmulName(wt.Name), wt.Defines, wt.Shape)
		v.Type = wt.Name // no Op: the safe tiles, not self-checked
		Variants = append(Variants, v)
	}
	Variants = append(Variants, Variant{
		Name: MatmulReduceName, Source: "splitk_reduce.comp",
		Bindings: []Binding{
			{"part", Read, "[splits][n][rows] f32, a split matmul's partial sums"},
			{"y", Write, "[n][ldy] f32, columns [yOff, yOff+rows)"},
		},
		Push: MatmulReducePush{}, LocalSize: [3]uint32{256, 1, 1},
		Notes: "dispatch MatmulReduceGroups(rows, n); sums the slices in order z = 0..splits-1",
	})
	for _, wt := range WeightTypes {
		v := matmulVariant(MatmulPrefetchName(wt.Name), append(append([]string(nil), wt.Defines...), "MATMUL_PREFETCH"), wt.Shape)
		v.Op, v.Type = OpMatmulPipe, wt.Name
		Variants = append(Variants, v)
	}
}

// AttentionSplitPush is the push-constant block of attention_split,
// attention_split_counts and attention_merge (attention_split.comp).
type AttentionSplitPush struct {
	N        uint32  // query rows: q is [N][NHead*HeadDim], qPos is [N]
	Entries  uint32  // KV cache entries (attention_split_counts: the most there can be)
	NHead    uint32  // query heads, a multiple of NKVHead
	NKVHead  uint32  // key/value heads
	HeadDim  uint32  // elements per head, at most the spec's MAX_HD
	Scale    float32 // score multiplier: float32(1/sqrt(HeadDim))
	Layer    uint32  // attention_split_counts: index of the entry count in counts
	Splits   uint32  // key tiles per (row, head): AttentionSplits(Entries, SplitLen)
	SplitLen uint32  // entries per key tile
	Sorted   uint32  // 1: kPos ascends, so a row stops at its first later entry (causal: about half the work)
}

// AttentionSplitRows is attention_split's query rows per workgroup (its
// workgroup size, specialization constant 0).
const AttentionSplitRows = 32

// attentionSharedBytes is the shared memory attention_split may use: the
// least every Vulkan device has.
const attentionSharedBytes = 16384

// AttentionSplitLanes is the lanes a query row of attention_split's
// ATTN_LANES variants at head dimension hd: one per 32 dimensions (each
// lane then keeps 64 floats of the row's query and output in registers,
// where one invocation a row keeps 2*hd), a power of 2 up to 8; 1 below
// 64 dimensions.
func AttentionSplitLanes(hd uint32) uint32 {
	lpr := uint32(1)
	for lpr < 8 && 32*lpr*2 <= hd {
		lpr *= 2
	}
	return lpr
}

// AttentionSplitLanesSpec is the ATTN_LANES variants' specialization
// constants for head dimension hd with lpr lanes a row: [32*lpr
// invocations (AttentionSplitRows rows), hd, keys staged, lpr].
func AttentionSplitLanesSpec(hd, lpr uint32) []uint32 {
	return []uint32{AttentionSplitRows * lpr, hd, AttentionSplitKeys(hd), lpr}
}

// AttentionSplitKeys is how many keys attention_split stages at a time for
// head dimension hd: as many as fit, with their values and positions, in
// 16 KiB of shared memory, at most 64.
func AttentionSplitKeys(hd uint32) uint32 {
	quads := (hd + 3) / 4 // the tiles hold quads
	return max(1, min(64, (attentionSharedBytes-4)/(32*quads+4)))
}

// AttentionSplitSpec is attention_split's specialization constants for head
// dimension hd: [rows per workgroup, hd, keys staged at a time].
func AttentionSplitSpec(hd uint32) []uint32 {
	return []uint32{AttentionSplitRows, hd, AttentionSplitKeys(hd)}
}

// Key tile lengths of attention_split. On a GPU a tile of 256 gives a long
// context more workgroups (flash-decoding). On a CPU device (lavapipe) a
// tile is as long as lavapipe's loop limit allows an invocation: per entry
// a dot product, a rescale and an accumulation of hd each (3hd+1 loop
// iterations at worst) and its share of the staging (hd/rows), plus the
// set-up and the write of 3hd; at most 1024.
const AttentionSplitLenGPU = 256

// AttentionSplitLen is the key tile length for head dimension hd on a CPU
// device (cpu) or a GPU.
func AttentionSplitLen(hd uint32, cpu bool) uint32 {
	if !cpu {
		return AttentionSplitLenGPU
	}
	const budget = 60000 // under LavapipeLoopIterations, with room for the loops' own bookkeeping
	per := 3*hd + 2 + (hd+AttentionSplitRows-1)/AttentionSplitRows
	return max(1, min(1024, (budget-3*hd)/per))
}

// AttentionSplits is the number of key tiles of splitLen over entries (at
// least 1).
func AttentionSplits(entries, splitLen uint32) uint32 {
	return max(1, (entries+splitLen-1)/splitLen)
}

// AttentionSplitGroups is attention_split's dispatch size: a workgroup per
// block of AttentionSplitRows rows, head and tile.
func AttentionSplitGroups(n, nHead, splits uint32) [3]uint32 {
	return Groups((n + AttentionSplitRows - 1) / AttentionSplitRows * nHead * splits)
}

// AttentionMergeGroups is attention_merge's dispatch size.
func AttentionMergeGroups(n, nHead uint32) [3]uint32 { return Groups(n * nHead) }

func init() {
	split := func(name string, defines ...string) Variant {
		return Variant{
			Name: name, Source: "attention_split.comp", Defines: append([]string{"ATTN_SPLIT"}, defines...),
			Bindings: append(attentionInputs(),
				Binding{"counts", Read, "[nLayer] u32 (attention_split_counts: entries = counts[layer]; else unread, bind any)"},
				Binding{"partO", Write, "[n*nHead*splits][headDim] f32"},
				Binding{"partML", Write, "[n*nHead*splits][2] f32 (max, sum)"}),
			Push: AttentionSplitPush{}, LocalSize: [3]uint32{32, 1, 1}, LocalSizeSpec: true, Spec: AttentionSplitSpec(64),
			Notes: "Spec: AttentionSplitSpec(headDim); dispatch AttentionSplitGroups(n, nHead, splits); then attention_merge",
		}
	}
	lanes := func(v Variant, kv KV) Variant {
		v.Defines = append(v.Defines, "ATTN_LANES")
		v.Op, v.Type = OpAttentionLanes, kv.String()
		v.Spec = AttentionSplitLanesSpec(64, 1) // the compiled 32 invocations, a row each: the profile's spec sets the lanes
		v.Notes = "Spec: AttentionSplitLanesSpec(headDim, lanes); needs subgroup shuffles, subgroups of at least lanes; " +
			"dispatch AttentionSplitGroups(n, nHead, splits); then attention_merge"
		return v
	}
	Variants = append(Variants,
		split(AttentionSplitName(KVF32, false)),
		split(AttentionSplitName(KVF32, true), "ATTN_COUNTS"),
		split(AttentionSplitName(KVF16, true), "ATTN_COUNTS", "KV_F16"),
		lanes(split(AttentionSplitLanesName(KVF32, false)), KVF32),
		lanes(split(AttentionSplitLanesName(KVF32, true), "ATTN_COUNTS"), KVF32),
		lanes(split(AttentionSplitLanesName(KVF16, true), "ATTN_COUNTS", "KV_F16"), KVF16),
		Variant{
			Name: "attention_merge", Source: "attention_split.comp", Defines: []string{"ATTN_MERGE"},
			Bindings: []Binding{
				{"partO", Read, "[n*nHead*splits][headDim] f32"},
				{"partML", Read, "[n*nHead*splits][2] f32"},
				{"out", Write, "[n][nHead*headDim] f32"},
			},
			Push: AttentionSplitPush{}, LocalSize: [3]uint32{32, 1, 1}, LocalSizeSpec: true, Spec: AttentionSpec[:1],
			Notes: "dispatch AttentionMergeGroups(n, nHead)",
		},
	)
}

// MatmulCoopSpec is matmul_coop's specialization constants: a workgroup
// computes a tile of BM tokens by BN rows of W, BK columns per step, each
// subgroup of 32 a block of WM tokens by WN rows in 16x16 tiles (BK, WM, WN
// multiples of 16).
type MatmulCoopSpec struct{ BM, BN, BK, WM, WN uint32 }

// MatmulCoopSubgroup is the subgroup size matmul_coop is written for: the
// NVIDIA cooperative matrices' (and the emulation's groups of invocations).
const MatmulCoopSubgroup = 32

var (
	// MatmulCoopSpecGPU: 4 subgroups of 2x2 tiles on a 64x64 tile (not yet
	// measured: BenchmarkMatmulGPU compares it with the others).
	MatmulCoopSpecGPU = MatmulCoopSpec{BM: 64, BN: 64, BK: 32, WM: 32, WN: 32}
	// MatmulCoopSpecWide: 8 subgroups of 2x4 tiles on a 128x128 tile, for
	// long prompts (each staged value serves twice the products).
	MatmulCoopSpecWide = MatmulCoopSpec{BM: 128, BN: 128, BK: 32, WM: 32, WN: 64}
	// MatmulCoopSpecFew: a 16-token tile, for a handful of rows (a short
	// prompt, a decode step of many sequences): one pass over the weights
	// for up to 16 tokens. Not picked: on an H200 matmul.comp's narrow
	// tiles were faster there for F16 and Q8_0 (Stepper.narrow).
	MatmulCoopSpecFew = MatmulCoopSpec{BM: 16, BN: 128, BK: 32, WM: 16, WN: 32}
)

// Subgroups is the number of subgroups of a workgroup.
func (s MatmulCoopSpec) Subgroups() uint32 { return (s.BM / s.WM) * (s.BN / s.WN) }

// Invocations is the workgroup size.
func (s MatmulCoopSpec) Invocations() uint32 { return MatmulCoopSubgroup * s.Subgroups() }

// Constants is the spec as specialization constants 0..5 (constant 0 is the
// workgroup size).
func (s MatmulCoopSpec) Constants() []uint32 {
	return []uint32{s.Invocations(), s.BM, s.BN, s.BK, s.WM, s.WN}
}

// Check says whether the tiles divide as the kernel needs.
func (s MatmulCoopSpec) Check() error {
	switch {
	case s.BK == 0 || s.WM == 0 || s.WN == 0 || s.BK%16 != 0 || s.WM%16 != 0 || s.WN%16 != 0:
		return fmt.Errorf("shaders: matmul_coop spec %+v: BK, WM and WN must be positive multiples of 16", s)
	case s.BM%s.WM != 0 || s.BN%s.WN != 0:
		return fmt.Errorf("shaders: matmul_coop spec %+v: WM must divide BM and WN divide BN", s)
	}
	return nil
}

// MatmulCoopGroups is matmul_coop's dispatch size for rows of W and n
// tokens: x over row tiles, y over token tiles.
func MatmulCoopGroups(rows, n uint32, s MatmulCoopSpec) [3]uint32 {
	return [3]uint32{(rows + s.BN - 1) / s.BN, (n + s.BM - 1) / s.BM, 1}
}

// MatmulCoopName is matmul_coop's variant for weight type typ: the
// tensor-core kernel, or with emulate its tile product in plain arithmetic
// (every device runs it; tests run it on lavapipe). Its operands are
// rounded to halves (MatmulCoopHiloName's keep f32's precision).
func MatmulCoopName(typ string, emulate bool) string {
	if emulate {
		return "matmul_coop_emu_" + typ
	}
	return "matmul_coop_" + typ
}

// MatmulCoopHiloName is matmul_coop's COOP_HILO variant for weight type
// typ: each operand split into a high and a low half, three tensor-core
// products a step (two for F16 weights), f32's precision within 2^-21
// (matmul_coop.comp): the engine's tensor-core matmul unless
// Profile.MatmulCoopHalf.
func MatmulCoopHiloName(typ string, emulate bool) string {
	if emulate {
		return "matmul_coop_hilo_emu_" + typ
	}
	return "matmul_coop_hilo_" + typ
}

// MatmulCoopKHRName is matmul_coop's variant for weight type typ through
// VK_KHR_cooperative_matrix (COOPMAT_KHR, include/coopmat.glsl): the same
// kernel as MatmulCoopName's (hilo: MatmulCoopHiloName's) with its
// cooperative matrices the KHR extension's, for GPUs without NVIDIA's
// (Profile.MatmulCoopKHR). Its tiling is the NV kernel's, which the
// emulated variants test on lavapipe.
func MatmulCoopKHRName(typ string, hilo bool) string {
	if hilo {
		return "matmul_coop_hilo_khr_" + typ
	}
	return "matmul_coop_khr_" + typ
}

// MatmulCoopPackedName is matmul_coop's COOP_PACKED variant for weight
// type typ (hilo: with COOP_HILO; emulate: its product emulated, which
// only the hilo kernel has): the staged tiles in quads, packed conversions,
// and the hilo split by a mask (matmul_coop.comp). Bench candidates
// (BenchmarkMatmulGPU's coop-pk-*), for MatmulCoopPackedTypes only; no
// profile takes them yet.
func MatmulCoopPackedName(typ string, hilo, emulate bool) string {
	switch {
	case hilo && emulate:
		return "matmul_coop_hilo_emu_pk_" + typ
	case hilo:
		return "matmul_coop_hilo_pk_" + typ
	}
	return "matmul_coop_pk_" + typ
}

// MatmulCoopXSplitName is the packed hilo kernel reading X already split
// into halves (COOP_XSPLIT: a word packHalf2x16(hi, lo) per element, made
// by SplitHalvesName's pass), for weight type typ (emulate: its product
// emulated). Bench candidates (BenchmarkMatmulGPU's coop-hilo-pk-xs-*,
// the split's pass timed with it), for MatmulCoopPackedTypes only; no
// profile takes them yet.
func MatmulCoopXSplitName(typ string, emulate bool) string {
	if emulate {
		return "matmul_coop_hilo_emu_pk_xs_" + typ
	}
	return "matmul_coop_hilo_pk_xs_" + typ
}

// SplitHalvesName is the pass that splits f32 values into two halves each
// (split_halves.comp), for the COOP_XSPLIT kernels' X.
const SplitHalvesName = "split_halves"

// MatmulCoopPackedTypes are the weight types with COOP_PACKED variants:
// BenchmarkMatmulGPU's.
var MatmulCoopPackedTypes = []string{MatvecF16, MatvecQ8_0, MatvecQ4_K}

func init() {
	Variants = append(Variants, Variant{
		Name: SplitHalvesName, Source: "split_halves.comp",
		Bindings: []Binding{
			{"x", Read, "[n] f32"},
			{"out", Write, "[n] u32: packHalf2x16(hi, lo), hi = x to the nearest half, lo = x - hi to the nearest half"},
		},
		Push:      AddPush{},
		LocalSize: [3]uint32{256, 1, 1},
		Notes:     "dispatch ElementGroups(n); the COOP_XSPLIT matmuls' X (MatmulCoopXSplitName)",
	})
	for _, wt := range WeightTypes {
		for _, c := range []struct{ hilo, emulate, packed, xsplit, khr bool }{
			{false, false, false, false, false}, {false, true, false, false, false}, {true, false, false, false, false}, {true, true, false, false, false},
			{false, false, true, false, false}, {true, false, true, false, false}, {true, true, true, false, false},
			{true, false, true, true, false}, {true, true, true, true, false},
			{false, false, false, false, true}, {true, false, false, false, true},
		} {
			if c.packed && !slices.Contains(MatmulCoopPackedTypes, wt.Name) {
				continue
			}
			name := MatmulCoopName(wt.Name, c.emulate)
			switch {
			case c.khr:
				name = MatmulCoopKHRName(wt.Name, c.hilo)
			case c.xsplit:
				name = MatmulCoopXSplitName(wt.Name, c.emulate)
			case c.packed:
				name = MatmulCoopPackedName(wt.Name, c.hilo, c.emulate)
			case c.hilo:
				name = MatmulCoopHiloName(wt.Name, c.emulate)
			}
			v := matmulVariant(name, wt.Defines, wt.Shape)
			v.Source, v.Spec = "matmul_coop.comp", MatmulCoopSpecGPU.Constants()
			v.Notes = "Spec: MatmulCoopSpec.Constants() (MatmulCoopSpecGPU, ...); dispatch MatmulCoopGroups(rows, n, spec); " +
				"bind w with its size rounded up to 4 (vk buffers are); cols a multiple of the type's block (WeightType.Block)"
			v.Defines = append([]string(nil), wt.Defines...)
			if c.hilo {
				v.Defines = append(v.Defines, "COOP_HILO")
			}
			if c.packed {
				v.Defines = append(v.Defines, "COOP_PACKED")
			}
			if c.xsplit {
				v.Defines = append(v.Defines, "COOP_XSPLIT")
				v.Bindings[1].Shape = "[n][cols] u32: packHalf2x16(hi, lo) of f32 x (split_halves)"
			}
			switch {
			case c.emulate:
				v.Defines = append(v.Defines, "EMULATE_COOPMAT")
			case c.khr:
				v.Defines = append(v.Defines, CoopMatKHRDefine)
				v.Notes += "; needs VK_KHR_cooperative_matrix (Device.CooperativeMatrixKHR) and a subgroup size of 32 (Profile.RequiredSubgroupSize)"
			default:
				v.Notes += "; needs VK_NV_cooperative_matrix (Device.CooperativeMatrixNV) and a subgroup size of 32"
			}
			v.Op, v.Type = OpMatmulCoop, wt.Name // the self-check covers it (Profile.Fallback)
			Variants = append(Variants, v)
		}
	}
}
