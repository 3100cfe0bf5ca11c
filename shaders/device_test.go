package shaders

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallGPU is a device at Vulkan's minimum limits (16 KiB of shared memory,
// 256 invocations as the issue asks) with subgroup arithmetic and no
// other optional feature.
var smallGPU = Device{SubgroupSize: 32, SubgroupArithmetic: true, SharedMemory: 16384,
	MaxWorkGroupInvocations: 256, MaxStorageBufferRange: 128 << 20, Vendor: VendorNVIDIA}

// Needs reads what the formulas in the variants' notes say: the workgroup
// and shared memory of a specialization, from the SPIR-V alone.
// lavapipeLike is a CPU device with subgroups of 8 that broadcast and sum:
// its profile runs Q8_0's matvecs as matvec_lanes.
var lavapipeLike = Device{CPU: true, SubgroupSize: 8, SubgroupArithmetic: true, SubgroupBallot: true, SharedMemory: 32768,
	MaxWorkGroupInvocations: 1024, RequireSubgroupSize: true, MaxWorkgroupSubgroups: 32}

func TestNeeds(t *testing.T) {
	for _, s := range []MatmulSpec{MatmulSpecGPU, MatmulSpecCPU, alongSpec(MatmulSpecGPU), alongSpec(MatmulSpec{BM: 8, BN: 64, BK: 32, TM: 4, TN: 2}),
		MatmulSpecPipe, {BM: 12, BN: 40, BK: 12, TM: 3, TN: 5, Pipe: true}} {
		mm, err := Lookup(s.Kernel(MatvecQ8_0))
		require.NoError(t, err)
		nd, err := mm.Needs(s.Constants())
		require.NoError(t, err)
		assert.Equal(t, s.Invocations(), nd.Invocations, "matmul %+v", s)
		assert.Equal(t, s.SharedBytes(), nd.SharedBytes, "matmul %+v", s)
	}
	da, err := Lookup("decode_attention")
	require.NoError(t, err)
	for _, spec := range [][]uint32{{32, 128}, {16, 128}, {64, 64}} {
		nd, err := da.Needs(spec)
		require.NoError(t, err)
		wg, hd := spec[0], spec[1]
		// the note beside AttentionSpec: 4*(MAX_HD*(WG+1) + 2*WG)
		assert.Equal(t, 4*(hd*(wg+1)+2*wg), nd.SharedBytes, "decode_attention %v", spec)
		assert.Equal(t, wg, nd.Invocations)
	}
	am, err := Lookup("argmax")
	require.NoError(t, err)
	nd, err := am.Needs([]uint32{64, 64})
	require.NoError(t, err)
	assert.Equal(t, Needs{Invocations: 64, SharedBytes: 2 * 4 * 64}, nd, "a value and an index per invocation")
}

// The audit of the kernels against the optional features: only subgroup
// arithmetic is ever needed, only by the subgroup variants (and subgroup
// ballot by matvec_lanes, a CPU device's), and each of those has a
// variant without it of the same family.
func TestOnlySubgroupVariantsNeedAFeature(t *testing.T) {
	var subgroupKernels []string
	for _, v := range Variants {
		nd, err := v.Needs(nil)
		require.NoError(t, err, v.Name)
		if !nd.Subgroups {
			assert.Empty(t, nd.Features, "%s needs features without subgroups", v.Name)
			continue
		}
		khr := slices.Contains(v.Defines, CoopMatKHRDefine)
		if v.Op == OpMatmulCoop && !strings.Contains(v.Name, "_emu_") {
			// The tensor-core matmul: its extension (NV's, or KHR's for
			// the COOPMAT_KHR variants), halves and the memory model, at
			// subgroup scope; its fallback is matmul.comp.
			dev := smallGPU
			dev.Float16, dev.TensorCores = true, true
			if khr {
				assert.Equal(t, []string{"cooperative_matrix_khr", "shader_float16", "vulkan_memory_model"}, nd.Features, v.Name)
				dev.CooperativeMatrixKHR = true
			} else {
				assert.Equal(t, []string{"cooperative_matrix_nv", "shader_float16", "vulkan_memory_model"}, nd.Features, v.Name)
				dev.CooperativeMatrixNV = true
			}
			fb, safe, ok := NewProfile(dev).Fallback(v)
			require.True(t, ok, "%s has a fallback", v.Name)
			assert.Equal(t, MatmulName(v.Type), safe)
			assert.False(t, fb.MatmulCoop, v.Name)
			continue
		}
		if v.Op == OpMatmulDirect && !strings.HasSuffix(v.Name, "_emu") {
			// The direct tensor-core matmul: the same features; its
			// fallback is the staged tensor-core kernel.
			assert.Equal(t, []string{"cooperative_matrix_nv", "shader_float16", "vulkan_memory_model"}, nd.Features, v.Name)
			dev := smallGPU
			dev.Float16, dev.CooperativeMatrixNV, dev.TensorCores, dev.MatmulDirect = true, true, true, true
			prof := NewProfile(dev)
			require.True(t, prof.MatmulDirect, "the device asked for it")
			fb, _, ok := prof.Fallback(v)
			require.True(t, ok, "%s has a fallback", v.Name)
			assert.False(t, fb.MatmulDirect, v.Name)
			assert.True(t, fb.MatmulCoop, v.Name)
			continue
		}
		if v.Op == OpAttentionCoop && !strings.HasSuffix(v.Name, "_emu") {
			// The prefill's attention on tensor cores: the same features;
			// its fallback is attention_split, under the same profile.
			assert.Equal(t, []string{"cooperative_matrix_nv", "shader_float16", "vulkan_memory_model"}, nd.Features, v.Name)
			dev := smallGPU
			dev.Float16, dev.CooperativeMatrixNV, dev.TensorCores, dev.AttentionCoop = true, true, true, true
			prof := NewProfile(dev)
			require.True(t, prof.AttentionCoop, "the device asked for it")
			fb, safe, ok := prof.Fallback(v)
			require.True(t, ok, "%s has a fallback", v.Name)
			assert.Equal(t, "attention_split", safe)
			assert.False(t, fb.AttentionCoop, v.Name)
			assert.True(t, fb.MatmulCoop, v.Name)
			continue
		}
		if v.Reduce == ReduceSubgroupDot {
			// Integer dot products and subgroup sums; its fallback is
			// matvec_rows (whose own fallback is the shared-memory tree).
			assert.Equal(t, []string{"integer_dot_product", "subgroup_arithmetic"}, nd.Features, v.Name)
			dev := smallGPU
			dev.IntegerDotProduct, dev.MatvecDot = true, true
			prof := NewProfile(dev)
			require.True(t, prof.MatvecDot, "the device asked for it")
			fb, safe, ok := prof.Fallback(v)
			require.True(t, ok, "%s has a fallback", v.Name)
			assert.Equal(t, MatvecFusedName(v.Type, ReduceSubgroupRows, v.Fusion), safe)
			assert.False(t, fb.MatvecDot, v.Name)
			assert.True(t, fb.MatvecRows, v.Name)
			continue
		}
		if v.Name == ProbeCoop || v.Name == ProbeCoopKHR {
			// The tensor-core probe: the matmul's features, and no fallback:
			// vulkan.ProbeCompute runs it only where the device has them
			// (Profile.CoopProbe), and says why there is no tensor peak
			// elsewhere.
			ext := map[bool]string{false: "cooperative_matrix_nv", true: "cooperative_matrix_khr"}[khr]
			assert.Equal(t, []string{ext, "shader_float16", "vulkan_memory_model"}, nd.Features, v.Name)
			continue
		}
		subgroupKernels = append(subgroupKernels, v.Name)
		dev := smallGPU
		if v.Reduce == ReduceLanes {
			want := []string{"subgroup_ballot"} // and the sums of squares of the norm
			if v.Fusion == FuseNorm || v.Fusion == FuseNormSwiGLU {
				want = []string{"subgroup_arithmetic", "subgroup_ballot"}
			}
			assert.Equal(t, want, nd.Features, v.Name)
			dev = lavapipeLike
		} else if v.Op == OpAttentionLanes { // a row's lanes add their partial scores by shuffles
			assert.Equal(t, []string{"subgroup_shuffle"}, nd.Features, v.Name)
			dev.SubgroupShuffle = true
		} else {
			assert.Equal(t, []string{"subgroup_arithmetic"}, nd.Features, v.Name)
		}
		fb, safe, ok := NewProfile(dev).Fallback(v)
		require.True(t, ok, "%s has a fallback", v.Name)
		sv, err := Lookup(safe)
		require.NoError(t, err, "%s falls back to a kernel of the table", v.Name)
		snd, err := sv.Needs(nil)
		require.NoError(t, err)
		assert.False(t, snd.Subgroups, "%s's fallback %s has no subgroup operations", v.Name, safe)
		assert.NotEqual(t, NewProfile(dev), fb, v.Name)
	}
	// The subgroup kernels are the ones DESIGN.md names, no others.
	for _, name := range subgroupKernels {
		assert.True(t, strings.HasPrefix(name, "matvec_") || name == "router_score_sg" || strings.HasPrefix(name, "route_decode") ||
			strings.HasPrefix(name, "attention_split") && strings.Contains(name, "_lanes"), name)
	}
	assert.Len(t, subgroupKernels, len(MatvecTypes)*len(MatvecFusions)+(len(MatvecRowsTypes)+2*len(MatvecWordsTypes)+2*len(MatvecRowsDecodings))*len(MatvecFusions)+len(MatvecFusions)+3+3+
		len(HandoffMatvecTypes)*len(handoffMatvecFusions),
		"every matvec, matvec_rows, matvec_q8_0_lanes, router_score_sg, route_decode(_pred)_sg, attention_split's three lanes variants, the handoff matvecs")
}

// A device with none of the optional features, at the minimum limits, can
// run every kernel its profile picks, in every shape the engine asks for.
func TestMinimalDeviceAllowsItsChoices(t *testing.T) {
	bare := smallGPU
	bare.SubgroupArithmetic, bare.SubgroupSize = false, 0
	for name, d := range map[string]Device{"bare": bare, "small-subgroups": smallGPU, "lavapipe-like": lavapipeLike} {
		p := NewProfile(d)
		for _, typ := range MatvecTypes {
			for _, fuse := range MatvecFusions {
				for _, cols := range []uint32{256, 4096, 14336} {
					mv, spec := p.Matvec(typ, fuse, 1, cols)
					checkAllowed(t, p, name, mv, spec)
				}
			}
			checkAllowed(t, p, name, MatmulName(typ), p.Matmul().Constants())
		}
		sd := ScoreDevice{SubgroupSize: d.SubgroupSize, SubgroupArithmetic: d.SubgroupArithmetic}
		for _, n := range []uint32{1, 512} {
			plan := PlanScore(sd, n, 1, 4096, true)
			checkAllowed(t, p, name, plan.Variant, plan.Spec)
		}
		checkAllowed(t, p, name, RouteDecodeVariant(sd, true, true), RouteDecodeSpec(sd))
		for _, kv := range KVTypes {
			checkAllowed(t, p, name, DecodeAttentionName(kv), nil)
			checkAllowed(t, p, name, DecodeAttendName(kv), DecodeAttendSpec(p.AttentionSplits(2048)))
			for _, hd := range []uint32{64, 128} {
				checkAllowed(t, p, name, DecodeAttendKeysName(kv), DecodeAttendKeysSpec(hd, p.AttentionSplits(2048)))
			}
			checkAllowed(t, p, name, DecodeAttentionSplitName(kv), DecodeAttentionSplitSpec(p.AttentionSplits(2048)))
		}
		for _, hd := range []uint32{64, 128} {
			checkAllowed(t, p, name, "attention_split", AttentionSplitSpec(hd))
		}
		checkAllowed(t, p, name, "argmax_wide", ArgmaxWideSpec)
		for _, row := range []string{"rmsnorm", "nll", "argmax"} {
			checkAllowed(t, p, name, row, p.Row(row, 32000))
		}
		for _, v := range []string{"topk", "topk_sort", "topk_merge_local", "compact_mask", "add", "swiglu"} {
			checkAllowed(t, p, name, v, nil)
		}
	}
}

func checkAllowed(t *testing.T, p Profile, dev, name string, spec []uint32) {
	t.Helper()
	v, err := Lookup(name)
	require.NoError(t, err)
	fitted := p.Fit(v, spec)
	assert.NoError(t, p.Allows(v, fitted), "%s: %s %v (fitted from %v)", dev, name, fitted, spec)
}

func TestAllowsRefuses(t *testing.T) {
	p := NewProfile(smallGPU)
	da, err := Lookup("decode_attention")
	require.NoError(t, err)
	assert.ErrorContains(t, p.Allows(da, []uint32{32, 128}), "over the device's maxComputeSharedMemorySize 16384")
	assert.Equal(t, []uint32{16, 128}, p.Fit(da, []uint32{32, 128}), "halved once: 8.6 KiB")
	assert.Equal(t, []uint32{32, 64}, p.Fit(da, []uint32{32, 64}), "fits as it is")
	assert.Equal(t, AttentionSpec, []uint32{32, 128}, "Fit copies, never edits the caller's spec")

	add, err := Lookup("add")
	require.NoError(t, err)
	tiny := p
	tiny.MaxWorkGroupInvocations = 128
	assert.ErrorContains(t, tiny.Allows(add, nil), "256 invocations, over the device's maxComputeWorkGroupInvocations 128")

	sg, err := Lookup(MatvecFusedName(MatvecQ8_0, ReduceSubgroup, FuseNone))
	require.NoError(t, err)
	none := p
	none.SubgroupArithmetic = false
	assert.ErrorContains(t, none.Allows(sg, p.MatvecSpec), "needs subgroup_arithmetic")
	unsure := p
	unsure.SubgroupSize = 0
	assert.ErrorContains(t, unsure.Allows(sg, p.MatvecSpec), "no size is sure")
	req := p
	req.RequireSubgroupSize, req.MaxWorkgroupSubgroups = true, 2
	assert.ErrorContains(t, req.Allows(sg, []uint32{128, 32, 1}), "over the device's maxComputeWorkgroupSubgroups 2")
	assert.ErrorContains(t, req.Allows(sg, []uint32{48, 32, 1}), "not whole subgroups")
}

// A subgroup kernel requires the profile's size exactly where the size is
// sure by requiring it; no other kernel requires one.
func TestRequiredSubgroupSize(t *testing.T) {
	sg, err := Lookup(MatvecFusedName(MatvecF16, ReduceSubgroup, FuseNorm))
	require.NoError(t, err)
	shared, err := Lookup(MatvecFusedName(MatvecF16, ReduceShared, FuseNorm))
	require.NoError(t, err)
	route, err := Lookup("route_decode_pred_sg")
	require.NoError(t, err)
	intel := Device{Vendor: VendorIntel, SubgroupArithmetic: true, SharedMemory: 65536, MaxWorkGroupInvocations: 1024}
	intel.SubgroupSize, intel.RequireSubgroupSize = SubgroupSizeFor(SubgroupFacts{Vendor: VendorIntel, Reported: 32, Min: 8, Max: 32, Control: true})
	p := NewProfile(intel)
	assert.Equal(t, uint32(32), p.RequiredSubgroupSize(sg))
	assert.Equal(t, uint32(32), p.RequiredSubgroupSize(route))
	assert.Zero(t, p.RequiredSubgroupSize(shared))
	nvidia := NewProfile(Device{Vendor: VendorNVIDIA, SubgroupSize: 32, SubgroupArithmetic: true})
	assert.Zero(t, nvidia.RequiredSubgroupSize(sg), "sure without asking")
}

// The vendor table and size control: what a subgroup kernel may count on.
func TestSubgroupSizeFor(t *testing.T) {
	for _, c := range []struct {
		name        string
		f           SubgroupFacts
		want        uint32
		wantRequire bool
	}{
		{"NVIDIA, no control", SubgroupFacts{VendorNVIDIA, 32, 32, 32, false}, 32, false},
		{"NVIDIA, control", SubgroupFacts{VendorNVIDIA, 32, 32, 32, true}, 32, true},
		{"Intel, control: the reported 32", SubgroupFacts{VendorIntel, 32, 8, 32, true}, 32, true},
		{"Intel, no control: none", SubgroupFacts{VendorIntel, 32, 8, 32, false}, 0, false},
		{"RDNA, control", SubgroupFacts{VendorAMD, 64, 32, 64, true}, 64, true},
		{"RDNA, no control", SubgroupFacts{VendorAMD, 64, 32, 64, false}, 0, false},
		{"GCN", SubgroupFacts{VendorAMD, 64, 64, 64, false}, 64, false},
		{"Adreno, control", SubgroupFacts{VendorQualcomm, 64, 64, 128, true}, 64, true},
		{"Mali Valhall", SubgroupFacts{VendorARM, 16, 16, 16, false}, 16, false},
		{"Apple, no range", SubgroupFacts{VendorApple, 32, 0, 0, false}, 32, false},
		{"lavapipe", SubgroupFacts{VendorMesa, 8, 8, 8, true}, 8, true},
		{"report outside the range: the range's largest", SubgroupFacts{0x1234, 128, 8, 32, true}, 32, true},
		{"unknown vendor, no range", SubgroupFacts{0x1234, 32, 0, 0, false}, 0, false},
		{"control without a range", SubgroupFacts{0x1234, 32, 0, 0, true}, 0, false},
	} {
		size, req := SubgroupSizeFor(c.f)
		assert.Equal(t, c.want, size, c.name)
		assert.Equal(t, c.wantRequire, req, c.name)
	}
	for _, v := range Vendors {
		row, ok := Vendor(v.Vendor)
		assert.True(t, ok)
		assert.NotEmpty(t, row.Sizes, fmt.Sprintf("0x%x", v.Vendor))
	}
	_, ok := Vendor(0x1234)
	assert.False(t, ok)
}

// Fallback switches only the failing op, to a variant without subgroups;
// the safe variants have nothing to fall back to.
func TestFallback(t *testing.T) {
	p := NewProfile(smallGPU)
	fallback := func(name string) (Profile, string, bool) {
		v, err := Lookup(name)
		require.NoError(t, err)
		return p.Fallback(v)
	}
	require.Equal(t, ReduceSubgroup, p.MatvecReduce)
	fb, safe, ok := fallback(MatvecFusedName(MatvecQ4_K, ReduceSubgroup, FuseAdd))
	require.True(t, ok)
	assert.Equal(t, MatvecFusedName(MatvecQ4_K, ReduceShared, FuseAdd), safe)
	assert.Equal(t, ReduceShared, fb.MatvecReduce)
	assert.True(t, fb.SubgroupArithmetic, "the score kernels keep their subgroups")
	name, _ := fb.Matvec(MatvecQ4_K, FuseAdd, 1, 4096)
	assert.Equal(t, safe, name)

	// matvec_rows: the same fallback, the subgroup matvecs all go.
	require.True(t, p.MatvecRows)
	fb, safe, ok = fallback(MatvecFusedName(MatvecQ8_0, ReduceSubgroupRows, FuseNormSwiGLU))
	require.True(t, ok)
	assert.Equal(t, MatvecFusedName(MatvecQ8_0, ReduceShared, FuseNormSwiGLU), safe)
	name, _ = fb.Matvec(MatvecQ8_0, FuseNormSwiGLU, 1, 4096)
	assert.Equal(t, safe, name)
	_, _, ok = fb.Fallback(Variant{Op: OpMatvec, Reduce: ReduceSubgroupRows})
	assert.False(t, ok, "no second fallback")

	fb, safe, ok = fallback("route_decode_pred_sg")
	require.True(t, ok)
	assert.Equal(t, "route_decode_pred", safe)
	assert.Equal(t, ReduceSubgroup, fb.MatvecReduce, "matvec keeps its subgroups")
	assert.True(t, fb.SubgroupArithmetic, "the device keeps its subgroup arithmetic: matvec needs it")
	assert.Equal(t, "route_decode_pred", RouteDecodeVariant(fb.ScoreDevice(), true, true))
	assert.Equal(t, "route_decode_pred_sg", RouteDecodeVariant(p.ScoreDevice(), true, true))

	fb, safe, ok = fallback(DecodeAttendKeysName(KVF16))
	require.True(t, ok)
	assert.Equal(t, DecodeAttendName(KVF16), safe)
	assert.Equal(t, DecodeAttendName(KVF16), fb.DecodeAttention(KVF16, 4096, 64)[0].Variant)
	fb, _, ok = fallback("decode_attend_f16")
	require.True(t, ok)
	assert.False(t, fb.FuseAttention)
	fb, safe, ok = fallback(DecodeAttentionSplitName(KVF16))
	require.True(t, ok)
	assert.Equal(t, DecodeAttentionName(KVF16), safe)
	assert.Equal(t, uint32(1), fb.AttentionSplits(4096))

	// matvec_lanes on a CPU device: Q8_0's rows walk (rowsPass) instead.
	lp := NewProfile(lavapipeLike)
	v, err := Lookup(MatvecFusedName(MatvecQ8_0, ReduceLanes, FuseNormSwiGLU))
	require.NoError(t, err)
	fb, safe, ok = lp.Fallback(v)
	require.True(t, ok)
	assert.Equal(t, MatvecFusedName(MatvecQ8_0, ReduceShared, FuseNormSwiGLU), safe)
	name, spec := fb.Matvec(MatvecQ8_0, FuseNormSwiGLU, 8, 288)
	assert.Equal(t, safe, name)
	assert.Equal(t, MatvecSubblockSpecCPU, spec)
	_, _, ok = fb.Fallback(v)
	assert.False(t, ok, "no second fallback")

	for _, name := range []string{"rmsnorm", MatvecFusedName(MatvecQ8_0, ReduceShared, FuseNorm), "router_score", "topk"} {
		_, _, ok := fallback(name)
		assert.False(t, ok, name)
	}
}

// The pipelined matmul tile is a GPU profile's where the limits hold it,
// not a CPU device's nor one turned off by the user, and its self-check
// fallback is the earlier tiles; the tensor cores' fallback is then the
// pipelined tile.
func TestMatmulPipeProfile(t *testing.T) {
	gpu := smallGPU
	gpu.SharedMemory, gpu.MaxWorkGroupInvocations = 49152, 1024 // an NVIDIA GPU's limits
	p := NewProfile(gpu)
	require.True(t, p.MatmulPipe)
	assert.Equal(t, MatmulSpecPipe, p.Matmul())
	name, spec := p.MatmulKernel(MatvecQ8_0)
	assert.Equal(t, "matmul_pf_q8_0", name)
	assert.Equal(t, MatmulSpecPipe.Constants(), spec)

	off := gpu
	off.NoMatmulPipe = true
	assert.False(t, NewProfile(off).MatmulPipe, "MODRUN_MATMUL_PIPE=0")
	assert.Equal(t, MatmulSpecGPU, NewProfile(off).Matmul())
	assert.False(t, NewProfile(smallGPU).MatmulPipe, "16 KiB of shared memory cannot hold the 24.5 KiB tile")
	few := gpu
	few.MaxWorkGroupInvocations = 128
	assert.False(t, NewProfile(few).MatmulPipe, "256 invocations over the device's 128")
	assert.False(t, NewProfile(lavapipeLike).MatmulPipe, "a CPU device keeps its tiles")
	assert.True(t, GPUProfile(lavapipeLike).MatmulPipe, "the GPU profile on lavapipe's 32 KiB runs it in CI")

	v, err := Lookup(MatmulPrefetchName(MatvecQ8_0))
	require.NoError(t, err)
	assert.Equal(t, OpMatmulPipe, v.Op)
	assert.False(t, assertSafeMatmul(t, p, v, MatvecQ8_0).MatmulPipe)

	gpu.Float16, gpu.CooperativeMatrixNV, gpu.TensorCores = true, true, true
	coop, err := Lookup(MatmulCoopHiloName(MatvecQ8_0, false))
	require.NoError(t, err)
	_, safe, ok := NewProfile(gpu).Fallback(coop)
	require.True(t, ok)
	assert.Equal(t, "matmul_pf_q8_0", safe, "the tensor cores fall back to the pipelined tile")
}

// assertSafeMatmul checks that p's self-check fallback for matmul variant v
// is matmul.comp's MatmulSpecGPU tiles for weights of type typ, with
// nothing further to fall back to, and returns the fallback profile.
func assertSafeMatmul(t *testing.T, p Profile, v Variant, typ string) Profile {
	t.Helper()
	fb, safe, ok := p.Fallback(v)
	require.True(t, ok, v.Name)
	assert.Equal(t, MatmulName(typ), safe)
	name, spec := fb.MatmulKernel(typ)
	assert.Equal(t, MatmulName(typ), name)
	assert.Equal(t, MatmulSpecGPU.Constants(), spec)
	_, _, ok = fb.Fallback(v)
	assert.False(t, ok, "nothing further to fall back to")
	return fb
}
