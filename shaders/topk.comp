#version 450
// topk: MoD top-k selection (DESIGN.md §3): of n scores choose the k largest,
// ties to the lower index, and give the selected indices in ascending
// order, as mod.TopKIndices does. The result is a mask ([n] uint, 1 for
// selected) and, from the one-workgroup kernel, the index list.
//
// Method: a bitonic sort of 64-bit keys (hi: the score mapped to a uint that
// orders like the float, inverted so larger scores sort first; lo: the
// index, so equal scores keep index order). Sorting the whole key makes the
// order total, which is what "ties to the lower index" needs; the first k
// keys are the selection. n is padded to a power of two P with keys that
// sort after every score.
//
// Variants (one define each):
//   TOPK_SINGLE        n <= L: one workgroup sorts in shared memory, writes
//                      the mask, then sorts the first k keys by index and
//                      writes idx. One dispatch.
//   TOPK_SORT          n > L: each workgroup sorts L keys in shared memory,
//                      alternating direction by chunk (the first L stages of
//                      the bitonic network over P) and stores them.
//   TOPK_MERGE_GLOBAL  one compare-exchange stage at distance stride >= L
//                      over the stored keys, one invocation per pair.
//   TOPK_MERGE_LOCAL   the stages of one merge at distances L/2 .. 1, chunk
//                      by chunk in shared memory.
//   TOPK_SELECT        the mask from the sorted keys; compact.comp then
//                      makes the ascending index list.
// TopkPasses (routing.go) plans the dispatches.
//
// NaN scores have no place in this order (the CPU's comparison sort gives
// them none either); -0 counts as +0, a tie, as in the CPU's float compare.
// So the kernels that read the scores (TOPK_SINGLE, TOPK_SORT) also set the
// row of x of a non-finite score to NaN (mod.PoisonRows, include/selects.glsl):
// whatever rank it gets, the broken score reaches the logits.
#include "include/common.glsl"
#define OP_TOPK
#include "include/push_routing.glsl"

layout(local_size_x = 256, local_size_x_id = 0) in;

#if defined(TOPK_SINGLE) || defined(TOPK_SORT) || defined(TOPK_MERGE_LOCAL)
#define TOPK_SHARED
// Keys one workgroup sorts in shared memory (a power of two): 2048 keys are
// 16 KiB, the least maxComputeSharedMemorySize Vulkan allows.
layout(constant_id = 1) const uint L = 2048;
shared uvec2 keys[L];
#endif

#if defined(TOPK_SINGLE)
layout(std430, binding = 0) readonly buffer Scores { float score[]; }; // [n]
layout(std430, binding = 1) writeonly buffer Mask { uint mask[]; };    // [n]
layout(std430, binding = 2) writeonly buffer Idx { uint idx[]; };      // [k]
layout(std430, binding = 3) buffer X { float x[]; };                   // [n][cols] the residual rows
#elif defined(TOPK_SORT)
layout(std430, binding = 0) readonly buffer Scores { float score[]; }; // [n]
layout(std430, binding = 1) writeonly buffer Keys { uvec2 gkeys[]; };  // [P]
layout(std430, binding = 2) buffer X { float x[]; };                   // [n][cols] the residual rows
#elif defined(TOPK_MERGE_GLOBAL) || defined(TOPK_MERGE_LOCAL)
layout(std430, binding = 0) buffer Keys { uvec2 gkeys[]; }; // [P]
#elif defined(TOPK_SELECT)
layout(std430, binding = 0) readonly buffer Keys { uvec2 gkeys[]; }; // [P], sorted
layout(std430, binding = 1) writeonly buffer Mask { uint mask[]; };  // [n]
#else
#error "define TOPK_SINGLE, TOPK_SORT, TOPK_MERGE_GLOBAL, TOPK_MERGE_LOCAL or TOPK_SELECT"
#endif

// SENTINEL pads n to P: it sorts after every score's key.
const uvec2 SENTINEL = uvec2(0xffffffffu, 0xffffffffu);

uint nextPow2(uint n) {
	return n <= 1u ? 1u : 1u << uint(findMSB(n - 1u) + 1);
}

// scoreKey orders (score descending, index ascending) as uints ascending.
uvec2 scoreKey(float f, uint i) {
	uint u = floatBitsToUint(f);
	if ((u & 0x7fffffffu) == 0u) {
		u = 0u; // -0 ties with +0
	}
	uint ord = (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u); // ascending like f
	return uvec2(~ord, i);
}

#if defined(TOPK_SINGLE) || defined(TOPK_SORT)
#include "include/selects.glsl"

// scoreKeyAt is score i's key; a non-finite score poisons row i of x first.
uvec2 scoreKeyAt(uint i) {
	float f = score[i];
	if (poisons(floatBitsToUint(f))) {
		for (uint e = 0u; e < p.cols; e++) {
			x[i * p.cols + e] = quietNaN();
		}
	}
	return scoreKey(f, i);
}
#endif

bool keyLess(uvec2 a, uvec2 b) {
	return a.x < b.x || (a.x == b.x && a.y < b.y);
}

// pairAt is the lower element of compare-exchange pair t at distance stride.
uint pairAt(uint t, uint stride) {
	return ((t & ~(stride - 1u)) << 1) | (t & (stride - 1u));
}

#ifdef TOPK_SHARED
// mergeShared runs the stages of bitonic merge `block` at distances
// strideFrom .. 1 over keys[0:count]; base is keys[0]'s place in the whole
// sequence, which fixes each pair's direction.
void mergeShared(uint count, uint base, uint block, uint strideFrom) {
	for (uint stride = strideFrom; stride > 0u; stride >>= 1) {
		for (uint t = gl_LocalInvocationID.x; t < count / 2u; t += gl_WorkGroupSize.x) {
			uint i = pairAt(t, stride);
			uint l = i + stride;
			bool ascending = ((base + i) & block) == 0u;
			uvec2 a = keys[i], b = keys[l];
			if (keyLess(b, a) == ascending) {
				keys[i] = b;
				keys[l] = a;
			}
		}
		barrier();
	}
}

// sortShared sorts keys[0:count] (a power of two) as the first stages of the
// bitonic network at offset base: ascending when count is the whole sequence.
void sortShared(uint count, uint base) {
	for (uint block = 2u; block <= count; block <<= 1) {
		mergeShared(count, base, block, block >> 1);
	}
}
#endif

void main() {
	uint tid = gl_LocalInvocationID.x;
	const uint WG = gl_WorkGroupSize.x;
	uint k = min(p.k, p.n);
#if defined(TOPK_SINGLE)
	uint P = nextPow2(p.n);
	for (uint i = tid; i < P; i += WG) {
		keys[i] = i < p.n ? scoreKeyAt(i) : SENTINEL;
	}
	barrier();
	sortShared(P, 0u);
	for (uint rank = tid; rank < p.n; rank += WG) {
		mask[keys[rank].y] = rank < k ? 1u : 0u;
	}
	// Re-key the selected by index alone and sort them again, so idx comes
	// out ascending. An invocation rewrites only ranks it read itself above
	// (same stride), so no barrier is needed before the rewrite.
	uint pk = nextPow2(k);
	for (uint rank = tid; rank < pk; rank += WG) {
		keys[rank] = rank < k ? uvec2(0u, keys[rank].y) : SENTINEL;
	}
	barrier();
	sortShared(pk, 0u);
	for (uint j = tid; j < k; j += WG) {
		idx[j] = keys[j].y;
	}
#elif defined(TOPK_SORT)
	uint base = groupIndex() * L;
	for (uint i = tid; i < L; i += WG) {
		keys[i] = base + i < p.n ? scoreKeyAt(base + i) : SENTINEL;
	}
	barrier();
	sortShared(L, base);
	for (uint i = tid; i < L; i += WG) {
		gkeys[base + i] = keys[i];
	}
#elif defined(TOPK_MERGE_GLOBAL)
	uint t = groupIndex() * WG + tid;
	if (t < nextPow2(p.n) / 2u) {
		uint i = pairAt(t, p.stride);
		uint l = i + p.stride;
		bool ascending = (i & p.block) == 0u;
		uvec2 a = gkeys[i], b = gkeys[l];
		if (keyLess(b, a) == ascending) {
			gkeys[i] = b;
			gkeys[l] = a;
		}
	}
#elif defined(TOPK_MERGE_LOCAL)
	uint base = groupIndex() * L;
	for (uint i = tid; i < L; i += WG) {
		keys[i] = gkeys[base + i];
	}
	barrier();
	mergeShared(L, base, p.block, L / 2u);
	for (uint i = tid; i < L; i += WG) {
		gkeys[base + i] = keys[i];
	}
#elif defined(TOPK_SELECT)
	uint rank = groupIndex() * WG + tid;
	if (rank < p.n) {
		mask[gkeys[rank].y] = rank < k ? 1u : 0u;
	}
#endif
}
