#version 450
// mod_residual: the MoD update of DESIGN.md §3 for the rows a routed block
// selected: x[i] += g(r[i]) * (o[j] - x[i]) with i = sel[j], for j < k,
// where o[j] is the block's output for the j-th selected row (o = x + f(x),
// so this is x + g(r) f(x)), r the router scores of all n rows and g sigmoid
// (GATE_SIGMOID) or identity (GATE_IDENTITY), as mod.Gate. Rows not in sel
// pass unchanged. An entry sel[j] >= n is skipped: a capacity-sized sel may
// be padded (causal routing selects a data-dependent count, and buffers are
// sized by the capacity, never by the data). Gather and scatter of the
// selected rows are thus fused away on the way out. A workgroup per entry
// of sel, its invocations strided over the row: no integer division per
// element (lavapipe does those one lane at a time).
#include "include/common.glsl"
#define OP_MOD_RESIDUAL
#include "include/push_dense.glsl"

layout(local_size_x = 128) in;

layout(std430, binding = 0) buffer X { float x[]; };                // [n][cols], updated in place
layout(std430, binding = 1) readonly buffer O { float o[]; };       // [k][cols] block outputs
layout(std430, binding = 2) readonly buffer Sel { uint sel[]; };    // [k] rows of x, ascending; >= n: none
layout(std430, binding = 3) readonly buffer R { float r[]; };       // [n] router scores

float gate(float v) {
#if defined(GATE_SIGMOID)
	return 1.0 / (1.0 + exp(-v));
#elif defined(GATE_IDENTITY)
	return v;
#else
#error "define GATE_SIGMOID or GATE_IDENTITY"
#endif
}

void main() {
	uint j = groupIndex();
	if (j >= p.k) {
		return;
	}
	uint i = sel[j];
	if (i >= p.n) {
		return;
	}
	float g = gate(r[i]);
	for (uint e = gl_LocalInvocationID.x; e < p.cols; e += gl_WorkGroupSize.x) {
		float xv = x[i * p.cols + e];
		x[i * p.cols + e] = xv + g * (o[j * p.cols + e] - xv);
	}
}
