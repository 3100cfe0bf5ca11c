#version 450
// probe_coop: how fast the tensor cores multiply, the peak of matmul_coop's
// path (VK_NV_cooperative_matrix, or VK_KHR_cooperative_matrix under
// COOPMAT_KHR: include/coopmat.glsl; f16 x f16 -> f32 in 16x16x16 steps).
// Each subgroup of 32 holds A and B (16x16 f16) and ACCS 16x16 f32
// accumulators in registers and runs C = A*B + C on each, UNROLL times per
// trip, p.iterations trips: 2*16*16*16 * ACCS * UNROLL * p.iterations FLOPs
// per subgroup (ProbeCoopFLOPs), no memory traffic but the accumulators'
// sum stored at the end. Independent accumulators keep the tensor cores
// busy while each product's result is pending. With a = b = 1 every
// product adds 16 to each element, so the stored elements are exactly
// 16 * ACCS * UNROLL * iterations: the probe checks it. 4 subgroups a
// workgroup; out is [groups*4][256].
#include "include/common.glsl"
#include "include/push_probe_flops.glsl"
#extension GL_EXT_control_flow_attributes : require
#include "include/coopmat.glsl"

layout(local_size_x = 128) in;

layout(std430, binding = 0) writeonly buffer Out { float outv[]; }; // [groups*4][256]

const uint ACCS = 8u;   // ProbeCoopAccumulators
const uint UNROLL = 2u; // ProbeCoopUnroll

void main() {
	CM_A am = cmFillA(float16_t(p.a));
	CM_B bm = cmFillB(float16_t(p.b));
	CM_C acc[ACCS];
	[[unroll]] for (uint i = 0u; i < ACCS; i++) {
		acc[i] = cmFillC(0.0);
	}
	for (uint it = 0u; it < p.iterations; it++) {
		[[unroll]] for (uint u = 0u; u < UNROLL; u++) {
			[[unroll]] for (uint i = 0u; i < ACCS; i++) {
				acc[i] = CM_MULADD(am, bm, acc[i]);
			}
		}
	}
	[[unroll]] for (uint i = 1u; i < ACCS; i++) {
		acc[0] = CM_ADD(acc[0], acc[i]);
	}
	CM_STORE(acc[0], outv, (groupIndex() * gl_NumSubgroups + gl_SubgroupID) * 256u, 16u);
}
