package shaders

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// The VK_KHR_cooperative_matrix variants (COOPMAT_KHR, include/coopmat.glsl)
// are compiled by Debian 12's glslang, which has no GL_KHR_cooperative_matrix:
// they name the SPIR-V types and instructions through GL_EXT_spirv_intrinsics,
// and FixCoopKHR turns what glslang 11 writes for the type into what SPIR-V
// says it is.

// CoopMatKHRDefine is the define of the KHR variants.
const CoopMatKHRDefine = "COOPMAT_KHR"

// SPIR-V words FixCoopKHR reads and writes.
// (reflect.go's rOpTypeInt, rOpTypeFloat and rOpConstant besides these.)
const (
	kOpTypeCoopMatKHR  = 4456
	kOpFunction        = 54
	kScopeSubgroup     = 3
	kCoopMatUseAccumul = 2
)

// FixCoopKHR rewrites every OpTypeCooperativeMatrixKHR of a module compiled
// from include/coopmat.glsl's COOPMAT_KHR declarations. glslang 11 writes a
// spirv_type's parameters as literal words: there the type reads
// (result, bits, scope, rows, columns, use), bits 16 or 32 for an f16 or
// f32 component. SPIR-V wants ids: (result, component type, and the ids of
// 32-bit unsigned integer constants for scope, rows, columns and use).
// FixCoopKHR takes the module's OpTypeFloat of that width, its OpTypeInt 32
// 0 and its constants of those values (moved up to just before the type
// where glslang declared them after it: none of them depends on anything
// but the uint type), declares the constants it lacks there (new ids past
// the bound, the header's bound raised), and returns the module. It fails
// on anything else: a literal it does not expect, a component type or uint
// the module lacks, or a type already rewritten (its "bits" word would then
// be an id).
func FixCoopKHR(spv []byte) ([]byte, error) {
	if len(spv)%4 != 0 || len(spv) < 20 || binary.LittleEndian.Uint32(spv) != 0x07230203 {
		return nil, fmt.Errorf("shaders: FixCoopKHR: not little-endian SPIR-V")
	}
	words := make([]uint32, len(spv)/4)
	for i := range words {
		words[i] = binary.LittleEndian.Uint32(spv[4*i:])
	}
	// The declarations, up to the first function: where each instruction
	// FixCoopKHR may need starts.
	floats := map[uint32]int{} // width -> the OpTypeFloat's word
	uintAt := -1               // the OpTypeInt 32 0's word
	var starts []int
	for i := 5; i < len(words); {
		op, n := words[i]&0xffff, int(words[i]>>16)
		if n == 0 || i+n > len(words) {
			return nil, fmt.Errorf("shaders: FixCoopKHR: bad instruction at word %d", i)
		}
		if op == kOpFunction {
			break
		}
		starts = append(starts, i)
		switch {
		case op == rOpTypeFloat && n == 3:
			floats[words[i+2]] = i
		case op == rOpTypeInt && n == 4 && words[i+2] == 32 && words[i+3] == 0:
			uintAt = i
		}
		i += n
	}
	if uintAt < 0 {
		return nil, fmt.Errorf("shaders: FixCoopKHR: the module declares no 32-bit uint")
	}
	uintType := words[uintAt+1]
	consts := map[uint32]int{} // value -> the first OpConstant of the uint type's word
	for _, i := range starts {
		if words[i] == 4<<16|rOpConstant && words[i+1] == uintType {
			if _, ok := consts[words[i+3]]; !ok {
				consts[words[i+3]] = i
			}
		}
	}

	bound := words[3]
	out := append([]uint32(nil), words[:5]...)
	moved := map[int]bool{}     // declarations already copied ahead of their place
	made := map[uint32]uint32{} // value -> a constant declared here
	copyAt := func(i int) {
		if !moved[i] {
			moved[i] = true
			out = append(out, words[i:i+int(words[i]>>16)]...)
		}
	}
	fixed := 0
	for _, i := range starts {
		n := int(words[i] >> 16)
		if words[i]&0xffff != kOpTypeCoopMatKHR {
			copyAt(i)
			continue
		}
		if n != 7 {
			return nil, fmt.Errorf("shaders: FixCoopKHR: OpTypeCooperativeMatrixKHR of %d words at word %d, not glslang 11's 7", n, i)
		}
		bits, scope, rows, cols, use := words[i+2], words[i+3], words[i+4], words[i+5], words[i+6]
		fAt, ok := floats[bits]
		switch {
		case bits != 16 && bits != 32:
			return nil, fmt.Errorf("shaders: FixCoopKHR: component width %d at word %d (16 or 32; an id here means the type was rewritten already)", bits, i)
		case !ok:
			return nil, fmt.Errorf("shaders: FixCoopKHR: the module declares no %d-bit float", bits)
		case scope != kScopeSubgroup || use > kCoopMatUseAccumul || rows == 0 || cols == 0:
			return nil, fmt.Errorf("shaders: FixCoopKHR: scope %d, %dx%d, use %d at word %d: not include/coopmat.glsl's", scope, rows, cols, use, i)
		}
		copyAt(fAt)
		copyAt(uintAt)
		ids := make([]uint32, 4)
		for k, v := range []uint32{scope, rows, cols, use} {
			if at, ok := consts[v]; ok {
				copyAt(at)
				ids[k] = words[at+2]
				continue
			}
			if id, ok := made[v]; ok {
				ids[k] = id
				continue
			}
			ids[k], made[v] = bound, bound
			bound++
			out = append(out, 4<<16|rOpConstant, uintType, ids[k], v)
		}
		moved[i] = true
		out = append(out, 7<<16|kOpTypeCoopMatKHR, words[i+1], words[fAt+1], ids[0], ids[1], ids[2], ids[3])
		fixed++
	}
	if fixed == 0 {
		return nil, fmt.Errorf("shaders: FixCoopKHR: no OpTypeCooperativeMatrixKHR in the module")
	}
	last := starts[len(starts)-1]                           // a type was fixed: there are declarations
	out = append(out, words[last+int(words[last]>>16):]...) // the functions
	out[3] = bound
	b := make([]byte, 4*len(out))
	for i, w := range out {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b, nil
}

// Compile compiles v with glslc (its path) to out: glslc's output, through
// FixCoopKHR for a COOPMAT_KHR variant. gen.go and TestSpirvIsFresh both
// compile this way.
func (v Variant) Compile(glslc, out string) error {
	cmd := exec.Command(glslc, v.GlslcArgs(out)...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: glslc %s: %v\n%s", v.Name, strings.Join(v.GlslcArgs(out), " "), err, msg)
	}
	if !slices.Contains(v.Defines, CoopMatKHRDefine) {
		return nil
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	if b, err = FixCoopKHR(b); err != nil {
		return fmt.Errorf("%s: %w", v.Name, err)
	}
	return os.WriteFile(out, b, 0o644)
}
