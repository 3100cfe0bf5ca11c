#version 450
// matvec_lanes: matvec.comp's y[s][r] = W[r] . x[s] for Q8_0 weights in
// the split layout (RepackQ8_0), for a CPU device whose subgroups are 8
// lanes (lavapipe): Profile.Matvec's choice there, every fusion (NORM, ADD,
// SWIGLU as in matvec.comp). The workgroup is one subgroup of 8
// invocations; each takes RPI rows (constant 3) and NB vectors a pass
// (constant 2), and keeps the RPI x NB sums in registers.
//
// Why: lavapipe (Mesa 22.3) runs an SSBO load as a loop over the SIMD
// lanes, one scalar load, bounds check and branch per lane and component,
// even where every lane reads the same address. matvec.comp's rowsPass
// has every lane load the same 8 vec4 of x per block (256 scalar loads for
// 32 useful floats), and walks the vectors one by one, loading and
// widening each weight again per vector: at 8 vectors a matvec cost 5.3x
// one vector's (BenchmarkMatvecVectors). Here, for each block of 32
// columns, lane j loads vec4 j of each vector's block (one useful vec4 a
// lane) and subgroupBroadcast hands it to every lane (an extract and a
// splat in registers); each lane then loads and widens its rows' quants
// once for all NB vectors. Per block and lane: 4 NB components of x and
// 9 RPI words of weights, where rowsPass loads NB (32 + 9 RPI).
//
// The arithmetic per vector is rowsPass's (a block's 8 dot products
// summed in order, times its scale, added to the row's sum) and does not
// depend on NB: a row gives the same sums alone or in a step of 8.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_ballot : require
#extension GL_EXT_control_flow_attributes : require
#include "include/common.glsl"
#define OP_MATVEC
#include "include/push.glsl"

// The workgroup is one subgroup of LANES: the host requires the size.
layout(local_size_x = 8, local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 1; // matvec.comp's spec layout: always 1 here
layout(constant_id = 2) const uint NB = 1;  // vectors a pass
layout(constant_id = 3) const uint RPI = 16; // rows an invocation

const uint LANES = 8u; // a block's 32 columns are 8 vec4: one a lane

layout(std430, binding = 0) readonly buffer Weights { uint w[]; };    // split Q8_0: quants, then f16 scales
layout(std430, binding = 0) readonly buffer Weights4 { uvec4 w4[]; };
layout(std430, binding = 1) readonly buffer X4 { vec4 x4[]; };        // [n][cols]
#ifdef ADD
layout(std430, binding = 2) buffer Y { float y[]; };                  // [n][rows], added to
#else
layout(std430, binding = 2) writeonly buffer Y { float y[]; };        // [n][rows]
#endif
#ifdef NORM
layout(std430, binding = 3) readonly buffer NormW4 { vec4 nw4[]; };   // [cols] RMSNorm weight
#endif

#ifdef SWIGLU
const uint MATS = 2u; // gate and up, stacked: rows i and RPI + i of an invocation
#else
const uint MATS = 1u;
#endif

// i8x4 is the 4 signed bytes of v, low byte first.
vec4 i8x4(uint v) {
	return vec4(ivec4(uvec4(v) << uvec4(24u, 16u, 8u, 0u)) >> 24);
}

void main() {
	uint lane = gl_SubgroupInvocationID;
	uint r0 = (groupIndex() * gl_WorkGroupSize.x + gl_LocalInvocationID.x) * RPI;
	uint blocks = p.cols / 32u, c4 = p.cols / 4u;
	uint scales = MATS * p.rows * p.cols / 4u; // word offset of the scales
	for (uint s0 = 0u; s0 < p.n; s0 += NB) {
		uint xs[NB]; // this lane's vec4 of each vector's first block
		float acc[MATS * RPI][NB];
#ifdef NORM
		float sq[NB];
#endif
		[[unroll]] for (uint k = 0u; k < NB; k++) {
			xs[k] = min(s0 + k, p.n - 1u) * c4 + lane;
#ifdef NORM
			sq[k] = 0.0;
#endif
			[[unroll]] for (uint i = 0u; i < MATS * RPI; i++) {
				acc[i][k] = 0.0;
			}
		}
		for (uint b = 0u; b < blocks; b++) {
			vec4 xl[NB];
#ifdef NORM
			vec4 nv = nw4[LANES * b + lane];
#endif
			[[unroll]] for (uint k = 0u; k < NB; k++) {
				xl[k] = x4[xs[k] + LANES * b];
#ifdef NORM
				sq[k] += dot(xl[k], xl[k]);
				xl[k] *= nv;
#endif
			}
			vec4 xb[LANES][NB]; // the block of every vector, in every lane
			[[unroll]] for (uint j = 0u; j < LANES; j++) {
				[[unroll]] for (uint k = 0u; k < NB; k++) {
					xb[j][k] = subgroupBroadcast(xl[k], j);
				}
			}
			[[unroll]] for (uint i = 0u; i < MATS * RPI; i++) {
				// Rows past the last compute row rows-1 again (dropped at the store).
				uint r = min(r0 + i % RPI, p.rows - 1u) + (i / RPI) * p.rows;
				uint blk = r * blocks + b;
				uvec4 q0 = w4[2u * blk], q1 = w4[2u * blk + 1u];
				float d = unpackHalf2x16(w[scales + (blk >> 1)] >> ((blk & 1u) * 16u)).x;
				uint q[LANES] = uint[LANES](q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w);
				float s[NB];
				[[unroll]] for (uint k = 0u; k < NB; k++) {
					s[k] = 0.0;
				}
				[[unroll]] for (uint j = 0u; j < LANES; j++) {
					vec4 wv = i8x4(q[j]);
					[[unroll]] for (uint k = 0u; k < NB; k++) {
						s[k] += dot(wv, xb[j][k]);
					}
				}
				[[unroll]] for (uint k = 0u; k < NB; k++) {
					acc[i][k] += d * s[k];
				}
			}
		}
#ifdef NORM
		// mod.RMSNorm: inv = 1/sqrt(mean(x^2) + eps), applied to the sums;
		// each lane summed the squares of its vec4s.
		[[unroll]] for (uint k = 0u; k < NB; k++) {
			sq[k] = 1.0 / sqrt(subgroupAdd(sq[k]) / float(p.cols) + p.eps);
		}
#endif
		[[unroll]] for (uint i = 0u; i < RPI; i++) {
			if (r0 + i >= p.rows) {
				break;
			}
			[[unroll]] for (uint k = 0u; k < NB; k++) {
				if (s0 + k >= p.n) {
					break;
				}
				uint at = (s0 + k) * p.rows + r0 + i;
				float v = acc[i][k];
#ifdef NORM
				v *= sq[k];
#endif
#if defined(SWIGLU)
				y[at] = v / (1.0 + exp(-v)) * (acc[RPI + i][k] * sq[k]);
#elif defined(ADD)
				y[at] = y[at] + v;
#else
				y[at] = v;
#endif
			}
		}
	}
}
