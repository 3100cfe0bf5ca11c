package shaders

import "strings"

// attention_coop.comp: the prefill's attention over an F16 generate-mode
// cache with both products of flash attention on tensor cores
// (VK_NV_cooperative_matrix), attention_split's bindings, push constants
// and partial results (attention_merge after it). Profile.AttentionSplit
// takes it under Profile.AttentionCoop.

// AttentionCoopName is attention_coop's variant: on tensor cores, or
// (emulate) its products in plain arithmetic (every device runs it; CI
// does).
func AttentionCoopName(emulate bool) string {
	if emulate {
		return "attention_coop_counts_f16_emu"
	}
	return "attention_coop_counts_f16"
}

// IsAttentionCoop says whether variant name is attention_coop's.
func IsAttentionCoop(name string) bool { return strings.HasPrefix(name, "attention_coop") }

// AttentionCoopSubgroups is attention_coop's subgroups a workgroup, each
// taking 16 query rows (one tile's); AttentionCoopKeys its keys staged at
// a time.
const (
	AttentionCoopSubgroups = 4
	AttentionCoopKeys      = 32 // keys staged at a time (two 16-key tiles)
)

// AttentionCoopSpec is attention_coop's specialization constants for head
// dimension hd: [32 * AttentionCoopSubgroups invocations, hd, keys staged
// at a time].
func AttentionCoopSpec(hd uint32) []uint32 {
	return []uint32{32 * AttentionCoopSubgroups, hd, AttentionCoopKeys}
}

// AttentionCoopHeads says whether attention_coop takes heads of hd
// dimensions: whole 16-wide tiles, at most 128 (each subgroup holds its
// rows' queries as 2*hd/16 operand tiles and its output as hd/16
// accumulators: at 128, about 130 of NVIDIA's 255 registers a thread).
func AttentionCoopHeads(hd uint32) bool { return hd%16 == 0 && hd > 0 && hd <= 128 }

// AttentionCoopLoopIterations is the most loop iterations an invocation of
// the emulated attention_coop runs over a key tile of splitLen at head
// dimension hd (lavapipe stops an invocation's loops, all together, at
// LavapipeLoopIterations): the query's conversion, and per staged block
// its staging, the scores (16 keys of 2 tiles across hd), the softmax
// (2 passes over half the keys) and P V (8 columns of hd/16 tiles across
// the block's keys), with each loop's own count.
func AttentionCoopLoopIterations(hd, splitLen uint32) uint32 {
	bc, wg := uint32(AttentionCoopKeys), uint32(32*AttentionCoopSubgroups)
	blocks := (splitLen + bc - 1) / bc
	stage := (bc*hd/8+wg-1)/wg + (bc+wg-1)/wg
	scores := bc/16 + bc/16*8*(1+hd)
	softmax := 2 * bc / 2
	pv := hd/16 + hd/16*8*(1+bc)
	return hd + 2*(hd/16*8) + blocks*(1+stage+scores+softmax+pv) + 8
}

// attentionCoopFits says whether attention_coop (its emulation under
// MatmulCoopEmulate) takes heads of hd on p's device: AttentionCoopHeads,
// its workgroup and shared memory within the device's limits, and its
// loops within the loop cap at the profile's key tiles.
func (p Profile) attentionCoopFits(hd uint32) bool {
	if !AttentionCoopHeads(hd) || (p.LoopCap != 0 && AttentionCoopLoopIterations(hd, p.AttentionSplitLen(hd)) > p.LoopCap) {
		return false
	}
	v, err := Lookup(AttentionCoopName(p.MatmulCoopEmulate))
	if err != nil {
		return false
	}
	nd, err := v.Needs(AttentionCoopSpec(hd))
	return err == nil && (!p.limitsKnown() || nd.SharedBytes <= p.SharedMemory && nd.Invocations <= p.MaxWorkGroupInvocations)
}

// AttentionSplitGroupsOf is the dispatch size of Profile.AttentionSplit's
// kernel name with spec over n rows, nHead heads and splits key tiles:
// attention_coop's workgroups take 16 rows a subgroup, attention_split's
// AttentionSplitRows.
func AttentionSplitGroupsOf(name string, spec []uint32, n, nHead, splits uint32) [3]uint32 {
	if !IsAttentionCoop(name) {
		return AttentionSplitGroups(n, nHead, splits)
	}
	rows := 16 * (spec[0] / 32)
	return Groups((n + rows - 1) / rows * nHead * splits)
}

func init() {
	for _, emulate := range []bool{false, true} {
		v := Variant{
			Name: AttentionCoopName(emulate), Source: "attention_coop.comp",
			Bindings: append(attentionInputs(),
				Binding{"counts", Read, "[nLayer] u32: entries = counts[layer]"},
				Binding{"partO", Write, "[n*nHead*splits][headDim] f32"},
				Binding{"partML", Write, "[n*nHead*splits][2] f32 (max, sum)"}),
			Push: AttentionSplitPush{}, LocalSize: [3]uint32{128, 1, 1}, LocalSizeSpec: true, Spec: AttentionCoopSpec(64),
			Notes: "Spec: AttentionCoopSpec(headDim) (AttentionCoopHeads); k and v F16 (the generate-mode cache), " +
				"whole uvec4s a head (headDim a multiple of 16); dispatch AttentionSplitGroupsOf(name, spec, n, nHead, splits); then attention_merge",
			Op: OpAttentionCoop, Type: KVF16.String(),
		}
		if emulate {
			v.Defines = []string{"EMULATE_COOPMAT"}
		} else {
			v.Notes += "; needs VK_NV_cooperative_matrix (Device.CooperativeMatrixNV) and a subgroup size of 32"
		}
		Variants = append(Variants, v)
	}
}
