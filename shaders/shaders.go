// Package shaders holds modrun's GLSL compute kernels compiled to SPIR-V, and
// a table of their variants: each variant's bindings, push-constant struct
// and workgroup size, which the engine needs to make a vk.Kernel and
// dispatch it.
//
// Sources: one .comp per op family, shared headers in include/ (push.glsl
// has every push-constant block; push.go mirrors them). Variants are the
// same source compiled with different defines (matvec with WEIGHT_F16, ...).
// The SPIR-V under spv/ is committed and embedded; after editing a shader or
// the table, run `go generate ./shaders` (needs glslc). A test fails when a
// committed .spv differs from what glslc makes of its source.
//
// Only core Vulkan 1.2 is required: weights of every type are read through
// uint words (unpackHalf2x16, bitfieldExtract), so no 8/16-bit storage or
// arithmetic feature is needed.
package shaders

//go:generate go run gen.go

import (
	"embed"
	"fmt"
	"math/bits"
	"reflect"
	"slices"
)

//go:embed spv
var spv embed.FS

// Access says what a kernel does with a binding (mirrored by vk.Access).
type Access uint8

const (
	Read Access = 1 << iota
	Write
	ReadWrite = Read | Write
)

// Binding is one storage buffer of a kernel, at the binding number of its
// position in Variant.Bindings.
type Binding struct {
	Name   string // as in the GLSL comment and the Go caller: "w", "x", "y"
	Access Access
	Shape  string // the shape it holds, in the variant's push-constant names
}

// Variant is one compiled kernel.
type Variant struct {
	Name     string    // "matvec_f16"; the SPIR-V is spv/Name.spv
	Source   string    // "matvec.comp"
	Defines  []string  // glslc -D flags
	Bindings []Binding // in binding order
	Push     any       // the zero push-constant struct, e.g. MatvecPush{}
	// LocalSize is the default workgroup size. When LocalSizeSpec is set, X
	// is specialization constant 0 and Spec[0] may change it.
	LocalSize     [3]uint32
	LocalSizeSpec bool
	Spec          []uint32 // default specialization constants, constant_id i
	Notes         string   // what the caller must know
}

// PushBytes is the size of the push-constant block.
func (v Variant) PushBytes() int {
	if v.Push == nil {
		return 0
	}
	return int(reflect.TypeOf(v.Push).Size())
}

// SPIRV is the compiled kernel.
func (v Variant) SPIRV() []byte {
	b, err := spv.ReadFile("spv/" + v.Name + ".spv")
	if err != nil {
		panic(fmt.Sprintf("shaders: %s: %v (run go generate ./shaders)", v.Name, err)) // the table and spv/ disagree: a build bug
	}
	return b
}

// GlslcArgs are the glslc arguments that compile the variant to out, run in
// the shaders directory (go generate and the freshness test use them).
func (v Variant) GlslcArgs(out string) []string {
	args := []string{"--target-env=vulkan1.2"}
	for _, d := range v.Defines {
		args = append(args, "-D"+d)
	}
	return append(args, "-o", out, v.Source)
}

// weightVariant is matvec for one weight type.
func matvecVariant(name, define, weightShape string) Variant {
	return Variant{
		Name: name, Source: "matvec.comp", Defines: []string{define},
		Bindings: []Binding{
			{"w", Read, weightShape},
			{"x", Read, "[n][cols] f32"},
			{"y", Write, "[n][rows] f32"},
		},
		Push:          MatvecPush{},
		LocalSize:     [3]uint32{64, 1, 1},
		LocalSizeSpec: true,
		Spec:          MatvecSpecGPU,
		Notes: "Spec: [workgroup size, invocations per row, vectors per pass] (MatvecSpecGPU, or MatvecSpecCPUFor(n, cols) on a CPU device: lavapipe caps an invocation's loops); " +
			"dispatch MatvecGroups(rows, spec); bind w with its size rounded up to 4 " +
			"(vk buffers are); cols must be a multiple of 32 for Q8_0",
	}
}

// Variants is every kernel, by op family.
var Variants = []Variant{
	matvecVariant("matvec_f32", "WEIGHT_F32", "[rows][cols] f32"),
	matvecVariant("matvec_f16", "WEIGHT_F16", "[rows][cols] f16"),
	matvecVariant("matvec_q8_0", "WEIGHT_Q8_0", "[rows][cols/32] q8_0 blocks (34 bytes)"),
	{
		Name: "add", Source: "add.comp",
		Bindings: []Binding{
			{"a", Read, "[n] f32"},
			{"b", Read, "[n] f32"},
			{"out", Write, "[n] f32 (may be a)"},
		},
		Push:      AddPush{},
		LocalSize: [3]uint32{256, 1, 1},
		Notes:     "dispatch Groups(ceil(n / 256))",
	},
}

// Matvec specialization constants: [workgroup size, invocations per row,
// vectors per pass]. The defaults suit decode (one vector); for n vectors
// set the third to min(n, 4) or so: each pass reads the row once and x that
// many times.
var (
	// MatvecSpecGPU suits GPUs: a workgroup per row, loads coalesced.
	MatvecSpecGPU = []uint32{64, 64, 1}
	// MatvecSpecCPU suits CPU devices (lavapipe): an invocation per row, no
	// barriers, which on lavapipe cost more than the arithmetic.
	MatvecSpecCPU = []uint32{64, 1, 1}
)

// MatvecLoopIterations bounds the loop iterations one invocation of matvec
// runs for n vectors of cols with spec: per pass of NB vectors, its share of
// the row (each step with its NB inner iterations), the vector set-up and
// the tree sum. The F32 row walk is the longest of the three weight types.
func MatvecLoopIterations(n, cols uint32, spec []uint32) uint32 {
	tpr, nb := spec[1], spec[2]
	passes := (n + nb - 1) / nb
	perPass := (cols+tpr-1)/tpr*(1+nb) + 3*nb + uint32(bits.Len32(tpr))*(1+nb)
	return passes * perPass
}

// MatvecSpecCPUFor is the spec for n vectors of cols on a CPU device:
// MatvecSpecCPU (an invocation per row) while its loops stay under
// LavapipeLoopIterations, else the fewest invocations per row that do (up to
// 64). Past that — n*cols of about 4 million — split the vectors over
// several dispatches, or use matmul, which is meant for many vectors.
func MatvecSpecCPUFor(n, cols uint32) []uint32 {
	spec := append([]uint32(nil), MatvecSpecCPU...)
	for spec[1] < spec[0] && MatvecLoopIterations(n, cols, spec) > LavapipeLoopIterations {
		spec[1] *= 2
	}
	return spec
}

// MatvecGroups is the dispatch size of matvec over rows with spec.
func MatvecGroups(rows uint32, spec []uint32) [3]uint32 {
	perGroup := spec[0] / spec[1]
	return Groups((rows + perGroup - 1) / perGroup)
}

// Lookup finds a variant by name.
func Lookup(name string) (Variant, error) {
	i := slices.IndexFunc(Variants, func(v Variant) bool { return v.Name == name })
	if i < 0 {
		return Variant{}, fmt.Errorf("shaders: no kernel variant %q", name)
	}
	return Variants[i], nil
}

// MaxGroupsX is the workgroup count in X that every Vulkan device supports
// (maxComputeWorkGroupCount[0] >= 65535).
const MaxGroupsX = 65535

// Groups spreads n workgroups over a 2D grid that every device accepts; the
// kernels recover the flat index with groupIndex() (include/common.glsl).
// Some groups of the last row may be surplus: kernels check their index.
func Groups(n uint32) [3]uint32 {
	if n <= MaxGroupsX {
		return [3]uint32{n, 1, 1}
	}
	return [3]uint32{MaxGroupsX, (n + MaxGroupsX - 1) / MaxGroupsX, 1}
}
