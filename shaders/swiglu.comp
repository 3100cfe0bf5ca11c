#version 450
// swiglu: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)), in
// F32, as the MLP of mod's block (mod.SiLU). out may be gate or up (in place).
#include "include/common.glsl"
#define OP_SWIGLU
#include "include/push_dense.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer Gate { float gate[]; };  // [n]
layout(std430, binding = 1) readonly buffer Up { float up[]; };      // [n]
layout(std430, binding = 2) writeonly buffer Out { float out_[]; };  // [n]

void main() {
	uint i = groupIndex() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (i < p.n) {
		float g = gate[i];
		out_[i] = g / (1.0 + exp(-g)) * up[i];
	}
}
