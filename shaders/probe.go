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
			Name: "probe_read", Source: "probe.comp",
			Bindings:  []Binding{{"src", Read, "[n] uvec4"}, {"sink", Write, "[1] u32, written (almost) never"}},
			Push:      ProbePush{},
			LocalSize: [3]uint32{256, 1, 1},
			Notes:     "reads every element once; dispatch ProbeGroups(n)",
		},
	)
}
