#version 450
// split_halves: out[i] = packHalf2x16(hi, lo) for i < n, x[i] split into
// two halves: hi = x rounded to the nearest half and lo = x - hi (exact in
// f32) rounded to the nearest half, both by toHalf (in integer steps: no
// driver's conversion, no compiler folding), so the word holds two exact
// halves and hi + lo is within 2^-22 of x (2^-25 absolute where lo is a
// subnormal half). matmul_coop's COOP_XSPLIT variants read X so, split once
// for every tile of rows that stages it, where the hilo kernel splits each
// staged value again in every workgroup (docs/matmul-cost.md).
#include "include/common.glsl"
#define OP_ADD
#include "include/push.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };       // [n]
layout(std430, binding = 1) writeonly buffer Out { uint out_[]; };  // [n]: packHalf2x16(hi, lo)

void main() {
	uint i = groupIndex() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (i < p.n) {
		float v = x[i];
		float hi = toHalf(v);
		out_[i] = packHalf2x16(vec2(hi, toHalf(v - hi)));
	}
}
