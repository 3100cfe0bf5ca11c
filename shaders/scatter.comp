#version 450
// scatter: the MoD residual update of DESIGN.md §3 for the selected tokens,
//   x[i] += g(r[i]) * (o[j] - x[i]),   i = idx[j], j < count,
// where o[j] is the block output for gathered row j (o = x~ + f(x~)), so
// o - x is f: the update is x + g(r) f(x~). Tokens not selected keep x. It
// reads x[i] itself rather than the gathered copy, as mod's routedBlock
// does: the copy may have been overwritten in place by the block.
// g is sigmoid (specialization constant 0 = 0) or identity (1), as
// mod.Gate; `precise` keeps g*(o-x) and the add two roundings, as in Go.
//
// count is read on the GPU: dispatch indirectly with compact.comp's
// arguments (rowsPerGroup 1) or directly over the most rows there can be.
// One workgroup per row; the selected indices are distinct, so no two
// workgroups touch the same x row.
#include "include/common.glsl"
#define OP_SCATTER
#include "include/push_routing.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const uint GATE_IDENTITY = 0; // 0: sigmoid, 1: identity

layout(std430, binding = 0) readonly buffer Idx { uint idx[]; };     // [count], distinct
layout(std430, binding = 1) readonly buffer Count { uint count[]; }; // [1]
layout(std430, binding = 2) readonly buffer R { float r[]; };        // [n] router scores
layout(std430, binding = 3) readonly buffer O { float o[]; };        // [count][nEmbd]
layout(std430, binding = 4) buffer X { float x[]; };                 // [n][nEmbd], updated in place

void main() {
	uint j = groupIndex();
	if (j >= count[0]) {
		return;
	}
	uint i = idx[j];
	float ri = r[i];
	float g = GATE_IDENTITY != 0u ? ri : 1.0 / (1.0 + exp(-ri));
	uint xb = i * p.nEmbd, ob = j * p.nEmbd;
	for (uint e = gl_LocalInvocationID.x; e < p.nEmbd; e += gl_WorkGroupSize.x) {
		precise float delta = g * (o[ob + e] - x[xb + e]);
		precise float y = x[xb + e] + delta;
		x[xb + e] = y;
	}
}
