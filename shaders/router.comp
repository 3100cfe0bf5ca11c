#version 450
#if defined(SUBGROUP)
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
// router: the MoD scores of DESIGN.md §3 as parallel row dot products, in F32:
//   y[i][r] = act(W[r] . x[i] + bias[0])        r < rows, i < n
// with act the identity or SiLU (act = 1, as mod.SiLU) and bias read when
// hasBias is set. One kernel makes every score:
//   router score      W = mod_router.weight [1][nEmbd], bias     -> r [n]
//   predictor hidden  W = mod_pred_up [predHidden][nEmbd], SiLU  -> h [n][predHidden]
//   predictor score   W = mod_pred_down [1][predHidden] over h   -> p [n]
// (route_decode.comp fuses the last step into the decode decision.)
//
// A workgroup of WG invocations (specialization constant 0) takes WG/TPR dot
// products; TPR invocations (constant 1, a divisor of WG) share one: each
// strides over the row, then they sum their partials. Dot q of the grid is
// token q / rows, row q % rows; a grid of more than 65535 workgroups is 2D
// (groupIndex). An invocation loops ceil(cols / TPR) times plus the
// reduction, so any width fits lavapipe's 65535-iteration cap once TPR is
// large enough (ScorePlan picks it).
//
// Two reductions (include/dotreduce.glsl), one per variant; ScorePlan
// chooses by the device: SUBGROUP (subgroupAdd; TPR a multiple of the
// subgroup size) where the device has subgroup arithmetic, else a tree in
// shared memory (TPR = 1: no barrier at all).
// The sum's order differs from the CPU's (mod/mat.go dotF32): scores agree
// within rounding, and a decision can differ only for a score within that
// rounding of 0.
#include "include/common.glsl"
#define OP_ROUTER
#include "include/push_routing.glsl"

layout(local_size_x = 64, local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 64; // invocations per dot product, divides WG

layout(std430, binding = 0) readonly buffer W { float w[]; };       // [rows][cols]
layout(std430, binding = 1) readonly buffer Bias { float bias[]; }; // [1] (read when hasBias)
layout(std430, binding = 2) readonly buffer X { float x[]; };       // [n][cols]
layout(std430, binding = 3) writeonly buffer Y { float y[]; };      // [n][rows]

#include "include/dotreduce.glsl"

void main() {
	uint q = groupIndex() * (gl_WorkGroupSize.x / TPR) + dotInGroup();
	bool live = q < p.n * p.rows; // the rest take part in the reduction's barriers only
	uint i = live ? q / p.rows : 0u, r = live ? q % p.rows : 0u;
	uint wb = r * p.cols, xb = i * p.cols;
	float acc = 0.0;
	if (live) {
		for (uint j = dotLane(); j < p.cols; j += TPR) {
			acc += w[wb + j] * x[xb + j];
		}
	}
	float s = dotSum(acc);
	if (!live || dotLane() != 0u) {
		return;
	}
	if (p.hasBias != 0u) {
		s += bias[0];
	}
	if (p.act == 1u) {
		s = s / (1.0 + exp(-s)); // SiLU, as mod.SiLU
	}
	y[q] = s;
}
