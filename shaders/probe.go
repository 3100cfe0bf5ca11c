package shaders

// ProbePush is probe's push-constant block.
type ProbePush struct {
	N     uint32 // uvec4 elements in the buffer
	Magic uint32 // probe_read stores its XOR only when it equals this
}

// ProbeIterations is how many elements each invocation of probe walks:
// enough work per invocation to hide latency, and far under lavapipe's
// loop cap (LavapipeLoopIterations) at any buffer size ProbeGroups allows.
const ProbeIterations = 64

// ProbeGroups is the dispatch size of probe over n uvec4 elements: one
// invocation per ProbeIterations elements, at most MaxGroupsX groups (a
// grid-stride loop covers the rest).
func ProbeGroups(n uint32) [3]uint32 {
	return [3]uint32{min(MaxGroupsX, max(1, (n+256*ProbeIterations-1)/(256*ProbeIterations))), 1, 1}
}

// StageChainName is the benchmark kernel whose stages hand on to each
// other inside one dispatch (stage_chain.comp); StageChainName + "_dispatch"
// is a stage a dispatch, handed on the same way with no barrier between.
const StageChainName = "stage_chain"

// stageChainBindings are both stage_chain variants' bindings.
var stageChainBindings = []Binding{
	{"even", ReadWrite, "[n] f32: the even stages' source, zero first"},
	{"odd", ReadWrite, "[n] f32: the odd stages' source"},
	{"count", ReadWrite, "[stages + 1] u32: zero first (the kernel leaves it so), then the stall flag"},
}

func init() {
	Variants = append(Variants,
		Variant{
			Name: "probe_fill", Source: "probe.comp", Defines: []string{"PROBE_FILL"},
			Bindings:  []Binding{{"src", Write, "[n] uvec4"}},
			Push:      ProbePush{},
			LocalSize: [3]uint32{256, 1, 1},
			Notes:     "writes a pattern over the buffer; dispatch ProbeGroups(n)",
		},
		Variant{
			Name: StageChainName, Source: "stage_chain.comp",
			Bindings:  stageChainBindings,
			Push:      AddPush{},
			LocalSize: [3]uint32{256, 1, 1},
			Notes: "a benchmark kernel: stages dependent stages in one dispatch of stages * n/256 workgroups, " +
				"handed on by atomic counts (BenchmarkDispatchGPU); n a multiple of 256",
		},
		Variant{
			Name: StageChainName + "_dispatch", Source: "stage_chain.comp", Defines: []string{"PER_DISPATCH"},
			Bindings:  stageChainBindings,
			Push:      StageChainPush{},
			LocalSize: [3]uint32{256, 1, 1},
			Notes: "a benchmark kernel: stage Stage of a chain, n/256 workgroups a dispatch, the dispatches bound with vk.Handoff " +
				"(no barrier between them: each waits on the count of the one before; BenchmarkDispatchGPU)",
		},
		Variant{
			Name: "probe_read", Source: "probe.comp",
			Bindings:  []Binding{{"src", Read, "[n] uvec4"}, {"sink", Write, "[1] u32, written (almost) never"}},
			Push:      ProbePush{},
			LocalSize: [3]uint32{256, 1, 1},
			Notes:     "reads every element once; dispatch ProbeGroups(n)",
		},
	)
}

// ProbeFlopsPush is the push-constant block of probe_fma and probe_coop.
type ProbeFlopsPush struct {
	Iterations uint32  // trips of the main loop
	A          float32 // each step is x = x*A + B; 1 and 1 make the result an exact count of the steps
	B          float32
}

// probe_fma's shape (probe_fma.comp's CHAINS and UNROLL; a test reads them
// there) and probe_coop's (ACCS and UNROLL).
const (
	ProbeFMAChains        = 8
	ProbeFMAUnroll        = 8
	ProbeFMALocalSize     = 256
	ProbeCoopAccumulators = 8
	ProbeCoopUnroll       = 2
	ProbeCoopSubgroups    = 4 // subgroups of 32 a workgroup
)

// ProbeFMAFLOPs is the FLOPs of a probe_fma dispatch of groups workgroups
// and iterations trips: 2 per FMA.
func ProbeFMAFLOPs(groups, iterations uint32) uint64 {
	return 2 * ProbeFMAChains * ProbeFMAUnroll * uint64(iterations) * ProbeFMALocalSize * uint64(groups)
}

// ProbeFMAResult is what every invocation of probe_fma writes with A = B =
// 1: chain c ends at c + ProbeFMAUnroll*iterations.
func ProbeFMAResult(iterations uint32) float32 {
	return float32(ProbeFMAChains*(ProbeFMAChains-1)/2 + ProbeFMAChains*ProbeFMAUnroll*int(iterations))
}

// ProbeCoop and ProbeCoopKHR are the tensor-core probe's variants through
// VK_NV_cooperative_matrix and VK_KHR_cooperative_matrix.
const (
	ProbeCoop    = "probe_coop"
	ProbeCoopKHR = "probe_coop_khr"
)

// ProbeCoopFLOPs is the FLOPs of a probe_coop dispatch: a 16x16x16
// product is 2*16*16*16.
func ProbeCoopFLOPs(groups, iterations uint32) uint64 {
	return 2 * 16 * 16 * 16 * ProbeCoopAccumulators * ProbeCoopUnroll * uint64(iterations) * ProbeCoopSubgroups * uint64(groups)
}

// ProbeCoopResult is every element probe_coop stores with A = B = 1.
func ProbeCoopResult(iterations uint32) float32 {
	return float32(16 * ProbeCoopAccumulators * ProbeCoopUnroll * int(iterations))
}

func init() {
	Variants = append(Variants,
		Variant{
			Name: "probe_fma", Source: "probe_fma.comp",
			Bindings:  []Binding{{"out", Write, "[groups*256] f32: each invocation's sum of its chains"}},
			Push:      ProbeFlopsPush{},
			LocalSize: [3]uint32{ProbeFMALocalSize, 1, 1},
			Notes:     "FP32 FMA chains in registers; ProbeFMAFLOPs(groups, iterations) a dispatch",
		},
		Variant{
			Name: "probe_coop", Source: "probe_coop.comp",
			Bindings:  []Binding{{"out", Write, "[groups*4][256] f32: each subgroup's accumulators summed"}},
			Push:      ProbeFlopsPush{},
			LocalSize: [3]uint32{32 * ProbeCoopSubgroups, 1, 1},
			Notes:     "tensor-core products in registers; needs VK_NV_cooperative_matrix and a subgroup size of 32; ProbeCoopFLOPs(groups, iterations) a dispatch",
		},
		Variant{
			Name: ProbeCoopKHR, Source: "probe_coop.comp", Defines: []string{CoopMatKHRDefine},
			Bindings:  []Binding{{"out", Write, "[groups*4][256] f32: each subgroup's accumulators summed"}},
			Push:      ProbeFlopsPush{},
			LocalSize: [3]uint32{32 * ProbeCoopSubgroups, 1, 1},
			Notes:     "probe_coop through VK_KHR_cooperative_matrix (include/coopmat.glsl); needs a subgroup size of 32 (Profile.RequiredSubgroupSize)",
		},
	)
}
