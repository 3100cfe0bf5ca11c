#version 450
// splitk_reduce: y[s*ldy + yOff + r] = sum over z of part[z][s][r], for
// s < n, r < rows: the second pass of a split-K matmul (matmul.comp and
// matmul_coop.comp with kSplit set write each K slice's partial sums to
// part). The slices are summed in order z = 0, 1, ..., so a split product
// is the same on every run (no float atomics); it differs from the unsplit
// kernel's only in where the running sum restarts (each slice sums its own
// columns from zero).
#include "include/common.glsl"
#define OP_MATMUL_REDUCE
#include "include/push_matmul_attn.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer Part { float part[]; }; // [splits][n][rows]
layout(std430, binding = 1) writeonly buffer Y { float y[]; };     // [n][ldy], columns yOff..yOff+rows written

void main() {
	uint i = groupIndex() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	uint per = p.n * p.rows;
	if (i >= per) {
		return;
	}
	float sum = part[i];
	for (uint z = 1u; z < p.splits; z++) {
		sum += part[z * per + i];
	}
	y[(i / p.rows) * p.ldy + p.yOff + i % p.rows] = sum;
}
