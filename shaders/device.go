package shaders

import (
	"fmt"
	"slices"
	"strings"
)

// The device side of a profile: whether a device can run a kernel variant
// with a specialization (its features and limits against what the SPIR-V
// needs), the subgroup size a subgroup kernel's pipeline must require, the
// specializations that shrink to fit a small device, and each op's safe
// variant for the self-check's fallback.

// has says whether the device has feature (a vk.Features json name).
func (d Device) has(feature string) bool {
	switch feature {
	case "shader_float16":
		return d.Float16
	case "shader_int8":
		return d.Int8
	case "storage_buffer_16bit_access":
		return d.Storage16Bit
	case "storage_buffer_8bit_access":
		return d.Storage8Bit
	case "subgroup_arithmetic":
		return d.SubgroupArithmetic
	case "subgroup_shuffle":
		return d.SubgroupShuffle
	case "subgroup_ballot":
		return d.SubgroupBallot
	case "vulkan_memory_model":
		return d.CooperativeMatrixNV || d.CooperativeMatrixKHR // vk's CooperativeMatrixNV and KHR include the memory model
	case "cooperative_matrix_nv":
		return d.CooperativeMatrixNV
	case "cooperative_matrix_khr":
		return d.CooperativeMatrixKHR
	case "integer_dot_product":
		return d.IntegerDotProduct
	}
	return false
}

// limitsKnown: the Device carries the device's limits (the engine's
// DeviceProfile fills them; a Device written by hand in a test may not, and
// is then not checked against them).
func (d Device) limitsKnown() bool { return d.SharedMemory != 0 }

// Allows says why the device cannot run variant v with spec (nil: v.Spec),
// or nil when it can: every optional feature its SPIR-V declares, a
// workgroup within maxComputeWorkGroupInvocations, shared memory within
// maxComputeSharedMemorySize, and, for a kernel with subgroup operations, a
// subgroup size the profile is sure of (and, where its pipeline requires
// it, a workgroup of whole subgroups, at most MaxWorkgroupSubgroups).
func (p Profile) Allows(v Variant, spec []uint32) error {
	nd, err := v.Needs(spec)
	if err != nil {
		return err
	}
	for _, f := range nd.Features {
		if !p.has(f) {
			return fmt.Errorf("shaders: %s needs %s, which the device lacks", v.Name, f)
		}
	}
	if nd.Subgroups {
		sg, require := p.SubgroupSize, p.RequireSubgroupSize
		if p.coop32(nd) {
			sg, require = MatmulCoopSubgroup, true
		}
		switch {
		case sg == 0:
			return fmt.Errorf("shaders: %s depends on the subgroup size, and no size is sure on the device", v.Name)
		case require && nd.Invocations%sg != 0:
			return fmt.Errorf("shaders: %s: a workgroup of %d is not whole subgroups of the required %d", v.Name, nd.Invocations, sg)
		case require && p.MaxWorkgroupSubgroups != 0 && nd.Invocations/sg > p.MaxWorkgroupSubgroups:
			return fmt.Errorf("shaders: %s: a workgroup of %d is %d subgroups of %d, over the device's maxComputeWorkgroupSubgroups %d",
				v.Name, nd.Invocations, nd.Invocations/sg, sg, p.MaxWorkgroupSubgroups)
		}
	}
	if !p.limitsKnown() {
		return nil
	}
	if nd.Invocations > p.MaxWorkGroupInvocations {
		return fmt.Errorf("shaders: %s with spec %v: a workgroup of %d invocations, over the device's maxComputeWorkGroupInvocations %d",
			v.Name, spec, nd.Invocations, p.MaxWorkGroupInvocations)
	}
	if nd.SharedBytes > p.SharedMemory {
		return fmt.Errorf("shaders: %s with spec %v: %d bytes of shared memory, over the device's maxComputeSharedMemorySize %d",
			v.Name, spec, nd.SharedBytes, p.SharedMemory)
	}
	return nil
}

// RequiredSubgroupSize is the subgroup size v's pipeline must require (the
// vk.KernelSpec field), 0 for none: the profile's size for a kernel with
// subgroup operations on a device where the size is sure by requiring it.
func (p Profile) RequiredSubgroupSize(v Variant) uint32 {
	nd, err := v.Needs(nil)
	switch {
	case err != nil || !nd.Subgroups:
		return 0
	case p.coop32(nd):
		return MatmulCoopSubgroup
	case !p.RequireSubgroupSize:
		return 0
	}
	return p.SubgroupSize
}

// coop32 says whether a kernel that needs nd is a VK_KHR_cooperative_matrix
// kernel whose pipeline requires subgroups of 32 on a device whose own size
// is another (Device.Subgroup32): the KHR kernels are written for 32, as
// NV's are.
func (p Profile) coop32(nd Needs) bool {
	return p.SubgroupSize != MatmulCoopSubgroup && p.Subgroup32 && slices.Contains(nd.Features, "cooperative_matrix_khr")
}

// workgroupFits are the sources whose workgroup size (constant 0) may shrink
// to fit a device: decode attention walks the cache WG entries apart and
// merges WG partials, any WG gives the same sums in another order, and its
// dispatch is a workgroup per (row, head[, chunk]) whatever WG is. Its
// accumulators take 4*MAX_HD*WG bytes: 16.75 KiB at [32, 128], over
// Vulkan's minimum of 16 KiB.
var workgroupFits = []string{"decode_attention.comp", "decode_attend.comp"}

// Fit is spec (nil: v.Spec) shrunk to the device where v allows it: a
// workgroupFits kernel's workgroup halves until its shared memory and
// invocations fit. Any other spec is returned as it is; Allows says
// whether it fits.
func (p Profile) Fit(v Variant, spec []uint32) []uint32 {
	if spec == nil {
		spec = v.Spec
	}
	if !p.limitsKnown() || !slices.Contains(workgroupFits, v.Source) || len(spec) == 0 {
		return spec
	}
	spec = append([]uint32(nil), spec...)
	for spec[0] > 1 {
		nd, err := v.Needs(spec)
		if err != nil || (nd.SharedBytes <= p.SharedMemory && nd.Invocations <= p.MaxWorkGroupInvocations) {
			break
		}
		spec[0] /= 2
	}
	return spec
}

// Fallback is p with the choice that made kernel variant v replaced by its
// safe variant, for when the self-check finds the kernel wrong on the
// device, and what the safe variant is called, for the message; ok is false
// when v is already the safe variant (nothing to fall back to):
//   - matvec_dot (integer dot products), and dot_x (x quantized for its
//     batched variants): matvec_rows (matvec_words batched);
//   - a subgroup matvec: the profile's shared-memory matvec (no subgroups);
//   - router_score_sg, route_decode*_sg: the shared-memory tree variants;
//   - decode_attend_keys: decode_attend;
//   - decode_attend (fused attention): decode_kv and decode_attention;
//   - paged_attend_own (paged_qkv and paged_attend in one): the two
//     apart (AttendOwn off);
//   - paged_attend (a batched step's tiles merged by the last one):
//     paged_attention and attention_merge (FuseAttention off, so the
//     decode step's fused attention goes too: both hand off alike);
//   - decode_attention_split (flash-decoding): the single-pass kernel;
//   - matmul_coop (tensor cores): matmul.comp's tiles;
//   - matmul_pf (the pipelined tile): matmul.comp's MatmulSpecGPU tiles.
func (p Profile) Fallback(v Variant) (fb Profile, safe string, ok bool) {
	fb = p
	switch {
	case IsHandoff(v) && p.Handoff:
		fb.Handoff = false // the barriers back: the base kernel itself is checked on its own
		return fb, HandoffBase(v.Name), true
	case v.Op == OpMatvec && v.Reduce == ReduceSubgroupDot: // each of its fusions may fail: the flag is off after the first
		fb.MatvecDot = false // matvec_rows, which the self-check checks on its own
		return fb, MatvecFusedName(v.Type, ReduceSubgroupRows, v.Fusion), true
	case v.Op == OpDotX && p.MatvecDot: // the PREQ matvecs read what it writes: matvec_dot goes with it
		fb.MatvecDot = false
		return fb, "matvec_rows and matvec_words (x in floats)", true
	case v.Op == OpMatvec && v.Reduce == ReduceLanes && p.MatvecLanes:
		fb.MatvecLanes = false
		return fb, MatvecFusedName(v.Type, ReduceShared, v.Fusion), true
	case v.Op == OpMatvec && (v.Reduce == ReduceSubgroupRows || v.Reduce == ReduceSubgroupWords) && p.MatvecRows:
		// As a failed subgroup matvec: the shared-memory tree, for every
		// matvec (the rows kernel's fault may be the subgroups').
		s := p.Safe()
		fb.MatvecRows, fb.MatvecReduce, fb.MatvecSpec = false, s.MatvecReduce, s.MatvecSpec
		return fb, MatvecFusedName(v.Type, ReduceShared, v.Fusion), true
	case v.Op == OpMatvec && v.Reduce == ReduceSubgroup:
		s := p.Safe()
		fb.MatvecRows, fb.MatvecReduce, fb.MatvecSpec = false, s.MatvecReduce, s.MatvecSpec
		return fb, MatvecFusedName(v.Type, ReduceShared, v.Fusion), true
	case (v.Op == OpRouterScore || v.Op == OpRouteDecode || v.Op == OpRouteDecodePred) && v.Reduce == ReduceSubgroup:
		fb.RoutingShared = true // the score and route plans read it (ScoreDevice)
		return fb, strings.TrimSuffix(v.Name, ReduceSubgroup), true
	case v.Op == OpDecodeAttend && v.Source == "decode_attend_keys.comp" && p.AttendKeys:
		fb.AttendKeys = false
		kv, _ := ParseKV(v.Type)
		return fb, DecodeAttendName(kv), true
	case v.Op == OpDecodeAttend && p.FuseAttention:
		fb.FuseAttention = false
		return fb, "decode_kv + decode_attention", true
	case IsAttendOwn(v) && p.AttendOwn:
		fb.AttendOwn = false
		kv, _ := ParseKV(v.Type)
		return fb, PagedQKVName(kv) + " + " + PagedAttendName(kv), true
	case v.Op == OpPagedAttend && !IsAttendOwn(v) && p.FuseAttention:
		fb.FuseAttention, fb.AttendOwn = false, false // paged_attend_own merges as paged_attend
		kv, _ := ParseKV(v.Type)
		return fb, PagedAttentionName(kv) + " + attention_merge", true
	case v.Op == OpMatmulDirect && p.MatmulDirect:
		fb.MatmulDirect, fb.MatmulDirectResident = false, false
		return fb, "matmul_coop (the staged tiles)", true
	case v.Op == OpMatmulCoop && p.MatmulCoop:
		fb.MatmulCoop = false
		return fb, fb.Matmul().Kernel(v.Type), true
	case v.Op == OpMatmulPipe && p.MatmulPipe:
		fb.MatmulPipe = false
		return fb, MatmulName(v.Type), true
	case v.Op == OpAttentionCoop && p.AttentionCoop:
		fb.AttentionCoop = false
		return fb, "attention_split", true
	case v.Op == OpAttentionLanes && p.AttentionLanes:
		fb.AttentionLanes = false
		kv, _ := ParseKV(v.Type)
		return fb, AttentionSplitName(kv, strings.Contains(v.Name, "_counts")), true
	case v.Name == "argmax_wide" && !p.CPU && !p.ArgmaxRow:
		fb.ArgmaxRow = true
		return fb, "argmax (sampled tokens drawn on the host)", true
	case v.Op == OpDecodeAttentionSplit && p.AttentionChunk != 0:
		fb.AttentionChunk = 0
		kv, _ := ParseKV(v.Type)
		return fb, DecodeAttentionName(kv), true
	}
	return p, "", false
}

// Safe is the profile of d with no subgroup kernel at all: what every
// device runs correctly if its shared memory and barriers work.
func (p Profile) Safe() Profile {
	d := p.Device
	d.SubgroupSize, d.RequireSubgroupSize, d.SubgroupArithmetic = 0, false, false
	s := NewProfile(d)
	s.LoopCap = p.LoopCap
	return s
}
