#version 450
// add: out[i] = a[i] + b[i] for i < n, in F32. out may be a (in place).
#include "include/common.glsl"
#define OP_ADD
#include "include/push.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer A { float a[]; };    // [n]
layout(std430, binding = 1) readonly buffer B { float b[]; };    // [n]
layout(std430, binding = 2) writeonly buffer Out { float out_[]; }; // [n]

void main() {
	uint i = groupIndex() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (i < p.n) {
		out_[i] = a[i] + b[i];
	}
}
