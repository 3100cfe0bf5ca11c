package shaders

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// spvWords is a module's words (the header, then the instructions).
func spvWords(t *testing.T, b []byte) []uint32 {
	t.Helper()
	require.True(t, len(b)%4 == 0 && len(b) >= 20 && binary.LittleEndian.Uint32(b) == 0x07230203, "SPIR-V")
	w := make([]uint32, len(b)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return w
}

// spvInsts splits a module into its instructions, each with the word it
// starts at.
func spvInsts(t *testing.T, w []uint32) (insts [][]uint32, at []int) {
	t.Helper()
	for i := 5; i < len(w); {
		n := int(w[i] >> 16)
		require.True(t, n > 0 && i+n <= len(w), "instruction at word %d", i)
		insts, at = append(insts, w[i:i+n]), append(at, i)
		i += n
	}
	return insts, at
}

// The SPIR-V opcodes of both cooperative-matrix extensions the test counts.
const (
	tOpCoopLoadNV    = 5359
	tOpCoopStoreNV   = 5360
	tOpCoopMulAddNV  = 5361
	tOpCoopLoadKHR   = 4457
	tOpCoopStoreKHR  = 4458
	tOpCoopMulAddKHR = 4459
)

// nvTwin is the VK_NV_cooperative_matrix variant a KHR variant was made
// beside: the same source and defines but COOPMAT_KHR.
func nvTwin(t *testing.T, v Variant) Variant {
	t.Helper()
	want := slices.DeleteFunc(slices.Clone(v.Defines), func(d string) bool { return d == CoopMatKHRDefine })
	for _, o := range Variants {
		if o.Source == v.Source && slices.Equal(o.Defines, want) {
			return o
		}
	}
	t.Fatalf("%s: no variant of %s with defines %v", v.Name, v.Source, want)
	return Variant{}
}

// Every COOPMAT_KHR variant, as committed: its OpTypeCooperativeMatrixKHR
// are SPIR-V's (a component type and the ids of uint constants 3, 16, 16
// and the use, each declared before the type: what FixCoopKHR makes of
// glslang 11's literals), A and B of halves and the accumulator of floats;
// A loads row-major, B column-major, the accumulator stores row-major; the
// module declares the capability, the extension and the Vulkan memory
// model; and it loads, multiplies and stores as many times as its NV twin
// (the same kernel through the other extension).
func TestCoopKHRVariants(t *testing.T) {
	var khr []Variant
	for _, v := range Variants {
		if slices.Contains(v.Defines, CoopMatKHRDefine) {
			khr = append(khr, v)
		}
	}
	require.Len(t, khr, 2*len(WeightTypes)+1, "matmul_coop and its hilo kernel for every weight type, and the probe")
	for _, v := range khr {
		t.Run(v.Name, func(t *testing.T) {
			insts, _ := spvInsts(t, spvWords(t, v.SPIRV()))
			defined := map[uint32][]uint32{} // result id -> its declaration, as far as read
			var caps []uint32
			var model []uint32
			uses := map[uint32]uint32{} // coop type id -> use
			counts := map[uint32]int{}
			for _, in := range insts {
				op := in[0] & 0xffff
				counts[op]++
				switch op {
				case rOpCapability:
					caps = append(caps, in[1])
				case 14: // OpMemoryModel
					model = in[1:]
				case rOpTypeFloat, rOpTypeInt:
					defined[in[1]] = in
				case rOpConstant:
					defined[in[2]] = in
				case kOpTypeCoopMatKHR:
					require.Len(t, in, 7)
					comp, ok := defined[in[2]]
					require.True(t, ok, "component type %d declared before the type", in[2])
					var vals [4]uint32
					for k, id := range in[3:7] {
						c, ok := defined[id]
						require.True(t, ok, "operand %d (id %d) declared before the type", k+2, id)
						require.Equal(t, uint32(rOpConstant), c[0]&0xffff, "operand %d a constant", k+2)
						ty := defined[c[1]]
						require.Equal(t, []uint32{4<<16 | rOpTypeInt, c[1], 32, 0}, ty, "operand %d a uint constant", k+2)
						vals[k] = c[3]
					}
					use := vals[3]
					assert.Equal(t, [3]uint32{3, 16, 16}, [3]uint32(vals[:3]), "subgroup scope, 16x16")
					require.Equal(t, uint32(rOpTypeFloat), comp[0]&0xffff)
					wantBits := map[uint32]uint32{0: 16, 1: 16, 2: 32}[use]
					assert.Equal(t, wantBits, comp[2], "use %d's component width", use)
					uses[in[1]] = use
				case tOpCoopLoadKHR:
					lay := defined[in[4]]
					require.NotNil(t, lay, "the load's layout a constant")
					assert.Equal(t, map[uint32]uint32{0: 0, 1: 1}[uses[in[1]]], lay[3], "A row-major, B column-major")
				case tOpCoopStoreKHR:
					lay := defined[in[3]]
					require.NotNil(t, lay, "the store's layout a constant")
					assert.Equal(t, uint32(0), lay[3], "stored row-major")
				}
			}
			assert.ElementsMatch(t, []uint32{0, 1, 2}, mapValues(uses), "one type each for A, B and the accumulator")
			assert.Contains(t, caps, uint32(6022), "CooperativeMatrixKHR")
			assert.Contains(t, caps, uint32(5345), "VulkanMemoryModel")
			assert.Equal(t, uint32(3), model[1], "the Vulkan memory model")
			nd, err := v.Needs(nil)
			require.NoError(t, err)
			assert.Contains(t, nd.Features, "cooperative_matrix_khr")
			assert.NotContains(t, nd.Features, "cooperative_matrix_nv")

			twin := nvTwin(t, v)
			tInsts, _ := spvInsts(t, spvWords(t, twin.SPIRV()))
			nv := map[uint32]int{}
			for _, in := range tInsts {
				nv[in[0]&0xffff]++
			}
			assert.Equal(t, nv[tOpCoopLoadNV], counts[tOpCoopLoadKHR], "loads, as %s", twin.Name)
			assert.Equal(t, nv[tOpCoopStoreNV], counts[tOpCoopStoreKHR], "stores, as %s", twin.Name)
			assert.Equal(t, nv[tOpCoopMulAddNV], counts[tOpCoopMulAddKHR], "products, as %s", twin.Name)
			assert.Positive(t, counts[tOpCoopMulAddKHR])
		})
	}
}

func mapValues(m map[uint32]uint32) []uint32 {
	var out []uint32
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// FixCoopKHR refuses what it was not made for: a module rewritten already,
// one without the type (an NV variant), and a literal it does not expect.
func TestFixCoopKHRRefuses(t *testing.T) {
	v, err := Lookup(MatmulCoopKHRName(MatvecQ8_0, true))
	require.NoError(t, err)
	_, err = FixCoopKHR(v.SPIRV())
	assert.Error(t, err, "the committed module is FixCoopKHR's output: its type's operands are ids")
	nv, err := Lookup(MatmulCoopHiloName(MatvecQ8_0, false))
	require.NoError(t, err)
	_, err = FixCoopKHR(nv.SPIRV())
	assert.ErrorContains(t, err, "no OpTypeCooperativeMatrixKHR")
	_, err = FixCoopKHR([]byte("not spir-v"))
	assert.Error(t, err)

	// glslang's own output for the probe, its first type's width made 8.
	glslc, err := exec.LookPath("glslc")
	if err != nil {
		t.Skip("glslc is not installed (Debian: glslc): cannot compile a COOPMAT_KHR variant to break")
	}
	probe, err := Lookup(ProbeCoopKHR)
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "probe.spv")
	cmd := exec.Command(glslc, probe.GlslcArgs(out)...)
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", msg)
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	fixed, err := FixCoopKHR(raw)
	require.NoError(t, err)
	assert.Equal(t, probe.SPIRV(), fixed, "Compile's output is FixCoopKHR's of glslc's")
	w := spvWords(t, raw)
	insts, at := spvInsts(t, w)
	i := slices.IndexFunc(insts, func(in []uint32) bool { return in[0]&0xffff == kOpTypeCoopMatKHR })
	require.GreaterOrEqual(t, i, 0)
	w[at[i]+2] = 8
	b := make([]byte, 4*len(w))
	for k, x := range w {
		binary.LittleEndian.PutUint32(b[4*k:], x)
	}
	_, err = FixCoopKHR(b)
	assert.ErrorContains(t, err, "component width 8")
}

// Every variant passes spirv-val (Vulkan 1.2 rules). Debian 12's spirv-val
// (SPIRV-Tools 2022.4) predates SPV_KHR_cooperative_matrix: the COOPMAT_KHR
// variants are checked only by a validator that knows it, named by
// MODRUN_SPIRV_VAL (docs/cooperative-matrix-khr.md: SPIRV-Tools built from
// source), and skipped by name otherwise.
func TestSpirvValidates(t *testing.T) {
	val, err := exec.LookPath("spirv-val")
	if err != nil {
		t.Skip("spirv-val is not installed (Debian: spirv-tools): cannot validate the SPIR-V")
	}
	newer := os.Getenv("MODRUN_SPIRV_VAL")
	dir := t.TempDir()
	for _, v := range Variants {
		khr := slices.Contains(v.Defines, CoopMatKHRDefine)
		t.Run(v.Name, func(t *testing.T) {
			path := filepath.Join(dir, v.Name+".spv")
			require.NoError(t, os.WriteFile(path, v.SPIRV(), 0o644))
			tool := val
			if khr && newer != "" {
				tool = newer
			}
			msg, err := exec.Command(tool, "--target-env", "vulkan1.2", path).CombinedOutput()
			if err != nil && khr && tool == val && strings.Contains(string(msg), "6022") {
				t.Skipf("%s does not know SPV_KHR_cooperative_matrix (capability 6022; SPIRV-Tools 2022.4 is Debian 12's): set MODRUN_SPIRV_VAL to a newer spirv-val to check %s", val, v.Name)
			}
			assert.NoError(t, err, "%s %s:\n%s", tool, v.Name, msg)
		})
	}
}
