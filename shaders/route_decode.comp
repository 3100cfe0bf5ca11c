#version 450
#if defined(SUBGROUP)
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
// route_decode: a routed block's whole routing step in decode (one token),
// in one workgroup, so that a routed block costs one dispatch before its
// block runs (DESIGN.md §6) where it took four commands (router_score,
// compact_positive, decode_args, a copy of x):
//   r = w . x + bias[0]                    the router score, scatter's g(r)
//   PREDICTOR: p = w2 . h [+ pb[0]]        an MLP predictor: h = SiLU(W1 x)
//                                          from router.comp; a linear one
//                                          (mod.PredictorLinear): h = x,
//                                          w2 its weight, pb its bias
//   selected = selects(bits of p, else r)  include/selects.glsl (mod.Selects)
//   count[0] = selected ? 1 : 0
//   args[j] = selected ? groups[j] : (0, 1, 1), j < m   the indirect
//             arguments of the block's dispatches and scatter's: a token
//             that skips runs them all over zero workgroups
//   xs = x                                 the block's working row
//   x = xs = NaN when the deciding score is not finite (mod.PoisonRows): a
//             broken router or predictor reaches the logits as a NaN
//             instead of passing as a skip; a finite score writes nothing
// The decision never reaches the host: the same recording serves a selected
// and a skipped token. Sums are spread over the workgroup and reduced as in
// router.comp (include/dotreduce.glsl: SUBGROUP or the shared-memory tree);
// each invocation loops ceil(nEmbd / WG) + ceil(predHidden / WG) + ceil(m /
// WG) times, far under lavapipe's cap at any width. Dispatch (1, 1, 1).
#include "include/common.glsl"
#define OP_ROUTE_DECODE
#include "include/push_routing.glsl"
#include "include/selects.glsl"

layout(local_size_x = 64, local_size_x_id = 0) in;
#define TPR gl_WorkGroupSize.x // the whole workgroup works on each sum

layout(std430, binding = 0) readonly buffer W { float w[]; };         // [nEmbd] mod_router.weight
layout(std430, binding = 1) readonly buffer Bias { float bias[]; };   // [1] (read when hasBias)
layout(std430, binding = 2) buffer X { float x[]; };                  // [nEmbd] the block input (NaN when poisoned)
layout(std430, binding = 3) writeonly buffer XS { float xs[]; };      // [nEmbd] its copy
layout(std430, binding = 4) writeonly buffer R { float r[]; };        // [1]
layout(std430, binding = 5) writeonly buffer Count { uint count[]; }; // [1] 0 or 1
layout(std430, binding = 6) readonly buffer Groups { uint groups[]; }; // [m][3] workgroups when selected
layout(std430, binding = 7) writeonly buffer Args { uint args[]; };   // [m][3] VkDispatchIndirectCommand
#if defined(PREDICTOR)
layout(std430, binding = 8) readonly buffer H { float h[]; };   // [predHidden] SiLU(W1 x)
layout(std430, binding = 9) readonly buffer W2 { float w2[]; }; // [predHidden] mod_pred_down.weight
layout(std430, binding = 10) writeonly buffer P { float pOut[]; }; // [1]
layout(std430, binding = 11) readonly buffer PB { float pb[]; };    // [1] (read when predBias)
#endif

#include "include/dotreduce.glsl"

void main() {
	const uint WG = gl_WorkGroupSize.x;
	uint tid = gl_LocalInvocationID.x;
	float acc = 0.0;
	for (uint j = tid; j < p.nEmbd; j += WG) {
		float v = x[j];
		xs[j] = v;
		acc += w[j] * v;
	}
	float rs = dotSum(acc);
	if (p.hasBias != 0u) {
		rs += bias[0];
	}
	float score = rs;
#if defined(PREDICTOR)
	float pa = 0.0;
	for (uint j = tid; j < p.predHidden; j += WG) {
		pa += w2[j] * h[j];
	}
	score = dotSum(pa);
	if (p.predBias != 0u) {
		score += pb[0];
	}
#endif
	// Every invocation holds the same sums (dotSum returns the total in
	// each), so each decides alike and writes its share of the arguments.
	bool sel = selects(floatBitsToUint(score));
	if (tid == 0u) {
		r[0] = rs;
		count[0] = sel ? 1u : 0u;
#if defined(PREDICTOR)
		pOut[0] = score;
#endif
	}
	// A non-finite score poisons the row (include/selects.glsl). Each
	// invocation overwrites the elements it read itself, after dotSum's
	// barriers, so no read of x races with the write.
	if (poisons(floatBitsToUint(score))) {
		for (uint j = tid; j < p.nEmbd; j += WG) {
			x[j] = quietNaN();
			xs[j] = quietNaN();
		}
	}
	for (uint j = tid; j < p.m; j += WG) {
		args[3u * j] = sel ? groups[3u * j] : 0u;
		args[3u * j + 1u] = sel ? groups[3u * j + 1u] : 1u;
		args[3u * j + 2u] = sel ? groups[3u * j + 2u] : 1u;
	}
}
