#version 450
// mod_residual: the MoD update for the rows a routed block selected, i =
// sel[j] for j < k, where o[j] is the block's output for the j-th selected
// row, r the router scores of all n rows and g sigmoid (GATE_SIGMOID) or
// identity (GATE_IDENTITY), as mod.Gate. Where the gate applies is the
// file's llama-mod.mod.gate_target (mod.GateTarget*):
//   TARGET_BLOCK (DESIGN.md §3): x[i] += g(r[i]) * (o[j] - x[i]), o = x + f(x),
//     read from x itself, not the gathered copy (the block may have
//     overwritten that in place), two roundings as in Go (`precise`);
//   TARGET_OUTPUT (the Mixture-AI wrapper): x[i] = g(r[i]) * o[j], the
//     output, residual included, scaled;
//   TARGET_MLP (MoD Llama 2): x[i] += o[j] + g(r[i]) * m[j], where the block
//     stopped before its MLP residual add: o[j] is h = x + attn and m[j] the
//     MLP output, so the block's output with its MLP scaled is scatter-added
//     onto x; `precise` keeps mod's roundings (g*m, then h + it, then x + it).
// Rows not in sel pass unchanged. An entry sel[j] >= n is skipped: a
// capacity-sized sel may be padded (causal routing selects a data-dependent
// count, and buffers are sized by the capacity, never by the data). Gather
// and scatter of the selected rows are thus fused away on the way out. A
// workgroup per entry of sel, its invocations strided over the row: no
// integer division per element (lavapipe does those one lane at a time).
#include "include/common.glsl"
#define OP_MOD_RESIDUAL
#include "include/push_dense.glsl"

layout(local_size_x = 128) in;

layout(std430, binding = 0) buffer X { float x[]; };                // [n][cols], updated in place
layout(std430, binding = 1) readonly buffer O { float o[]; };       // [k][cols] block outputs (TARGET_MLP: h)
layout(std430, binding = 2) readonly buffer Sel { uint sel[]; };    // [k] rows of x, ascending; >= n: none
layout(std430, binding = 3) readonly buffer R { float r[]; };       // [n] router scores
#if defined(TARGET_MLP)
layout(std430, binding = 4) readonly buffer M { float m[]; };       // [k][cols] the MLP outputs
#endif

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
#if defined(TARGET_OUTPUT)
		x[i * p.cols + e] = g * o[j * p.cols + e];
#elif defined(TARGET_MLP)
		precise float gm = g * m[j * p.cols + e];
		precise float t = o[j * p.cols + e] + gm;
		precise float y = xv + t;
		x[i * p.cols + e] = y;
#else
		precise float delta = g * (o[j * p.cols + e] - xv);
		precise float y = xv + delta;
		x[i * p.cols + e] = y;
#endif
	}
}
