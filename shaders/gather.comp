#version 450
// gather: xs[j] = x[idx[j]] for j < count, rows of nEmbd F32: the selected
// tokens' block inputs, packed, for a routed block (DESIGN.md §3, X~).
// count is read on the GPU (compact.comp wrote it), so the dispatch may be
// indirect with compact's arguments (rowsPerGroup 1), or direct over the
// most rows there can be: workgroups past count do nothing.
//
// One workgroup per row; its invocations stride over the row, so
// neighbouring invocations copy neighbouring floats.
#include "include/common.glsl"
#define OP_GATHER
#include "include/push_routing.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Idx { uint idx[]; };     // [count], ascending
layout(std430, binding = 1) readonly buffer Count { uint count[]; }; // [1]
layout(std430, binding = 2) readonly buffer X { float x[]; };        // [n][nEmbd]
layout(std430, binding = 3) writeonly buffer XS { float xs[]; };     // [count][nEmbd]

void main() {
	uint j = groupIndex();
	if (j >= count[0]) {
		return;
	}
	uint src = idx[j] * p.nEmbd, dst = j * p.nEmbd;
	for (uint e = gl_LocalInvocationID.x; e < p.nEmbd; e += gl_WorkGroupSize.x) {
		xs[dst + e] = x[src + e];
	}
}
