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
// arithmetic feature is needed. Variants that use an optional feature
// (subgroup arithmetic: the *_sg matvecs) are picked by a device's Profile
// only when it has the feature.
package shaders

//go:generate go run gen.go

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"sync"
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

	// What the variant computes, for a caller that chooses by it rather
	// than by its name (the engine's self-check, Fallback). Set on the
	// families a device's profile chooses between; empty on the others.
	Op     string // the op (the Op* constants)
	Type   string // the weight type it reads (MatvecTypes), or its KV cache type ("f16", "f32")
	Fusion string // a matvec's fusion (MatvecFusions)
	Reduce string // how its invocations sum: ReduceShared or ReduceSubgroup
}

// The ops a Variant names in Op.
const (
	OpMatvec               = "matvec"
	OpRouterScore          = "router_score"
	OpRouteDecode          = "route_decode"
	OpRouteDecodePred      = "route_decode_pred" // deciding on the predictor's score
	OpDecodeKV             = "decode_kv"
	OpDecodeAttention      = "decode_attention"
	OpDecodeAttentionSplit = "decode_attention_split"
	OpDecodeAttend         = "decode_attend"
	OpPagedAttend          = "paged_attend"    // a batched step's attention, its tiles merged by the last one
	OpMatmulCoop           = "matmul_coop"     // the tensor-core matmul (and its emulation)
	OpMatmulPipe           = "matmul_pipe"     // matmul.comp's prefetching variants (the pipelined tile)
	OpAttentionLanes       = "attention_lanes" // attention_split's ATTN_LANES variants (lanes a query row)
	OpMatmulDirect         = "matmul_direct"   // the direct tensor-core matmul over planes of halves (and its emulation)
	OpAttentionCoop        = "attention_coop"  // the prefill's attention on tensor cores (and its emulation)
	OpDotX                 = "dot_x"           // a batched step's x quantized to 8 bits once, for matvec_dot's PREQ variants
)

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

// Variants is every kernel, by op family.
var Variants = []Variant{
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

// BuildID names this build's kernels: a hash of every variant's name,
// source name and SPIR-V, so that what was measured with one set of
// kernels (a tuning, engine/vulkan/tuning.go) is not applied to another.
func BuildID() string {
	buildIDOnce.Do(func() {
		h := sha256.New()
		for _, v := range Variants {
			fmt.Fprintf(h, "%s\x00%s\x00%d\x00", v.Name, v.Source, len(v.SPIRV()))
			h.Write(v.SPIRV())
		}
		buildID = hex.EncodeToString(h.Sum(nil))[:16]
	})
	return buildID
}

var (
	buildIDOnce sync.Once
	buildID     string
)
