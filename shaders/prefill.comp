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

#else
#error "define one of PREFILL_KV, PREFILL_COUNT"
#endif
