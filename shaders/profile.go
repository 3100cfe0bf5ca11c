package shaders

import (
	"fmt"
	"slices"
)

// Device profiles (DESIGN.md §6): the facts of a device that shape its
// kernels, and the variant and specialization each kernel gets from them.
// The engine makes one at load from vk.DeviceInfo; tests make others to run
// a GPU's variants on lavapipe. One device's limit shapes that device's
// variants only: lavapipe's loop cap is a property of its profile, and no
// GPU profile has it.

// Device is what a Profile is made from (vk.DeviceInfo's fields, copied by
// the engine: shaders imports nothing of ours).
type Device struct {
	CPU                     bool   // a software device (lavapipe): a workgroup runs on one CPU thread
	SubgroupSize            uint32 // invocations in every subgroup of a dispatch (DispatchSubgroupSize): 8 on lavapipe, 32 on NVIDIA, 64 on AMD GCN; 0 when not sure
	SubgroupArithmetic      bool   // subgroupAdd in compute shaders
	SharedMemory            uint32 // maxComputeSharedMemorySize, bytes
	MaxWorkGroupInvocations uint32 // maxComputeWorkGroupInvocations
	MaxStorageBufferRange   uint64 // bytes one binding may span
	ComputeUnits            uint32 // SMs or CUs (vk.Limits.ComputeUnits); 0 when the device does not say

	// The device facts device.go reads (Allows, RequiredSubgroupSize).
	Vendor uint32 // PCI vendor ID: its row of Vendors
	// RequireSubgroupSize: SubgroupSize is sure because every subgroup
	// kernel's pipeline requires it (SubgroupSizeFor), not because the
	// device has one size.
	RequireSubgroupSize   bool
	MaxWorkgroupSubgroups uint32 // subgroups of a workgroup that requires a size; 0: not declared
	Float16               bool   // shaderFloat16
	Int8                  bool   // shaderInt8
	Storage16Bit          bool   // storageBuffer16BitAccess
	Storage8Bit           bool   // storageBuffer8BitAccess
	SubgroupShuffle       bool   // subgroupShuffle in compute shaders
	SubgroupBallot        bool   // subgroupBroadcast and the ballots in compute shaders
	// CooperativeMatrixNV: VK_NV_cooperative_matrix enabled with the
	// 16x16x16 f16 -> f32 shape (vk.Features.CooperativeMatrixNV, which
	// includes vulkanMemoryModel and shaderFloat16): matmul_coop runs.
	CooperativeMatrixNV bool
	// CooperativeMatrixKHR: VK_KHR_cooperative_matrix enabled with the
	// same shape (vk.Features.CooperativeMatrixKHR): matmul_coop's
	// COOPMAT_KHR variants run, where the subgroups are 32 or may be
	// required to be (Subgroup32).
	CooperativeMatrixKHR bool
	// Subgroup32: a pipeline may require subgroups of 32
	// (VK_EXT_subgroup_size_control with 32 in its compute range and full
	// subgroups): the KHR tensor-core kernels ask for 32 on a device whose
	// other kernels run at another size (AMD RDNA's 64).
	Subgroup32 bool
	// CoopMatKHR: the user asked for VK_KHR_cooperative_matrix's kernels
	// where the device has NV's too (MODRUN_COOPMAT=khr, read by the
	// engine): NVIDIA's drivers offer both, so an NVIDIA GPU measures the
	// path AMD and Intel take.
	CoopMatKHR bool
	// TensorCores: the tensor-core matmul may run where the device has it:
	// the default (the engine reads MODRUN_TENSOR_CORES: 0 turns it off).
	// Its default kernel keeps f32's precision (matmul_coop_hilo: each
	// operand a high and a low half, three products); before the hilo kernel it
	// rounded its operands to halves, which moved prefill and eval logits
	// by about 1e-3 relative against the CPU reference (the H200 run of
	// 2026-11-27 failed the f32-bound tests that way), and it was opt-in.
	TensorCores bool
	// TensorCoresHalf: the user asked for the tensor-core matmul with its
	// operands rounded to halves, one product a step (MODRUN_TENSOR_CORES
	// =f16): llama.cpp's arithmetic, for speed comparisons.
	TensorCoresHalf bool
	// MatmulDirect: the user asked for the direct tensor-core matmul
	// (MODRUN_MATMUL_DIRECT=1, read by the engine): planes of halves made
	// once per matrix, tiles loaded straight from them (matmul_direct).
	MatmulDirect bool
	// MatmulDirectResident: and W's planes made once, at load, and kept
	// (MODRUN_MATMUL_DIRECT=resident): no planes pass over the weights at
	// each prefill, for 4 bytes a weight of device memory.
	MatmulDirectResident bool
	// AttentionCoop: the user asked for the prefill's attention on tensor
	// cores (MODRUN_ATTENTION_COOP=1, read by the engine): attention_coop
	// where the device runs the tensor-core matmul. A measuring knob until
	// a GPU has timed it.
	AttentionCoop bool
	// NoMatmulPipe: the user turned the pipelined matmul tile off
	// (MODRUN_MATMUL_PIPE=0, read by the engine): a GPU profile without
	// tensor cores takes MatmulSpecGPU's tiles, as before the pipelined one.
	NoMatmulPipe bool
	// NoMatvecRows: the user turned matvec_rows off (MODRUN_MATVEC_ROWS=0,
	// read by the engine): a GPU profile's quantized matvecs take
	// matvec.comp's subgroup kernel, as before matvec_rows, and its
	// batched steps run at most 8 rows as matvecs. A knob for GPUs that
	// have not timed the two (the H200's run A chose matvec_rows).
	NoMatvecRows bool
	// NoAttendKeys: the user turned decode_attend_keys off
	// (MODRUN_ATTEND_KEYS=0, read by the engine): a GPU profile's fused
	// decode attention is decode_attend, whose invocations walk the keys.
	NoAttendKeys bool
	// NoAttendOwn: the user turned paged_attend_own off
	// (MODRUN_ATTEND_OWN=0, read by the engine): a GPU profile's batched
	// steps run paged_qkv and paged_attend apart whatever their rows.
	NoAttendOwn bool
	// IntegerDotProduct: VK_KHR_shader_integer_dot_product enabled
	// (vk.Features.IntegerDotProduct): matvec_dot runs. Accelerated: the
	// packed signed 4x8 dot is a hardware instruction.
	IntegerDotProduct            bool
	IntegerDotProductAccelerated bool
	// MatvecDot: the user asked for matvec_dot (MODRUN_MATVEC_DOT=1, read
	// by the engine; Profile.MatvecDot says where it runs).
	MatvecDot bool
}

// Profile is a device's kernel choices.
type Profile struct {
	Device
	// LoopCap is the most loop iterations one invocation may run, all loops
	// together; past it the device stops the loops silently (lavapipe:
	// LavapipeLoopIterations). 0: no cap.
	LoopCap uint32
	// MatvecReduce and MatvecSpec are matvec's reduction (ReduceShared or
	// ReduceSubgroup) and specialization [workgroup size, invocations per
	// row, vectors per pass] for one vector of a short enough row.
	MatvecReduce string
	MatvecSpec   []uint32
	// MatvecLanes runs Q8_0's matvecs as matvec_lanes.comp (ReduceLanes,
	// MatvecLanesSpecCPU), every fusion but the add: on a CPU device whose subgroups
	// are 8 lanes, sure, with broadcasts and sums (lavapipe).
	MatvecLanes bool
	// MatvecRows runs the quantized matvecs (matvecRowsPicks) with rows of
	// a multiple of 32 columns as matvec_rows.comp (ReduceSubgroupRows,
	// MatvecRowsSpec): on GPUs with subgroup arithmetic, where it streamed
	// Q8_0 at 2.2-3.9x and Q4_K at 3.1-3.8x matvec.comp's rate on an H200
	// (issue 42, docs/matvec-cost.md).
	MatvecRows bool
	// MatvecDot runs the decode's and the batched steps' matvecs of
	// quantized weights (MatvecDotTypes: Q8_0, Q4_0 and the sub-block
	// types) as matvec_dot: integer dot products against x quantized to 8 bits in
	// each workgroup, as the CPU backend quantizes its activations (its
	// products are the CPU backend's, not f32's). Where the user asked
	// (MODRUN_MATVEC_DOT=1) on a GPU profile with matvec_rows, on a device
	// with integer dot products. A measuring knob until a GPU has timed
	// it; the self-check's fallback turns it off.
	MatvecDot bool
	// KV is the KV cache's default element type: KVF16 on GPUs (decode
	// attention reads half the bytes, the cache takes half the memory),
	// KVF32 on CPU devices (lavapipe), where the engine's results stay
	// within F32 tolerance of the CPU reference.
	KV KV
	// AttentionChunk is how many entries of the cache's capacity make one
	// chunk of split decode attention (flash-decoding, AttentionSplits);
	// 0 never splits: CPU devices, where workgroups already outnumber the
	// threads and the combine pass would be one more dispatch per layer.
	AttentionChunk uint32
	// FuseNorm folds RMSNorm into the matvec that follows it (matvec's
	// FuseNorm and FuseNormSwiGLU): one dispatch fewer per norm, at the
	// price of each row group summing x^2 from the x it loads anyway. On a
	// GPU that is a multiply-add per element. On a CPU device, where an
	// invocation owns a row, it is one per weight, and a dispatch costs
	// less against lavapipe's slow matvecs: off there (not measured).
	FuseNorm bool
	// FuseAttention runs a decode step's attention as one dispatch
	// (decode_attend: RoPE, the KV append, the chunks and their merge by
	// the last workgroup, an atomic hand-off) instead of decode_kv and
	// decode_attention (or its split pass and combine): on GPUs, where a
	// dispatch and its barrier are the cost to save. Off on CPU devices,
	// whose profile keeps the single-pass kernels (no atomics to trust to
	// a software rasterizer's scheduling when nothing is gained).
	FuseAttention bool
	// AttendKeys runs FuseAttention's dispatch as decode_attend_keys (the
	// keys across invocations, loops of the head's constant length) rather
	// than decode_attend: on GPUs, where decode_attend's per-key loops of
	// cache loads made it latency-bound, 25 us a layer on an H200 at 70
	// entries (docs/decode-attention-cost.md). CPU devices do not fuse.
	AttendKeys bool
	// AttendOwn runs a batched step whose rows are each their sequence's
	// only one (every sequence decoding; a chain of steps) with paged_qkv
	// and paged_attend as one dispatch, paged_attend_own: each row's own
	// entry turned and used from shared memory, so that no workgroup reads
	// the pool where another writes in the dispatch. With FuseAttention,
	// on GPUs: a dispatch and its barrier a layer fewer (a dense block 5,
	// as the decode step's).
	AttendOwn bool
	// AttentionLanes runs the prefill's attention with several invocations
	// a query row (attention_split's ATTN_LANES variants, Profile.
	// AttentionSplit): on GPUs whose subgroups shuffle, where one
	// invocation a row held 2*hd floats of registers (RADV's RDNA3
	// compiler spilled 178 at hd 64, 631 at 128). Off on CPU devices and
	// as its self-check's fallback.
	AttentionLanes bool
	// RoutingShared makes the router score and routing decision kernels
	// use the shared-memory tree even where subgroups are sure: the
	// self-check's fallback when their subgroup variants fail on a device
	// (Fallback), which leaves the matvecs' subgroups alone.
	RoutingShared bool
	// ArgmaxRow takes argmax (a workgroup a row) for the decode head on a
	// GPU too, where argmax_wide (which also draws sampled tokens) is the
	// default: the self-check's fallback when argmax_wide fails on a
	// device (Fallback). Sampled tokens are then drawn on the host.
	ArgmaxRow bool
	// MatmulCoop runs the matmuls on tensor cores (matmul_coop,
	// MatmulCoopSpecGPU): on GPUs with VK_NV_cooperative_matrix's 16x16x16
	// f16 -> f32 shape and subgroups of 32. The self-check's fallback
	// turns it off (matmul.comp's tiles).
	MatmulCoop bool
	// MatmulCoopKHR takes matmul_coop's VK_KHR_cooperative_matrix
	// variants (MatmulCoopKHRName) where MatmulCoop is set: on devices
	// with the KHR extension and not NV's, or where the user asked
	// (Device.CoopMatKHR). The direct matmul and the tensor-core attention
	// are NV's only: off under it.
	MatmulCoopKHR bool
	// MatmulCoopEmulate runs matmul_coop with its tile product emulated
	// (EMULATE_COOPMAT) where MatmulCoop is set: tests run the tensor-core
	// kernel's tiling through the engine on lavapipe.
	MatmulCoopEmulate bool
	// MatmulCoopHalf takes matmul_coop with its operands rounded to halves
	// (one product a step: Device.TensorCoresHalf) where MatmulCoop is
	// set, in place of the hilo kernel's f32 precision.
	MatmulCoopHalf bool
	// MatmulDirect runs a matmul of MatmulDirectMin rows or more as
	// matmul_direct where MatmulCoop is set: W's and X's planes of halves
	// (planes.comp, into the runner's scratch), then the product with its
	// tiles loaded straight from them, no shared staging (the hilo product
	// unless MatmulCoopHalf; emulated under MatmulCoopEmulate). Only where
	// the device asked (Device.MatmulDirect): a measuring knob until a GPU
	// says it is faster. Fewer rows keep matmul_coop (W's planes pass
	// would cost more than the product saves). The self-check's fallback
	// turns it off.
	MatmulDirect    bool
	MatmulDirectMin uint32
	// MatmulDirectSlice is the fewest columns of a K slice of a split
	// direct product (MatmulDirectSplit): MatmulDirectMinSlice on GPUs;
	// tests lower it to split their small models' matrices.
	MatmulDirectSlice uint32
	// MatmulDirectSlots is how many of the direct product's workgroups
	// the GPU holds at once (MatmulDirectSplit fills them in one wave):
	// MatmulDirectGroupsPerUnit a compute unit where the device says how
	// many it has, else MatmulDirectSplitTarget.
	MatmulDirectSlots uint32
	// MatmulDirectResident keeps every block matrix's planes of W (the
	// direct matmul's operand) on the device from load, where the device
	// asked (Device.MatmulDirectResident): a prefill then makes only X's
	// planes. Memory: 4 bytes a weight (2 for F16 and where the product
	// takes the high halves only), beside the weights.
	MatmulDirectResident bool
	// AttentionCoop runs the prefill's attention over an F16 generate-mode
	// cache as attention_coop (both products on tensor cores, f32's
	// precision from a high and a low half of Q and of P; emulated under
	// MatmulCoopEmulate) where MatmulCoop is set, the device asked
	// (Device.AttentionCoop) and the head fits (AttentionCoopHeads). The
	// self-check's fallback turns it off (attention_split).
	AttentionCoop bool
	// MatmulPipe takes the pipelined tile (MatmulSpecPipe: matmul_pf with
	// W and X staged along their rows and two copies of the tiles) for
	// matmul.comp's products: on GPUs whose limits allow its 256
	// invocations and 24.5 KiB of shared memory, unless Device.NoMatmulPipe.
	// The self-check's fallback turns it off (MatmulSpecGPU's tiles).
	MatmulPipe bool
	// MatmulSplitTarget is the workgroups a matmul should have in flight:
	// a grid of fewer (a few tokens' row tiles) is split along K
	// (MatmulSplit) into slices summed by splitk_reduce. GPUs:
	// shaders.MatmulSplitTarget. 0 on CPU devices (lavapipe), whose
	// handful of threads every grid already fills, where a split only
	// adds a pass.
	MatmulSplitTarget uint32
	// RoutingAsGPU plans the router score and routing decision kernels as
	// for a GPU (wide workgroups, subgroups where sure) on a CPU device:
	// tests run the GPU configuration of the routing on lavapipe.
	RoutingAsGPU bool
	// Handoff records the decode step's dense blocks and head with their
	// handoff variants (handoff.go): no pipeline barrier between them,
	// each kernel waiting on the count of the one before instead. Off on
	// every device until a GPU run measures it (docs/decode-attention-
	// cost.md, "Dispatches without barriers"); MODRUN_HANDOFF=1 turns it
	// on (engine/vulkan), and a failed self-check turns it off.
	Handoff bool
}

// ScoreDevice is what PlanScore and RouteDecodeVariant are told of the
// device: the profile's subgroups, unless RoutingShared.
func (p Profile) ScoreDevice() ScoreDevice {
	return ScoreDevice{CPU: p.CPU && !p.RoutingAsGPU, SubgroupSize: p.SubgroupSize, SubgroupArithmetic: p.SubgroupArithmetic && !p.RoutingShared}
}

// Score is the router_score dispatch of n rows of rows dot products over
// cols on this device: subgroups where they are sure, except on a CPU
// device, which runs the shared-memory tree faster.
func (p Profile) Score(n, rows, cols uint32) ScorePlan {
	sd := p.ScoreDevice()
	return PlanScore(sd, n, rows, cols, !sd.CPU)
}

// RouteDecode is route_decode's variant (with the predictor's score or
// not) and specialization on this device, chosen as Score's.
func (p Profile) RouteDecode(predictor bool) (name string, spec []uint32) {
	sd := p.ScoreDevice()
	return RouteDecodeVariant(sd, predictor, !sd.CPU), RouteDecodeSpec(sd)
}

// AttentionSplitLen is the key tile length of batched attention for heads
// of hd on this device (AttentionSplitLen).
func (p Profile) AttentionSplitLen(hd uint32) uint32 { return AttentionSplitLen(hd, p.CPU) }

// matvecRowsPerGroup is how many rows (subgroups) a GPU's matvec workgroup
// takes: 4 keeps a 32-wide subgroup's workgroup at 128 invocations, and
// enough workgroups in flight for the smallest decode matrices (a 2048-row
// matrix is 512 workgroups over an H100's 132 SMs).
const matvecRowsPerGroup = 4

// MatvecSubblockSpecCPU is the matvec spec of the sub-block types (Q4_1,
// Q5_0, Q5_1, the K-quants) on a CPU device, unfused or with the residual
// add: an invocation walks RPI rows together, loading each group of x and
// summing it per sub-block once for all of them (matvec.comp's rowsPass),
// in workgroups of lavapipe's 8 SIMD lanes, so that a workgroup still
// takes 64 rows. On lavapipe an invocation's load of x costs as much as
// decoding the weights it meets: shared by 8 rows, a 2048x2048 Q4_K
// matvec runs in about half the time (BenchmarkMatvec).
var MatvecSubblockSpecCPU = []uint32{8, 1, 1, 8}

// MatvecLowBitSpecCPU is MatvecSubblockSpecCPU for the types of 2-bit low
// planes (Q2_K, Q3_K): 16 rows an invocation. Their weights cost the least
// to decode, so the loads of x weigh the most: shared by 16 rows they cost
// half as much a row, while the other types' longer decode of 16 rows
// spills more than it saves (BenchmarkMatvec, bench/results/
// lavapipe-weight-types-decode.md).
var MatvecLowBitSpecCPU = []uint32{8, 1, 1, 16}

// MatvecLanesSpecCPU is matvec_lanes.comp's spec (ReduceLanes): a
// workgroup of one 8-lane subgroup, 16 rows an invocation (8 under
// FuseNormSwiGLU, which walks each row's gate and up rows: 16 again).
// The broadcasts of x are shared by an invocation's rows, so more rows
// cost less a row, until the sums (rows x vectors) no longer fit: on
// lavapipe a stories15M head (32000x288) at 8 vectors took 17.6, 14.3 and
// 11.6 ms of CPU at 8, 16 and 32 rows an invocation (12.3 at 64), but
// 32 rows took 0.6 s to compile, per pipeline, for each vector count.
var MatvecLanesSpecCPU = []uint32{8, 1, 1, 16}

// NewProfile chooses d's kernels.
//   - CPU devices (lavapipe): the loop cap, and an invocation per matvec row
//     with no reduction at all (lavapipe runs a workgroup's invocations 8
//     at a time in SIMD on one thread, so 8 rows share the SIMD lanes and
//     the loads of a lane walk its row; see BenchmarkMatvec for the
//     subgroup variant beside it).
//   - GPUs with subgroup arithmetic: a subgroup per row, summed by
//     subgroupAdd, matvecRowsPerGroup rows per workgroup.
//   - other GPUs: 32 invocations per row summed in shared memory.
func NewProfile(d Device) Profile {
	p := Profile{Device: d, KV: KVF16, AttentionChunk: attentionChunk, FuseNorm: true, FuseAttention: true, AttendKeys: !d.NoAttendKeys, AttendOwn: !d.NoAttendOwn}
	if d.MaxWorkGroupInvocations == 0 {
		p.MaxWorkGroupInvocations = 128 // Vulkan's minimum
	}
	sg := d.SubgroupSize
	switch {
	case d.CPU:
		p.LoopCap, p.KV, p.AttentionChunk, p.FuseNorm, p.FuseAttention, p.AttendKeys, p.AttendOwn = LavapipeLoopIterations, KVF32, 0, false, false, false, false
		p.MatvecReduce, p.MatvecSpec = ReduceShared, []uint32{64, 1, 1}
		p.MatvecLanes = sg == 8 && d.SubgroupBallot && d.SubgroupArithmetic
	case subgroupsUsable(d.SubgroupArithmetic, sg, 128) && matvecRowsPerGroup*sg <= p.MaxWorkGroupInvocations:
		p.MatvecReduce, p.MatvecSpec = ReduceSubgroup, []uint32{matvecRowsPerGroup * sg, sg, 1}
		p.MatvecRows = !d.NoMatvecRows
	default:
		p.MatvecReduce, p.MatvecSpec = ReduceShared, []uint32{128, 32, 1}
	}
	p.AttentionLanes = !d.CPU && d.SubgroupShuffle && sg > 0
	p.MatvecDot = p.MatvecRows && d.MatvecDot && d.IntegerDotProduct
	nv, khr := d.coopNV(), d.coopKHR()
	tensor := !d.CPU && (d.TensorCores || d.TensorCoresHalf)
	p.MatmulCoop = tensor && (nv || khr)
	p.MatmulCoopKHR = tensor && khr && (!nv || d.CoopMatKHR)
	p.MatmulCoopHalf = p.MatmulCoop && d.TensorCoresHalf
	p.MatmulDirect, p.MatmulDirectMin, p.MatmulDirectSlice = p.MatmulCoop && !p.MatmulCoopKHR && d.MatmulDirect, MatmulDirectMinRows, MatmulDirectMinSlice
	p.MatmulDirectResident = p.MatmulDirect && d.MatmulDirectResident
	p.AttentionCoop = p.MatmulCoop && !p.MatmulCoopKHR && d.AttentionCoop
	p.MatmulDirectSlots = MatmulDirectSplitTarget
	if d.ComputeUnits > 0 {
		p.MatmulDirectSlots = MatmulDirectGroupsPerUnit * d.ComputeUnits
	}
	if !d.CPU {
		p.MatmulSplitTarget = MatmulSplitTarget
		ps := MatmulSpecPipe
		p.MatmulPipe = !d.NoMatmulPipe && ps.Invocations() <= p.MaxWorkGroupInvocations &&
			(!d.limitsKnown() || ps.SharedBytes() <= d.SharedMemory)
	}
	return p
}

// GPUProfile is the profile a GPU with d's facts gets (NewProfile of d as
// a GPU: an F16 KV cache, fused norm and attention, attention chunks, the
// subgroup matvec where d's subgroups allow it, never matvec_lanes), with
// the loop cap of d's own profile, which a CPU device still has. Tests run
// it on lavapipe so that CI runs the profile every real GPU runs; on a GPU
// it is NewProfile(d).
func GPUProfile(d Device) Profile {
	g := d
	g.CPU = false
	p := NewProfile(g)
	p.LoopCap = NewProfile(d).LoopCap
	return p
}

// String names the profile's choices, for logs and test names.
func (p Profile) String() string {
	kind := "gpu"
	if p.CPU {
		kind = "cpu"
	}
	red := "shared"
	if p.MatvecReduce == ReduceSubgroup {
		red = "subgroup"
	}
	if p.MatvecRows {
		red += "+rows"
	}
	s := fmt.Sprintf("%s/sg%d/matvec-%s%v/loopcap%d/kv-%s/attention-chunk%d", kind, p.SubgroupSize, red, p.MatvecSpec, p.LoopCap, p.KV, p.AttentionChunk)
	if p.MatmulCoop {
		s += "/matmul-coop"
		if p.MatmulDirect {
			s += "-direct"
			if p.MatmulDirectResident {
				s += "-resident"
			}
		}
		if p.MatmulCoopKHR {
			s += "-khr"
		}
		if p.MatmulCoopHalf {
			s += "-f16"
		}
	} else if p.MatmulPipe {
		s += "/matmul-pipe"
	}
	if p.AttentionLanes {
		s += "/attention-lanes"
	}
	if p.AttentionCoop {
		s += "/attention-coop"
	}
	if p.Handoff {
		s += "/handoff"
	}
	return s
}

// Matvec is the matvec variant and specialization for n vectors of cols
// with weights of type typ and fusion fuse (MatvecFusions). Where the
// profile's own choice would pass the loop cap (n*cols of about 32000 with
// an invocation per row), the row is shared by more invocations in shared
// memory, the fewest that stay under it; past that (n*cols of about 4
// million) split the vectors over several dispatches, or use matmul, which
// is meant for many vectors.
func (p Profile) Matvec(typ, fuse string, n, cols uint32) (name string, spec []uint32) {
	iters := func(spec []uint32) uint32 { return matvecWalks(fuse) * MatvecLoopIterations(n, cols, spec) }
	if p.MatvecRows && cols%32 == 0 && slices.Contains(matvecRowsPicks, typ) {
		if s, ok := p.matvecDotSpec(typ, fuse, n, 1, cols); ok {
			return MatvecFusedName(typ, ReduceSubgroupDot, fuse), s
		}
		spec = MatvecRowsSpec(p.SubgroupSize)
		spec[3] = p.rowsPerSubgroup(fuse, 1)
		return MatvecFusedName(typ, ReduceSubgroupRows, fuse), spec
	}
	spec = append([]uint32(nil), p.MatvecSpec...)
	if f, sub := subblockOf[typ]; sub && p.CPU && (fuse == FuseNone || fuse == FuseAdd) {
		spec = append([]uint32(nil), MatvecSubblockSpecCPU...)
		if f.bits < 4 {
			spec = append([]uint32(nil), MatvecLowBitSpecCPU...)
		}
	}
	if typ == MatvecQ8_0 && p.CPU && p.MatvecLanes && fuse != FuseAdd {
		// Each block of x loaded once a lane and shared by broadcast, each
		// weight widened once for all the vectors (matvec_lanes.comp). Not
		// with the residual add: in lavapipe's step of 8 rows its add
		// variant took 44 ms a step where rowsPass's took 5.2
		// (BenchmarkStepProfile, quiet VM; not understood yet).
		spec = append([]uint32(nil), MatvecLanesSpecCPU...)
		if fuse == FuseNormSwiGLU {
			spec[3] /= 2
		}
		if p.LoopCap == 0 || iters(spec) <= p.LoopCap {
			return MatvecFusedName(typ, ReduceLanes, fuse), spec
		}
	}
	if typ == MatvecQ8_0 && p.CPU {
		// Q8_0's rowsPass, every fusion (the norm's sum of squares in the
		// walk): each load of x serves 8 rows (a stories15M-shape
		// head, 32000x288, 6.0 -> 3.5 ms a vector alone and 4.7 -> 2.3 ms a
		// vector at 8 vectors: BenchmarkMatvecVectors on lavapipe).
		spec = append([]uint32(nil), MatvecSubblockSpecCPU...)
	}
	if p.LoopCap == 0 || iters(spec) <= p.LoopCap {
		return MatvecFusedName(typ, p.MatvecReduce, fuse), spec
	}
	spec = []uint32{max(spec[0], 64), 1, 1}
	for spec[1] < spec[0] && iters(spec) > p.LoopCap {
		spec[1] *= 2
	}
	return MatvecFusedName(typ, ReduceShared, fuse), spec
}

// matvecDotSpec is matvec_dot's spec for a matvec of typ under fuse, n
// vectors of cols, nb of them a pass (1: the decode step's one vector),
// and whether the profile takes it: with MatvecDot (which NewProfile sets
// only on a device with integer dot products), for a quantized type
// (MatvecDotTypes), in the largest tile of columns whose quantized x fits
// the device's shared memory: the whole row (MatvecDotSpec,
// MatvecDotBatchSpec), else tiles of 4,096 down to 256 columns.
func (p Profile) matvecDotSpec(typ, fuse string, n, nb, cols uint32) ([]uint32, bool) {
	if !p.MatvecDot || !slices.Contains(MatvecDotTypes, typ) || cols%32 != 0 || cols == 0 || (nb == 1 && n != 1) {
		return nil, false
	}
	var spec []uint32
	if nb > 1 {
		spec = MatvecDotBatchSpec(fuse, p.SubgroupSize, nb, cols)
	} else {
		spec = MatvecDotSpec(typ, p.SubgroupSize, cols)
		spec[3] = p.rowsPerSubgroup(fuse, 1)
	}
	if !p.limitsKnown() {
		return spec, true
	}
	v, err := Lookup(MatvecFusedName(typ, ReduceSubgroupDot, fuse))
	if err != nil {
		return nil, false
	}
	whole := spec[5]
	for _, tile := range []uint32{whole, 4096, 2048, 1024, 512, 256} {
		if tile > whole {
			continue
		}
		spec[5] = tile
		if p.Allows(v, spec) == nil && (p.LoopCap == 0 || MatvecDotIterations(n, cols, spec) <= p.LoopCap) {
			return spec, true
		}
	}
	return nil, false
}

// MatvecDotIterations bounds the loop iterations one invocation of
// matvec_dot runs for n vectors of cols with spec, every loop counted as
// if not unrolled: per pass of NB vectors and per tile, the two
// quantizing passes over the NB vectors' chunks (each with its NB sums of
// squares), the walk's steps (each over the NB vectors), and the norm's
// sum over the subgroups a vector.
func MatvecDotIterations(n, cols uint32, spec []uint32) uint32 {
	wg, tpr, nb, unroll, tc := spec[0], spec[1], spec[2], spec[4], spec[5]/32
	chunks := cols / 32
	passes, tiles := (n+nb-1)/nb, (chunks+tc-1)/tc
	quantize := 2 * ((nb*tc + wg - 1) / wg) * (1 + nb)
	walk := (tc + unroll*tpr - 1) / (unroll * tpr) * (1 + nb)
	return passes * (tiles*(1+quantize+walk) + nb*(1+wg/tpr))
}

// VecRows is the most rows (sequences) a batched step runs as matvecs of
// NB vectors, reading each weight once, before it takes the matmul, which
// re-reads the weights per tile of rows: 16 with matvec_rows (its NB = 16
// pass costs about 2.5 single-vector passes by docs/matvec-cost.md, where
// the matmul took 1.6 ms a call at 7B on an H200, ~200x what the probe
// takes to read the same weights), 8 otherwise (lavapipe's measured choice: the
// step runner's steps of up to 8 rows, engine/vulkan/stepvec.go).
func (p Profile) VecRows() int {
	if p.MatvecRows {
		return VecRowsMost
	}
	return 8
}

// VecRowsMost is the most rows any profile's VecRows runs as matvecs.
const VecRowsMost = 16

// matvecBatchWords are the types a GPU profile's batched steps run on
// matvec_words: those the H200 measured it on (run B), where it beat the
// profile's own kernel at 8 and 16 vectors on every shape it ran (7B
// q|k|v with the norm, gate|up with SwiGLU), 1.1-7.9x (docs/matvec-cost.md,
// "Registers"). Q4_1, which it also reads, was not
// measured and keeps matvec_rows.
var matvecBatchWords = []string{MatvecF16, MatvecQ8_0, MatvecQ4_K}

// MatvecBatch is Matvec's kernel for a batched step's n vectors of cols,
// taken up to nb a pass (VecRows, or MODRUN_VEC_ROWS) where the loop cap
// allows (else Matvec's own spec, a vector a pass). On a GPU profile with
// MatvecRows, the types of matvecBatchWords take matvec_words walking 4
// rows (4 rows a subgroup; 2 under SwiGLU, whose rows are a gate and an up
// row): the sums (rows walked x vectors) and the units loaded ahead share
// the registers, and matvec_rows at 4 rows a subgroup, the decode step's
// kernel, spills past 4 vectors (RADV's compiler for RDNA3 counts 110-940
// spilled registers at 8 and 16 under SwiGLU; on the H200 8 vectors cost
// 9x one). Units in flight: 4 on NVIDIA, the configuration the H200
// measured; elsewhere matvecUnroll(nb), which spills less.
func (p Profile) MatvecBatch(typ, fuse string, n, nb, cols uint32) (name string, spec []uint32) {
	name, own := p.Matvec(typ, fuse, n, cols)
	if n <= 1 || len(own) <= 2 {
		return name, own
	}
	nb = max(min(n, nb), 1)
	if s, ok := p.matvecDotSpec(typ, fuse, n, nb, cols); ok && nb > 1 {
		// Each decoded group of weights dotted with the nb vectors' x in 8
		// bits, x quantized once for the step by dot_x (MatvecDotPreX: the
		// caller dispatches it first), since each workgroup quantizing the
		// nb vectors itself would outweigh the dot products at 8 and 16
		// (docs/matvec-cost.md, "Batched"). Taken under the knob so that a
		// GPU run measures it.
		return MatvecFusedName(typ, ReduceSubgroupDot+MatvecDotPre, fuse), s
	}
	spec = append([]uint32(nil), own...)
	spec[2] = nb
	if name == MatvecFusedName(typ, ReduceSubgroupRows, fuse) {
		spec[3] = p.rowsPerSubgroup(fuse, nb)
	}
	if p.MatvecRows && cols%32 == 0 && slices.Contains(matvecBatchWords, typ) {
		walk, unroll := uint32(4), matvecUnroll(nb)
		switch {
		case p.Vendor == VendorNVIDIA:
			unroll = 4
		case typ == MatvecQ4_K && nb >= 16:
			// Q4_K's units (4 registers) and decode: 9 spilled
			// registers at 4 rows on RDNA3, none at 2
			// (TestMatvecRegistersRDNA3).
			walk = 2
		}
		name = MatvecFusedName(typ, ReduceSubgroupWords, fuse)
		spec = []uint32{matvecRowsPerGroup * p.SubgroupSize, p.SubgroupSize, nb, max(walk/matvecWalks(fuse), 1), unroll}
	}
	if p.LoopCap != 0 && matvecWalks(fuse)*MatvecLoopIterations(n, cols, spec) > p.LoopCap {
		return p.Matvec(typ, fuse, n, cols)
	}
	return name, spec
}

// rowsPerSubgroup is matvec_rows's rows a subgroup at nb vectors a pass
// under fusion fuse: 4 on NVIDIA, what the H200 measured fastest at 1 and
// 16 vectors (run A: 474 us a 7B gate|up pass at 16 against 510 at 2 and
// 804 at 1). Elsewhere the rows walked (twice the rows under SwiGLU) times
// the vectors stay within 16 sums, and at most 4 rows are walked: RADV's
// compiler for RDNA3 spills 15-47 registers for the sub-block types at 4
// rows under SwiGLU at one vector, and 21-943 at 16 vectors, none this way
// (TestMatvecRegistersRDNA3).
func (p Profile) rowsPerSubgroup(fuse string, nb uint32) uint32 {
	if p.Vendor == VendorNVIDIA {
		return 4
	}
	return max(min(4, 16/max(nb, 1))/matvecWalks(fuse), 1)
}

// matvecWalks is how many rows a matvec walks for each row it writes under
// fusion fuse: 2 under SwiGLU (a gate and an up row), else 1 (a norm sums
// x^2 inside the walk).
func matvecWalks(fuse string) uint32 {
	if fuse == FuseNormSwiGLU {
		return 2
	}
	return 1
}

// matvecUnroll is matvec_words's units in flight a lane (constant 4) at nb
// vectors a pass: 4 at up to 4 vectors, then fewer as each unit's products
// grow (2 at 8, 1 at 16), so that a lane holds about 16 vector-units of
// work a step. With them RADV's RDNA3 compiler spills nothing at 8 and 16
// vectors for F16 and Q8_0 walking 4 rows (Q4_K: 9 registers at 16),
// where 4 units spilled up to 69 (bench/results/2026-11-27-radv-gfx1100-
// kernel-stats.md).
func matvecUnroll(nb uint32) uint32 {
	return max(1, min(4, 16/max(nb, 1)))
}

// AttentionSplit is the prefill's (and an eval window's) attention kernel,
// attention_split, for a KV cache of kv (counts: its entry count on the
// GPU) at head dimension hd, and its spec. A GPU profile whose subgroups
// shuffle takes the ATTN_LANES variant, AttentionSplitLanes(hd) invocations
// a query row, where it has lanes to spare: with one invocation a row the
// row's query and output take 2*hd floats of registers, which RADV's
// compiler for RDNA3 spilled (178 registers at hd 64, 631 at 128) and
// NVIDIA's 255 a thread cannot hold at 128 (docs/decode-attention-cost.md).
// Elsewhere (lavapipe's own profile, or AttentionLanes off)
// AttentionSplitSpec. Under AttentionCoop an F16 generate-mode cache's
// attention at a head of whole 16-wide tiles up to 128 takes
// attention_coop (the emulated one within the loop cap, where the
// profile has one). Dispatch AttentionSplitGroupsOf(name, spec, ...).
func (p Profile) AttentionSplit(kv KV, counts bool, hd uint32) (name string, spec []uint32) {
	if p.AttentionCoop && kv == KVF16 && counts && p.attentionCoopFits(hd) {
		return AttentionCoopName(p.MatmulCoopEmulate), AttentionCoopSpec(hd)
	}
	lpr := AttentionSplitLanes(hd)
	if p.AttentionLanes && lpr > 1 && p.SubgroupSize >= lpr && AttentionSplitRows*lpr <= p.MaxWorkGroupInvocations {
		return AttentionSplitLanesName(kv, counts), AttentionSplitLanesSpec(hd, lpr)
	}
	return AttentionSplitName(kv, counts), AttentionSplitSpec(hd)
}

// Flash-decoding's chunks on a GPU: one per attentionChunk entries of the
// cache's capacity, at most maxAttentionSplits. A long context's attention then
// spreads over nHead*splits workgroups (TinyLlama at 2048: 32*8 = 256, two
// per SM of an H100) instead of nHead, so speed at 2K stays near speed at
// 16; a short cache keeps the single pass.
const (
	attentionChunk     = 256
	maxAttentionSplits = 16
)

// AttentionSplits is how many chunks decode attention over a cache of ctx
// entries is split into: 1 means the single-pass kernel (decode_attention),
// more the split one and its combine pass.
func (p Profile) AttentionSplits(ctx int) uint32 {
	if p.AttentionChunk == 0 {
		return 1
	}
	return uint32(min(max(ctx/int(p.AttentionChunk), 1), maxAttentionSplits))
}

// Row is the spec of row kernel name (rmsnorm, nll, argmax) for rows of
// cols: RowSpecGPU on a GPU; on a CPU device RowSpecCPU while its loops stay
// under the cap, else the fewest invocations per row that do.
func (p Profile) Row(name string, cols uint32) []uint32 {
	if !p.CPU {
		return RowSpecGPU
	}
	if p.LoopCap == 0 || RowLoopIterations(name, cols, RowSpecCPU) <= p.LoopCap {
		return RowSpecCPU
	}
	tpr := RowSpecCPU[1]
	for tpr < 1024 && RowLoopIterations(name, cols, []uint32{tpr, tpr}) > p.LoopCap {
		tpr *= 2
	}
	return []uint32{tpr, tpr}
}

// coopNV says whether d runs the VK_NV_cooperative_matrix kernels: the
// extension, and subgroups of 32 (NVIDIA's).
func (d Device) coopNV() bool {
	return !d.CPU && d.CooperativeMatrixNV && d.SubgroupSize == MatmulCoopSubgroup
}

// coopKHR says whether d runs the VK_KHR_cooperative_matrix kernels: the
// extension, and subgroups of 32 or a pipeline's right to require them.
func (d Device) coopKHR() bool {
	return !d.CPU && d.CooperativeMatrixKHR && (d.SubgroupSize == MatmulCoopSubgroup || d.Subgroup32)
}

// CoopProbe is the tensor-core probe's variant for the device (ProbeCoop,
// or ProbeCoopKHR where the matmuls take the KHR kernels or the device has
// only them), or "" and why there is none. Unlike MatmulCoop it does not
// depend on MODRUN_TENSOR_CORES: the probe says what the device has.
func (p Profile) CoopProbe() (name, none string) {
	nv, khr := p.coopNV(), p.coopKHR()
	switch {
	case p.CPU:
		return "", "a CPU device has no tensor cores"
	case khr && (!nv || p.CoopMatKHR):
		return ProbeCoopKHR, ""
	case nv:
		return ProbeCoop, ""
	case !p.CooperativeMatrixNV && !p.CooperativeMatrixKHR:
		return "", "no VK_NV_cooperative_matrix nor VK_KHR_cooperative_matrix with 16x16x16 f16 -> f32"
	}
	return "", fmt.Sprintf("subgroups of %d, not %d (and none may be required)", p.SubgroupSize, MatmulCoopSubgroup)
}

// MatmulKernel is the matmul variant for weights of type typ (a
// WeightTypes name) and its specialization: matmul_coop where the profile
// has MatmulCoop (its hilo kernel unless MatmulCoopHalf), else matmul.comp
// with the tiles of Matmul (its prefetching variant for the pipelined
// tile). Both take matmul's push constants, and their dispatch is
// MatmulGroupsOf(spec).
func (p Profile) MatmulKernel(typ string) (name string, spec []uint32) {
	if p.MatmulCoop {
		if p.MatmulCoopKHR && !p.MatmulCoopEmulate { // the emulation is both extensions' tiling
			return MatmulCoopKHRName(typ, !p.MatmulCoopHalf), MatmulCoopSpecGPU.Constants()
		}
		if p.MatmulCoopHalf {
			return MatmulCoopName(typ, p.MatmulCoopEmulate), MatmulCoopSpecGPU.Constants()
		}
		return MatmulCoopHiloName(typ, p.MatmulCoopEmulate), MatmulCoopSpecGPU.Constants()
	}
	s := p.Matmul()
	return s.Kernel(typ), s.Constants()
}

// DirectMatmul is what the direct matmul of weights of type typ takes
// (Profile.MatmulDirect): the planes variants of W (with a lo plane where
// wLo) and of X (with one where hilo), the product and its tiles.
type DirectMatmul struct {
	WPlanes, XPlanes, Product string
	Spec                      MatmulDirectSpec
	WLo, Hilo                 bool
}

// MatmulDirectKernels is the direct matmul for weights of type typ: the
// hilo product (f32's precision) unless MatmulCoopHalf, emulated under
// MatmulCoopEmulate. An F16 weight is its own high half: no lo plane.
func (p Profile) MatmulDirectKernels(typ string) DirectMatmul {
	hilo := !p.MatmulCoopHalf
	wLo := hilo && typ != MatvecF16
	return DirectMatmul{WPlanes: PlanesName(typ, wLo), XPlanes: PlanesName(MatvecF32, hilo), Product: MatmulDirectName(hilo, p.MatmulCoopEmulate),
		Spec: MatmulDirectSpecGPU, WLo: wLo, Hilo: hilo}
}

// Matmul is matmul.comp's tiles for the device.
func (p Profile) Matmul() MatmulSpec {
	switch {
	case p.CPU:
		return MatmulSpecCPU
	case p.MatmulPipe:
		return MatmulSpecPipe
	}
	return MatmulSpecGPU
}
