#version 450
// prefill: the small kernels of the batched prefill in generate mode
// (engine/vulkan/prefill.go, DESIGN.md §6 "Prefill and eval are one batched
// graph"): a chunk of up to n tokens runs through each block as matmuls; in
// a routed layer only the rows the routing selected (compact_positive's
// count, on the GPU) run, so every count below is read from a buffer.
//
// PREFILL_KV: the KV cache append of a chunk. Row i < rows[0] of k (rotated)
//   and v goes to cache entry counts[layer] + i, with kPos = pos[i]. The
//   count itself is not changed here (every workgroup reads it): PREFILL_COUNT
//   does that next. KV_F16 stores the entries as packed IEEE halves (two per
//   u32), else F32. One workgroup per row: dispatch Groups(n).
// PREFILL_COUNT: counts[layer] = min(counts[layer] + rows[0], maxEntries).
//   Dispatch (1, 1, 1).
// PREFILL_POS: pos[j] = chunkPos[idx[j]] for j < count[0]: the original
//   positions of the selected rows; with COMPACT also ropePos[j] =
//   counts[layer] + j, their compact positions (mod.PositionsCompact: a
//   row's index among the rows that entered the layer), at which RoPE turns
//   them (run before PREFILL_COUNT). Dispatch Groups(ceil(n / 64)).
// PREFILL_ARGS: the indirect arguments of a routed block's n dispatches for
//   the count of selected rows: args[i] = table[min(count, maxEntries)][i],
//   a table of every dispatch's workgroups for each count 0..maxEntries
//   made on the host, so a routed block runs on its selected rows only.
//   Dispatch Groups(ceil(n / 64)).
#include "include/common.glsl"
#include "include/push_prefill.glsl"

layout(local_size_x = 64) in;

#if defined(PREFILL_KV)
layout(std430, binding = 0) readonly buffer K { float k[]; };          // [n][kvDim], rotated
layout(std430, binding = 1) readonly buffer V { float v[]; };          // [n][kvDim]
layout(std430, binding = 2) readonly buffer Pos { uint pos[]; };       // [n] original positions
layout(std430, binding = 3) readonly buffer Rows { uint rows[]; };     // [1] rows to append
layout(std430, binding = 4) readonly buffer Counts { uint counts[]; }; // [nLayer]
#ifdef KV_F16
layout(std430, binding = 5) writeonly buffer KCache { uint kc[]; };    // [maxEntries][kvDim/2] half2
layout(std430, binding = 6) writeonly buffer VCache { uint vc[]; };    // [maxEntries][kvDim/2] half2
#else
layout(std430, binding = 5) writeonly buffer KCache { float kc[]; };   // [maxEntries][kvDim]
layout(std430, binding = 6) writeonly buffer VCache { float vc[]; };   // [maxEntries][kvDim]
#endif
layout(std430, binding = 7) writeonly buffer KPos { uint kPos[]; };    // [maxEntries]

void main() {
	uint i = groupIndex();
	if (i >= rows[0]) {
		return;
	}
	uint c = counts[p.layer] + i;
	if (c >= p.maxEntries) {
		return;
	}
	uint src = i * p.kvDim;
#ifdef KV_F16
	uint half_ = p.kvDim / 2u, dst = c * half_;
	for (uint e = gl_LocalInvocationID.x; e < half_; e += gl_WorkGroupSize.x) {
		kc[dst + e] = packHalf2x16(vec2(k[src + 2u * e], k[src + 2u * e + 1u]));
		vc[dst + e] = packHalf2x16(vec2(v[src + 2u * e], v[src + 2u * e + 1u]));
	}
#else
	uint dst = c * p.kvDim;
	for (uint e = gl_LocalInvocationID.x; e < p.kvDim; e += gl_WorkGroupSize.x) {
		kc[dst + e] = k[src + e];
		vc[dst + e] = v[src + e];
	}
#endif
	if (gl_LocalInvocationID.x == 0u) {
		kPos[c] = pos[i];
	}
}

#elif defined(PREFILL_COUNT)
layout(std430, binding = 0) readonly buffer Rows { uint rows[]; }; // [1]
layout(std430, binding = 1) buffer Counts { uint counts[]; };      // [nLayer]

void main() {
	if (gl_LocalInvocationID.x == 0u) {
		counts[p.layer] = min(counts[p.layer] + rows[0], p.maxEntries);
	}
}

#elif defined(PREFILL_POS)
layout(std430, binding = 0) readonly buffer Idx { uint idx[]; };         // [count] selected rows of the chunk
layout(std430, binding = 1) readonly buffer Count { uint count[]; };     // [1]
layout(std430, binding = 2) readonly buffer ChunkPos { uint cpos[]; };   // [n] the chunk's positions
layout(std430, binding = 3) writeonly buffer Pos { uint pos[]; };        // [n] the selected rows' positions
#ifdef COMPACT
layout(std430, binding = 4) readonly buffer Counts { uint counts[]; };   // [nLayer] entries per layer
layout(std430, binding = 5) writeonly buffer RopePos { uint rpos[]; };   // [n] the selected rows' compact positions
#endif

void main() {
	uint j = groupIndex() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (j < count[0] && j < p.n) {
		pos[j] = cpos[idx[j]];
#ifdef COMPACT
		rpos[j] = counts[p.layer] + j;
#endif
	}
}
#elif defined(PREFILL_ARGS)
layout(std430, binding = 0) readonly buffer Count { uint count[]; };  // [1] selected rows
layout(std430, binding = 1) readonly buffer Table { uint table[]; };  // [maxEntries+1][n][3] groups by count
layout(std430, binding = 2) writeonly buffer Args { uint args[]; };   // [n][3] VkDispatchIndirectCommand

void main() {
	uint i = groupIndex() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (i >= p.n) {
		return;
	}
	uint c = min(count[0], p.maxEntries);
	for (uint j = 0u; j < 3u; j++) {
		args[3u * i + j] = table[3u * (c * p.n + i) + j];
	}
}
#else
#error "define one of PREFILL_KV, PREFILL_COUNT, PREFILL_POS, PREFILL_ARGS"
#endif
