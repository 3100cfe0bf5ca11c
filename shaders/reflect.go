package shaders

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
)

// What a kernel needs of a device, read from its SPIR-V with its
// specialization constants applied: the workgroup size, the shared memory
// its workgroup declares, and the optional features its capabilities
// declare. Profile.Allows compares these with the device's limits and
// features, so a variant that a device cannot run is refused by name
// before Vulkan sees it (the validation layer would catch some of these, a
// driver without it none).

// Needs is what one (variant, specialization) needs of a device.
type Needs struct {
	Invocations uint32   // workgroup size, x*y*z
	SharedBytes uint32   // Workgroup-storage variables, laid out as std430 would
	Features    []string // vk.Features json names its capabilities need, sorted
	// Subgroups: the kernel uses subgroup operations (GroupNonUniform*):
	// its results may depend on the subgroup size a dispatch gets.
	Subgroups bool
}

// SPIR-V capabilities and the device feature each needs (vk.Features json
// names). Shader is core; GroupNonUniform (basic subgroup operations in
// compute) is core since Vulkan 1.1.
var capabilityFeatures = map[uint32]string{
	1:    "",                            // Shader
	9:    "shader_float16",              // Float16
	39:   "shader_int8",                 // Int8
	61:   "",                            // GroupNonUniform
	63:   "subgroup_arithmetic",         // GroupNonUniformArithmetic
	64:   "subgroup_ballot",             // GroupNonUniformBallot
	65:   "subgroup_shuffle",            // GroupNonUniformShuffle
	4433: "storage_buffer_16bit_access", // StorageBuffer16BitAccess
	4448: "storage_buffer_8bit_access",  // StorageBuffer8BitAccess
	5345: "vulkan_memory_model",         // VulkanMemoryModel
	5357: "cooperative_matrix_nv",       // CooperativeMatrixNV
	6022: "cooperative_matrix_khr",      // CooperativeMatrixKHR
	6018: "integer_dot_product",         // DotProductInput4x8BitPacked
	6019: "integer_dot_product",         // DotProduct
}

// SPIR-V opcodes, decorations and constants read here (SPIR-V 1.5).
const (
	rOpCapability         = 17
	rOpExecutionMode      = 16
	rOpTypeBool           = 20
	rOpTypeInt            = 21
	rOpTypeFloat          = 22
	rOpTypeVector         = 23
	rOpTypeArray          = 28
	rOpTypeStruct         = 30
	rOpTypePointer        = 32
	rOpConstantTrue       = 41
	rOpConstantFalse      = 42
	rOpConstant           = 43
	rOpConstantComposite  = 44
	rOpSpecConstantTrue   = 48
	rOpSpecConstantFalse  = 49
	rOpSpecConstant       = 50
	rOpSpecConstantComp   = 51
	rOpSpecConstantOp     = 52
	rOpCoopMatLengthNV    = 5362 // OpCooperativeMatrixLengthNV
	rOpCoopMatLengthKHR   = 4460 // OpCooperativeMatrixLengthKHR
	rOpVariable           = 59
	rOpDecorate           = 71
	rDecBuiltIn           = 11
	rDecSpecID            = 1
	rBuiltInWorkgroupSize = 25
	rModeLocalSize        = 17
	rClassWorkgroup       = 4
	rCapGroupNonUniform   = 61
)

// spirvModule is the part of a module Needs reads.
type spirvModule struct {
	caps      []uint32
	localSize [3]uint32
	insts     [][]uint32 // every instruction (opcode | count, operands...)
}

var (
	modulesMu sync.Mutex
	modules   = map[string]*spirvModule{}
)

func (v Variant) module() (*spirvModule, error) {
	modulesMu.Lock()
	defer modulesMu.Unlock()
	if m, ok := modules[v.Name]; ok {
		return m, nil
	}
	b := v.SPIRV()
	if len(b)%4 != 0 || len(b) < 20 || binary.LittleEndian.Uint32(b) != 0x07230203 {
		return nil, fmt.Errorf("shaders: %s: not little-endian SPIR-V", v.Name)
	}
	m := &spirvModule{}
	for i := 5; i < len(b)/4; {
		w := binary.LittleEndian.Uint32(b[4*i:])
		n := int(w >> 16)
		if n == 0 || i+n > len(b)/4 {
			return nil, fmt.Errorf("shaders: %s: bad SPIR-V instruction at word %d", v.Name, i)
		}
		inst := make([]uint32, n)
		for j := range inst {
			inst[j] = binary.LittleEndian.Uint32(b[4*(i+j):])
		}
		switch w & 0xffff {
		case rOpCapability:
			m.caps = append(m.caps, inst[1])
		case rOpExecutionMode:
			if n >= 6 && inst[2] == rModeLocalSize {
				copy(m.localSize[:], inst[3:6])
			}
		}
		m.insts = append(m.insts, inst)
		i += n
	}
	modules[v.Name] = m
	return m, nil
}

// Needs is what v needs of a device with specialization spec (nil: v.Spec).
func (v Variant) Needs(spec []uint32) (Needs, error) {
	if spec == nil {
		spec = v.Spec
	}
	m, err := v.module()
	if err != nil {
		return Needs{}, err
	}
	var nd Needs
	for _, c := range m.caps {
		f, ok := capabilityFeatures[c]
		if !ok {
			return Needs{}, fmt.Errorf("shaders: %s: SPIR-V capability %d has no device feature in this table", v.Name, c)
		}
		if f != "" && !slices.Contains(nd.Features, f) {
			nd.Features = append(nd.Features, f)
		}
		nd.Subgroups = nd.Subgroups || c == rCapGroupNonUniform
	}
	slices.Sort(nd.Features)
	e := newSpecEval(m, spec)
	if err := e.run(); err != nil {
		return Needs{}, fmt.Errorf("shaders: %s: %w", v.Name, err)
	}
	ls := m.localSize
	if e.workgroup != nil {
		ls = [3]uint32{e.workgroup[0], e.workgroup[1], e.workgroup[2]}
	}
	nd.Invocations = ls[0] * ls[1] * ls[2]
	nd.SharedBytes = e.shared
	return nd, nil
}

// specEval evaluates a module's constants with specialization applied, the
// sizes of its types, and sums its Workgroup variables.
type specEval struct {
	m         *spirvModule
	spec      []uint32
	specIDs   map[uint32]uint32   // result id -> SpecId
	values    map[uint32][]uint32 // constant id -> value (one word, or a composite's)
	sizes     map[uint32][2]uint32
	pointers  map[uint32][2]uint32 // pointer type -> (class, pointee)
	workgroup []uint32             // the WorkgroupSize built-in, when declared
	wgID      uint32
	shared    uint32
}

func newSpecEval(m *spirvModule, spec []uint32) *specEval {
	return &specEval{m: m, spec: spec, specIDs: map[uint32]uint32{}, values: map[uint32][]uint32{},
		sizes: map[uint32][2]uint32{}, pointers: map[uint32][2]uint32{}}
}

func (e *specEval) run() error {
	for _, in := range e.m.insts {
		if in[0]&0xffff == rOpDecorate && len(in) >= 4 {
			switch in[2] {
			case rDecSpecID:
				e.specIDs[in[1]] = in[3]
			case rDecBuiltIn:
				if in[3] == rBuiltInWorkgroupSize {
					e.wgID = in[1]
				}
			}
		}
	}
	for _, in := range e.m.insts {
		if err := e.step(in); err != nil {
			return err
		}
	}
	if e.wgID != 0 {
		e.workgroup = e.values[e.wgID]
		if len(e.workgroup) != 3 {
			return fmt.Errorf("the WorkgroupSize built-in is not a 3-vector constant")
		}
	}
	return nil
}

func (e *specEval) step(in []uint32) error {
	ops := in[1:]
	switch in[0] & 0xffff {
	case rOpTypeBool:
		e.sizes[ops[0]] = [2]uint32{4, 4} // (size, alignment)
	case rOpTypeInt, rOpTypeFloat:
		s := ops[1] / 8
		e.sizes[ops[0]] = [2]uint32{s, s}
	case rOpTypeVector:
		c := e.sizes[ops[1]]
		align := c[1] * 2
		if ops[2] > 2 {
			align = c[1] * 4
		}
		e.sizes[ops[0]] = [2]uint32{c[0] * ops[2], align}
	case rOpTypeArray:
		el, n := e.sizes[ops[1]], e.values[ops[2]]
		if len(n) != 1 {
			return fmt.Errorf("array %d: its length %d is not a known constant", ops[0], ops[2])
		}
		el[1] = max(el[1], 1) // a type not sized here (never in shared memory)
		stride := (el[0] + el[1] - 1) / el[1] * el[1]
		e.sizes[ops[0]] = [2]uint32{stride * n[0], el[1]}
	case rOpTypeStruct:
		var size, align uint32 = 0, 1
		for _, t := range ops[1:] {
			m := e.sizes[t]
			m[1] = max(m[1], 1)
			size = (size+m[1]-1)/m[1]*m[1] + m[0]
			align = max(align, m[1])
		}
		e.sizes[ops[0]] = [2]uint32{(size + align - 1) / align * align, align}
	case rOpTypePointer:
		e.pointers[ops[0]] = [2]uint32{ops[1], ops[2]}
	case rOpConstant:
		e.values[ops[1]] = []uint32{ops[2]}
	case rOpConstantTrue, rOpSpecConstantTrue, rOpConstantFalse, rOpSpecConstantFalse:
		op := in[0] & 0xffff
		val := uint32(0)
		if op == rOpConstantTrue || op == rOpSpecConstantTrue {
			val = 1
		}
		if id, ok := e.specIDs[ops[1]]; ok && op >= rOpSpecConstantTrue && int(id) < len(e.spec) {
			val = min(e.spec[id], 1)
		}
		e.values[ops[1]] = []uint32{val}
	case rOpSpecConstant:
		val := ops[2]
		if id, ok := e.specIDs[ops[1]]; ok && int(id) < len(e.spec) {
			val = e.spec[id]
		}
		e.values[ops[1]] = []uint32{val}
	case rOpConstantComposite, rOpSpecConstantComp:
		var vals []uint32
		for _, c := range ops[2:] {
			vals = append(vals, e.values[c]...)
		}
		e.values[ops[1]] = vals
	case rOpSpecConstantOp:
		if ops[2] == rOpCoopMatLengthNV || ops[2] == rOpCoopMatLengthKHR {
			break // the device's count of a matrix's elements an invocation holds: unknown here, never an array's length
		}
		v, err := e.specOp(ops[2], ops[3:])
		if err != nil {
			return fmt.Errorf("spec constant %d: %w", ops[1], err)
		}
		e.values[ops[1]] = []uint32{v}
	case rOpVariable:
		if ops[2] == rClassWorkgroup {
			e.shared += e.sizes[e.pointers[ops[0]][1]][0]
		}
	}
	return nil
}

// specOp evaluates the integer OpSpecConstantOp operations glslc emits for
// array lengths and workgroup arithmetic.
func (e *specEval) specOp(opcode uint32, ops []uint32) (uint32, error) {
	arg := func(i int) uint32 {
		if v := e.values[ops[i]]; len(v) == 1 {
			return v[0]
		}
		return 0
	}
	switch opcode {
	case 81: // OpCompositeExtract composite, index
		v := e.values[ops[0]]
		if int(ops[1]) >= len(v) {
			return 0, fmt.Errorf("CompositeExtract of index %d from %d values", ops[1], len(v))
		}
		return v[ops[1]], nil
	case 128:
		return arg(0) + arg(1), nil
	case 130:
		return arg(0) - arg(1), nil
	case 132:
		return arg(0) * arg(1), nil
	case 134, 137: // UDiv, UMod
		if arg(1) == 0 {
			return 0, fmt.Errorf("division by zero")
		}
		if opcode == 134 {
			return arg(0) / arg(1), nil
		}
		return arg(0) % arg(1), nil
	case 194:
		return arg(0) >> arg(1), nil
	case 196:
		return arg(0) << arg(1), nil
	case 197:
		return arg(0) | arg(1), nil
	case 199:
		return arg(0) & arg(1), nil
	case 170, 171, 172, 174, 176, 178: // IEqual, INotEqual, UGreaterThan(Equal), ULessThan(Equal): 0 or 1
		a, b := arg(0), arg(1)
		r := map[uint32]bool{170: a == b, 171: a != b, 172: a > b, 174: a >= b, 176: a < b, 178: a <= b}[opcode]
		if r {
			return 1, nil
		}
		return 0, nil
	case 169: // OpSelect cond, a, b
		if arg(0) != 0 {
			return arg(1), nil
		}
		return arg(2), nil
	}
	return 0, fmt.Errorf("OpSpecConstantOp %d is not evaluated here", opcode)
}
