#version 450
// gather: xs[j] = x[idx[j]] for j < count, rows of nEmbd F32: the selected
// tokens' block inputs, packed, for a routed block (DESIGN.md §3, X~).
// count is read on the GPU (compact.comp wrote it), so the dispatch may be
// indirect with compact's arguments (rowsPerGroup 1), or direct over the
// most rows there can be: workgroups past count do nothing.
//
// One workgroup per row; its invocations stride over the row, so
// neighbouring invocations copy neighbouring floats.
//
// GATHER_POS (gather_pos): also pos[j] = rowPos[idx[j]], the selected rows'
//   original positions; with COMPACT (gather_pos_compact) also ropePos[j] =
//   counts[layer] + j, their compact positions (mod.PositionsCompact: a
//   row's index among the rows that entered the layer), at which RoPE turns
//   them (run before the layer's prefill_count). A batch's routed layer's
//   gather and positions in one dispatch.
#include "include/common.glsl"
#define OP_GATHER
#include "include/push_routing.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Idx { uint idx[]; };     // [count], ascending
layout(std430, binding = 1) readonly buffer Count { uint count[]; }; // [1]
layout(std430, binding = 2) readonly buffer X { float x[]; };        // [n][nEmbd]
layout(std430, binding = 3) writeonly buffer XS { float xs[]; };     // [count][nEmbd]
#ifdef GATHER_POS
layout(std430, binding = 4) readonly buffer RowPos { uint rowPos[]; };  // [n] every row's position
layout(std430, binding = 5) writeonly buffer Pos { uint pos[]; };       // [n] the selected rows' positions
#ifdef COMPACT
layout(std430, binding = 6) readonly buffer Counts { uint counts[]; };  // [nLayer] entries per layer
layout(std430, binding = 7) writeonly buffer RopePos { uint rpos[]; };  // [n] the selected rows' compact positions
#endif
#endif

void main() {
	uint j = groupIndex();
	if (j >= count[0]) {
		return;
	}
	uint i = idx[j];
	uint src = i * p.nEmbd, dst = j * p.nEmbd;
	for (uint e = gl_LocalInvocationID.x; e < p.nEmbd; e += gl_WorkGroupSize.x) {
		xs[dst + e] = x[src + e];
	}
#ifdef GATHER_POS
	if (gl_LocalInvocationID.x == 0u) {
		pos[j] = rowPos[i];
#ifdef COMPACT
		rpos[j] = counts[p.layer] + j;
#endif
	}
#endif
}
