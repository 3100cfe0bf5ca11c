#version 450
// router: the MoD scores of DESIGN.md §3, one per token, in F32.
//   ROUTER:    r[i] = w . x[i] + bias[0]            (mod_router.weight, .bias)
//   PREDICTOR: p[i] = w2 . silu(W1 . x[i])          (mod_pred_up, mod_pred_down)
// One invocation owns a token row: no shared memory, no barrier (lavapipe
// pays more for a workgroup barrier than for these dot products; a router
// is one row of weights, and the predictor's hidden size is nEmbd/2).
//
// Dot products sum in the CPU reference's order (mod/mat.go dotF32: four
// strided partial sums, the tail into the first, then (s0+s1)+(s2+s3)), and
// `precise` forbids fusing a multiply into an add, so on a device with IEEE
// float32 the router score is the CPU's bit for bit. That matters beyond
// tolerance: top-k and r > 0 are discontinuous, and a score one ulp off can
// flip a routing decision the CPU made.
#include "include/common.glsl"
#if defined(ROUTER)
#define OP_ROUTER
#elif defined(PREDICTOR)
#define OP_PREDICTOR
#else
#error "define ROUTER or PREDICTOR"
#endif
#include "include/push_routing.glsl"

layout(local_size_x = 64) in;

#if defined(ROUTER)
layout(std430, binding = 0) readonly buffer W { float w[]; };       // [nEmbd]
layout(std430, binding = 1) readonly buffer Bias { float bias[]; }; // [1] (read when hasBias)
#else
layout(std430, binding = 0) readonly buffer W1 { float w1[]; }; // [predHidden][nEmbd]
layout(std430, binding = 1) readonly buffer W2 { float w2[]; }; // [predHidden]
#endif
layout(std430, binding = 2) readonly buffer X { float x[]; };      // [n][nEmbd]
layout(std430, binding = 3) writeonly buffer Score { float s[]; }; // [n]

// dotRow is w[wb:wb+len] . x[xb:xb+len] (or w1's) in dotF32's order.
float dotRow(uint wb, uint xb, uint len) {
	precise float s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
	uint n4 = len & ~3u;
	for (uint j = 0u; j < n4; j += 4u) {
#if defined(ROUTER)
		s0 += w[wb + j] * x[xb + j];
		s1 += w[wb + j + 1u] * x[xb + j + 1u];
		s2 += w[wb + j + 2u] * x[xb + j + 2u];
		s3 += w[wb + j + 3u] * x[xb + j + 3u];
#else
		s0 += w1[wb + j] * x[xb + j];
		s1 += w1[wb + j + 1u] * x[xb + j + 1u];
		s2 += w1[wb + j + 2u] * x[xb + j + 2u];
		s3 += w1[wb + j + 3u] * x[xb + j + 3u];
#endif
	}
	for (uint j = n4; j < len; j++) {
#if defined(ROUTER)
		s0 += w[wb + j] * x[xb + j];
#else
		s0 += w1[wb + j] * x[xb + j];
#endif
	}
	precise float sum = (s0 + s1) + (s2 + s3);
	return sum;
}

void main() {
	uint i = groupIndex() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (i >= p.n) {
		return;
	}
	uint xb = i * p.nEmbd;
#if defined(ROUTER)
	precise float r = dotRow(0u, xb, p.nEmbd);
	if (p.hasBias != 0u) {
		r += bias[0];
	}
	s[i] = r;
#else
	// The hidden activations are not kept: p needs only their dot with w2,
	// summed in dotF32's order as the CPU does over the hidden row.
	precise float s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
	uint h4 = p.predHidden & ~3u;
	for (uint j = 0u; j < p.predHidden; j++) {
		float a = dotRow(j * p.nEmbd, xb, p.nEmbd);
		precise float t = w2[j] * (a / (1.0 + exp(-a))); // silu(a), as mod.SiLU
		if (j >= h4 || (j & 3u) == 0u) { // the tail goes to s0, as in dotF32
			s0 += t;
		} else if ((j & 3u) == 1u) {
			s1 += t;
		} else if ((j & 3u) == 2u) {
			s2 += t;
		} else {
			s3 += t;
		}
	}
	precise float sum = (s0 + s1) + (s2 + s3);
	s[i] = sum;
#endif
}
