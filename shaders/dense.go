package shaders

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
)

// The elementwise and row ops of a Llama block: RMSNorm, RoPE, SwiGLU, the
// MoD gated residual, embedding lookup, and on the logits argmax and the
// scoring loss (nll). Their
// push-constant structs mirror include/push_dense.glsl member for member.

// RMSNormPush is rmsnorm's push-constant block.
type RMSNormPush struct {
	Cols uint32  // elements per row (nEmbd)
	N    uint32  // rows: x and out are [N][Cols]
	Eps  float32 // added to mean(x²) (layer_norm_rms_epsilon)
}

// NLLPush is nll's push-constant block.
type NLLPush struct {
	Cols    uint32 // elements per row (nVocab)
	N       uint32 // rows: x is [N][Cols]
	RowBase uint32 // x's row r is row RowBase + r of target and out (logits bound in pieces)
}

// RopePush is rope's push-constant block.
type RopePush struct {
	HeadDim uint32 // elements per head, even
	NHead   uint32 // heads per row: x and out are [N][NHead*HeadDim]
	N       uint32 // rows
}

// SwiGLUPush is swiglu's push-constant block.
type SwiGLUPush struct {
	N uint32 // elements
}

// ModResidualPush is mod_residual's push-constant block.
type ModResidualPush struct {
	Cols uint32 // elements per row (nEmbd)
	N    uint32 // rows of x and entries of r
	K    uint32 // entries of sel = rows of o (the capacity)
}

// EmbedPush is embed's push-constant block.
type EmbedPush struct {
	Cols    uint32 // elements per row (nEmbd)
	N       uint32 // tokens: tok is [N], out is [N][Cols]
	RowBase uint32 // first vocabulary row in the w binding
	Rows    uint32 // vocabulary rows in the w binding
}

// ArgmaxNonFinite is argmax's answer for a row that holds a NaN or an
// infinity: broken logits, which no index may pass for.
const ArgmaxNonFinite = 0xfffffffe

// ArgmaxPush is argmax's push-constant block.
type ArgmaxPush struct {
	Cols uint32 // elements per row (nVocab)
	N    uint32 // rows: x is [N][Cols], out is [N]
}

// ArgmaxWideSpec is argmax_wide's specialization on GPUs: workgroups of
// 256, 4 columns an invocation (a 32,000-entry row in 32 workgroups).
var ArgmaxWideSpec = []uint32{256, 4}

// argmaxWideGroupsPerRow is how many workgroups argmax_wide gives a row of
// cols with spec.
func argmaxWideGroupsPerRow(cols uint32, spec []uint32) uint32 {
	span := spec[0] * spec[1]
	return (cols + span - 1) / span
}

// ArgmaxWideGroups is argmax_wide's dispatch size for n rows of cols.
func ArgmaxWideGroups(n, cols uint32, spec []uint32) [3]uint32 {
	return Groups(n * argmaxWideGroupsPerRow(cols, spec))
}

// ArgmaxWidePartWords is the size of argmax_wide's part scratch, in u32
// words, for n rows of cols: four a workgroup (its winner's value and
// index, its sums of weights for a draw, at the draw's temperature and at
// 1 for top-p).
func ArgmaxWidePartWords(n, cols uint32, spec []uint32) uint64 {
	return 4 * uint64(n) * uint64(argmaxWideGroupsPerRow(cols, spec))
}

// ArgmaxDraw is a row's draw parameters for argmax_wide (its draw
// binding, [n][8] f32, ArgmaxDrawBytesPer bytes a row): Temp 0 is the
// argmax; above 0 the token is drawn at that temperature with U, a
// uniform number in [0, 1] (docs/sampling-cost.md), among the tokens of
// top-p TopP where it is in (0, 1) (the most likely up to that
// probability at temperature 1, and those equal to the last), and at
// least MinP times as likely as the best where MinP is above 0 (min-p:
// LnMinP is its natural log, as the host computes it), after top-k where
// TopK is at least 1 and below the row's columns (the TopK most likely,
// the lower ids first among equal ones; an integer, exact in float32).
// The zero value is the argmax.
type ArgmaxDraw struct {
	Temp, U, MinP, LnMinP, TopP, TopK float32
}

// ArgmaxDrawBytesPer is the size of a row's draw parameters.
const ArgmaxDrawBytesPer = 32

// DrawAt is the draw at temperature temp with the uniform number u, a
// float64 in [0, 1) from the host's generator: u in float32, kept below 1
// (float32(u) rounds up to 1 for u within 2^-25 of it).
func DrawAt(temp float32, u float64) ArgmaxDraw {
	return ArgmaxDraw{Temp: temp, U: min(max(float32(u), 0), math.Nextafter32(1, 0))}
}

// WithMinP is d keeping only the tokens at least minP (in (0, 1]) times
// as likely as the best; 0 keeps every token.
func (d ArgmaxDraw) WithMinP(minP float32) ArgmaxDraw {
	d.MinP, d.LnMinP = 0, 0
	if minP > 0 {
		d.MinP, d.LnMinP = minP, float32(math.Log(float64(minP)))
	}
	return d
}

// WithTopP is d keeping only top-p's tokens, topP in (0, 1); 0 or 1 keeps
// every token.
func (d ArgmaxDraw) WithTopP(topP float32) ArgmaxDraw {
	d.TopP = 0
	if topP > 0 && topP < 1 {
		d.TopP = topP
	}
	return d
}

// WithTopK is d keeping only the topK most likely tokens (ties to the
// lower ids); 0, or at least the row's columns, keeps every token.
// Beyond 2^24, where float32 would round it, it is every token of any
// vocabulary a device holds.
func (d ArgmaxDraw) WithTopK(topK int) ArgmaxDraw {
	d.TopK = 0
	if topK > 0 && topK < 1<<24 {
		d.TopK = float32(topK)
	}
	return d
}

// ArgmaxDrawBytes packs rows' draw parameters for the draw binding.
func ArgmaxDrawBytes(d []ArgmaxDraw) []byte {
	b := make([]byte, ArgmaxDrawBytesPer*len(d))
	for i, x := range d {
		for j, f := range []float32{x.Temp, x.U, x.MinP, x.LnMinP, x.TopP, x.TopK} {
			binary.LittleEndian.PutUint32(b[ArgmaxDrawBytesPer*i+4*j:], math.Float32bits(f))
		}
	}
	return b
}

// Row-kernel specialization constants (rmsnorm, nll, argmax):
// [workgroup size, invocations per row]; a workgroup takes size/per-row rows.
var (
	// RowSpecGPU suits GPUs: a workgroup per row, loads coalesced.
	RowSpecGPU = []uint32{128, 128}
	// RowSpecCPU suits CPU devices (lavapipe): a workgroup of 8 per row.
	// lavapipe runs a workgroup on one thread, 8 invocations at a time in
	// 256-bit SIMD, and spreads workgroups over threads; so 8 invocations
	// fill the SIMD lanes with one row, and rows go to different threads.
	// Measured against 4 other specs (rmsnorm on 1 and 64 rows of 512 and
	// 4096, softmax on 1 row of 32000 and 64 of 512; a loaded 2-core
	// machine): the best or within 12% of it but once (40%, one row of
	// 512); an invocation per row (no barrier, as matvec prefers) was 2-3x
	// slower on one row (decode: 7 lanes idle), 128 per row 2.5x slower on
	// 64 rows. Profile.Row uses it, within the device's loop limit
	// on very long rows.
	RowSpecCPU = []uint32{8, 8}
)

// LavapipeLoopIterations is the most loop iterations an invocation may run
// on lavapipe: llvmpipe's LP_MAX_TGSI_LOOP_ITERATIONS (65535), one budget
// shared by every loop of the shader. Past it the loops stop early,
// silently, and the result is wrong with no error: a softmax over 32000
// with an invocation per row (3 passes, 96000 iterations) left most of its
// row undivided. A kernel that loops must keep each invocation's iterations
// under it on a CPU device.
const LavapipeLoopIterations = 65535

// rowPasses is how many times each row kernel loops over its row.
var rowPasses = map[string]uint32{"rmsnorm": 2, "nll": 2, "argmax": 1}

// RowLoopIterations is how many loop iterations an invocation of row kernel
// name runs on rows of cols with spec: its passes over its part of the row,
// and the fold of the row's partial results.
func RowLoopIterations(name string, cols uint32, spec []uint32) uint32 {
	tpr := spec[1]
	return rowPasses[name]*((cols+tpr-1)/tpr) + 2*uint32(bits.Len32(tpr))
}

// RowGroups is the dispatch size of a row kernel over n rows with spec.
func RowGroups(n uint32, spec []uint32) [3]uint32 {
	perGroup := spec[0] / spec[1]
	return Groups((n + perGroup - 1) / perGroup)
}

// ElementGroups is the dispatch size of swiglu, which has an invocation per
// element in workgroups of 256. (rope, mod_residual and embed have a
// workgroup per row: Groups(rows).)
func ElementGroups(n uint32) [3]uint32 {
	return Groups((n + 255) / 256)
}

// RopeFreqs is rope's freq binding for a model's RoPE table, radians per
// position of each pair of a head (mod.RopeFrequencies: [headDim/2], the
// one table every rope site reads): each as a 64-bit fixed-point fraction
// of a turn (low word, high word). The kernel takes pos * freq mod 2^64 in
// integers, exactly, so its angle is as good as the CPU's float64 one to
// within the final float32 rounding (see rope.comp). Whole turns do not
// change an integer position's angle, so a frequency of a turn or more
// keeps only its fraction.
func RopeFreqs(radians []float64) []uint32 {
	out := make([]uint32, 2*len(radians))
	for i, r := range radians {
		turns := r / (2 * math.Pi)
		turns -= math.Floor(turns) // in [0, 1), exactly: the product below is < 2^64
		fixed := uint64(math.Ldexp(turns, 64))
		out[2*i], out[2*i+1] = uint32(fixed), uint32(fixed>>32)
	}
	return out
}

func rowVariant(name, source string, bindings []Binding, push any, notes string) Variant {
	return Variant{
		Name: name, Source: source, Bindings: bindings, Push: push,
		LocalSize: [3]uint32{128, 1, 1}, LocalSizeSpec: true, Spec: RowSpecGPU,
		Notes: "Spec: [workgroup size, invocations per row] (RowSpecGPU, Profile.Row); dispatch RowGroups(n, spec)" + notes,
	}
}

func embedVariant(name string, defines []string, weightShape string) Variant {
	return Variant{
		Name: name, Source: "embed.comp", Defines: defines,
		Bindings: []Binding{
			{"w", Read, weightShape},
			{"tok", Read, "[n] u32 token ids"},
			{"out", Write, "[n][cols] f32"},
		},
		Push: EmbedPush{}, LocalSize: [3]uint32{128, 1, 1},
		Notes: "dispatch Groups(n); a table over maxStorageBufferRange is bound in pieces " +
			"of rows [rowBase, rowBase+rows), one dispatch each (an offset a multiple of the alignment); " +
			"the host checks token ids; cols a multiple of the type's block; a split or sub-block table is bound whole " +
			"or uploaded in pieces that are tables of their own",
	}
}

// modResidualVariant is mod_residual with a gate function (GATE_*) and,
// after it, where the gate applies (TARGET_*; none: the whole block).
func modResidualVariant(name string, defines ...string) Variant {
	v := Variant{
		Name: name, Source: "mod_residual.comp", Defines: defines,
		Bindings: []Binding{
			{"x", ReadWrite, "[n][cols] f32, the block inputs, updated"},
			{"o", Read, "[k][cols] f32, the block outputs of the selected rows"},
			{"sel", Read, "[k] u32 rows of x; >= n: an unused entry"},
			{"r", Read, "[n] f32 router scores"},
		},
		Push: ModResidualPush{}, LocalSize: [3]uint32{128, 1, 1},
		Notes: "dispatch Groups(k)",
	}
	if slices.Contains(defines, "TARGET_MLP") {
		v.Bindings[1].Shape = "[k][cols] f32, h = x + attn of the selected rows (the block stopped before its MLP add)"
		v.Bindings = append(v.Bindings, Binding{"m", Read, "[k][cols] f32, the MLP outputs of the selected rows"})
	}
	return v
}

// ModResidualVariant names the mod_residual variant for a gate function
// (mod.GateSigmoid or mod.GateIdentity) and a gate target (mod.GateTarget*;
// "" is the whole block).
func ModResidualVariant(gate, target string) string {
	name := "mod_residual"
	if target == "output" || target == "mlp" {
		name += "_" + target
	}
	return name + "_" + gate
}

// argmaxWide is argmax_wide (a GPU profile's head).
var argmaxWide = Variant{
	Name: "argmax_wide", Source: "argmax_wide.comp",
	Bindings: []Binding{
		{"x", Read, "[n][cols] f32"},
		{"out", Write, "[n] u32"},
		{"part", ReadWrite, "[n][groups][3] u32 scratch: each workgroup's winner (value bits, index) and sum of weights (bits)"},
		{"done", ReadWrite, "[n] u32 scratch, zero before and after"},
		{"draw", Read, "[n][8] f32: each row's temperature (0: the argmax), uniform number, min-p and top-p (ArgmaxDraw)"},
	},
	Push: ArgmaxPush{}, LocalSize: [3]uint32{256, 1, 1}, LocalSizeSpec: true, Spec: ArgmaxWideSpec,
	Notes: "argmax with a row over many workgroups, the last merging (GPUs), or a draw at a row's temperature; Spec [workgroup size, columns per invocation]; " +
		"dispatch ArgmaxWideGroups(n, cols, spec); part ArgmaxWidePartWords, done n words zero-filled once",
}

func init() {
	Variants = append(Variants,
		rowVariant("rmsnorm", "rmsnorm.comp", []Binding{
			{"x", Read, "[n][cols] f32"},
			{"w", Read, "[cols] f32"},
			{"out", Write, "[n][cols] f32 (may be x)"},
		}, RMSNormPush{}, ""),
		rowVariant("nll", "nll.comp", []Binding{
			{"x", Read, "[n][cols] f32 logits"},
			{"target", Read, "[rowBase+n] u32 the token each row predicts"},
			{"out", Write, "[rowBase+n] f32 -log softmax(x[r])[target[rowBase+r]]"},
		}, NLLPush{}, "; logits over maxStorageBufferRange bound in pieces of rows, RowBase the first"),
		rowVariant("argmax", "argmax.comp", []Binding{
			{"x", Read, "[n][cols] f32"},
			{"out", Write, "[n] u32"},
		}, ArgmaxPush{}, ""),
		argmaxWide, handoffVariant(argmaxWide),
		Variant{
			Name: "rope", Source: "rope.comp",
			Bindings: []Binding{
				{"x", Read, "[n][nHead*headDim] f32"},
				{"pos", Read, "[n] u32 original positions"},
				{"freq", Read, "[headDim/2][2] u32: RopeFreqs of the model's table"},
				{"out", Write, "[n][nHead*headDim] f32 (may be x, or a KV cache slice)"},
			},
			Push: RopePush{}, LocalSize: [3]uint32{64, 1, 1},
			Notes: "dispatch Groups(n); headDim even; freq = RopeFreqs(mod.RopeFrequencies), uploaded once",
		},
		Variant{
			Name: "swiglu", Source: "swiglu.comp",
			Bindings: []Binding{
				{"gate", Read, "[n] f32"},
				{"up", Read, "[n] f32"},
				{"out", Write, "[n] f32 (may be gate or up)"},
			},
			Push: SwiGLUPush{}, LocalSize: [3]uint32{256, 1, 1},
			Notes: "dispatch ElementGroups(n)",
		},
		modResidualVariant("mod_residual_sigmoid", "GATE_SIGMOID"),
		modResidualVariant("mod_residual_identity", "GATE_IDENTITY"),
		modResidualVariant("mod_residual_output_sigmoid", "GATE_SIGMOID", "TARGET_OUTPUT"),
		modResidualVariant("mod_residual_output_identity", "GATE_IDENTITY", "TARGET_OUTPUT"),
		modResidualVariant("mod_residual_mlp_sigmoid", "GATE_SIGMOID", "TARGET_MLP"),
		modResidualVariant("mod_residual_mlp_identity", "GATE_IDENTITY", "TARGET_MLP"),
	)
	// Each weight type's embed reads its device layout (EmbedName); a
	// repacked table is bound whole or, over the binding limit, uploaded in
	// pieces that are each a table of their own.
	for _, wt := range WeightTypes {
		Variants = append(Variants, embedVariant(EmbedName(wt.Name), wt.Defines, wt.Shape))
	}
}
