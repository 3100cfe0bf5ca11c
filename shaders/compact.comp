#version 450
// compact: from a selection over n tokens, the selected indices in ascending
// order, their count, and the VkDispatchIndirectCommand of a following
// kernel whose workgroups cover count rows, rowsPerGroup rows each. The
// count and the arguments stay on the GPU: a routed block's later kernels
// are dispatched indirectly and read the count from a buffer, so the CPU
// never reads a routing decision back to decide what to record (DESIGN.md
// §6). A count of 0 gives (0, 1, 1): a valid dispatch that runs nothing.
//
//   FROM_MASK:     token i is selected iff mask[i] != 0 (after topk).
//   FROM_POSITIVE: token i is selected iff score[i] > 0, causal routing by
//                  router or predictor (DESIGN.md §3), and the 0/1 mask is
//                  written too (the threshold selection in the same pass).
//                  "> 0" is decided on the score's bits, as mod.Selects: the
//                  sign bit clear and the bits neither +0 nor a NaN. A float
//                  comparison would not do: NVIDIA flushes a denormal score
//                  to 0 and would reject a token the CPU selects. The scores
//                  are read as uint, so no float operation ever touches them.
//                  A token whose score is not finite (a NaN or an infinity:
//                  the exponent's bits all ones, mod.Poisons) gets its row
//                  of x set to NaN, selected (+Inf) or not, so that a broken
//                  router or predictor reaches the logits instead of passing
//                  as a skip (mod.PoisonRows); a finite score writes nothing.
//
// With TABLE_ARGS (compact_positive_table) args are instead the m
// VkDispatchIndirectCommands of a routed block's dispatches for the count:
// args[i] = table[count][i], a table of every dispatch's workgroups for
// each count 0..n made on the host (engine/vulkan's routedTable), as
// prefill.comp's PREFILL_ARGS writes them, so that the block needs no
// dispatch of its own for them.
//
// One workgroup does it all, so no pass waits on another: invocation t owns
// a contiguous run of ceil(n / WG) tokens, counts its selected, an exclusive
// scan over the WG counts in shared memory (log2 WG steps) gives where its
// run starts, and it writes its indices. n is unbounded (the run grows).
#include "include/common.glsl"
#define OP_COMPACT
#include "include/push_routing.glsl"

layout(local_size_x = 256, local_size_x_id = 0) in;

#if defined(FROM_MASK)
layout(std430, binding = 0) readonly buffer Mask { uint mask[]; }; // [n]
#elif defined(FROM_POSITIVE)
layout(std430, binding = 0) readonly buffer Scores { uint scoreBits[]; }; // [n] f32 bits
layout(std430, binding = 4) writeonly buffer Mask { uint mask[]; };    // [n]
layout(std430, binding = 5) buffer X { float x[]; };                   // [n][cols] the residual rows
#else
#error "define FROM_MASK or FROM_POSITIVE"
#endif
layout(std430, binding = 1) writeonly buffer Idx { uint idx[]; };     // [n], the first count are valid
layout(std430, binding = 2) writeonly buffer Count { uint count[]; }; // [1]
#ifdef TABLE_ARGS
layout(std430, binding = 3) writeonly buffer Args { uint args[]; };   // [m][3]: each dispatch's x, y, z workgroups
layout(std430, binding = 6) readonly buffer Table { uint table[]; };  // [n+1][m][3] by count
#else
layout(std430, binding = 3) writeonly buffer Args { uint args[]; };   // [3]: x, y, z workgroups
#endif

shared uint sums[gl_WorkGroupSize.x];

#include "include/selects.glsl"

bool selected(uint i) {
#if defined(FROM_MASK)
	return mask[i] != 0u;
#else
	uint bits = scoreBits[i];
	bool s = selects(bits);
	mask[i] = s ? 1u : 0u;
	if (poisons(bits)) {
		for (uint e = 0u; e < p.cols; e++) {
			x[i * p.cols + e] = quietNaN();
		}
	}
	return s;
#endif
}

void main() {
	const uint WG = gl_WorkGroupSize.x;
	uint tid = gl_LocalInvocationID.x;
	uint run = (p.n + WG - 1u) / WG;
	uint start = min(tid * run, p.n), end = min(start + run, p.n);
	uint mine = 0u;
	for (uint i = start; i < end; i++) {
		mine += selected(i) ? 1u : 0u;
	}
	// Inclusive scan (Hillis-Steele): after the step at distance d,
	// sums[t] holds the counts of runs t-2d+1 .. t.
	sums[tid] = mine;
	barrier();
	for (uint d = 1u; d < WG; d <<= 1) {
		uint add = tid >= d ? sums[tid - d] : 0u;
		barrier();
		sums[tid] += add;
		barrier();
	}
	uint at = sums[tid] - mine;
	for (uint i = start; i < end && at < sums[tid]; i++) {
#if defined(FROM_MASK)
		bool s = mask[i] != 0u;
#else
		bool s = selects(scoreBits[i]);
#endif
		if (s) {
			idx[at++] = i;
		}
	}
	if (tid == WG - 1u) {
		uint total = sums[tid];
		count[0] = total;
#ifdef TABLE_ARGS
		for (uint j = 0u; j < 3u * p.m; j++) {
			args[j] = table[3u * p.m * total + j];
		}
#else
		// As shaders.Groups: a grid every device accepts (65535 per dimension).
		uint groups = (total + p.rowsPerGroup - 1u) / p.rowsPerGroup;
		uint x = min(groups, 65535u);
		args[0] = x;
		args[1] = groups <= 65535u ? 1u : (groups + 65534u) / 65535u;
		args[2] = 1u;
#endif
	}
}
