#version 450
// matvec_rows: y[s][r] = W[r] . x[s] for decode on a GPU, the same product,
// bindings, push constants and fusions (NORM, ADD, SWIGLU) as matvec.comp,
// shaped by the cost model in docs/matvec-cost.md: a quantized matvec at
// the memory-bandwidth limit must spend well under 4 instructions of each
// kind per weight on an NVIDIA SM (a Q8_0 weight arrives every 1/16 clock
// per SM at an H200's 4.5 TB/s), and matvec.comp's int-to-float
// conversions (16 a clock per SM on NVIDIA) alone use all of that.
//   - A subgroup takes RPS rows (constant 3; twice that under SWIGLU: each
//     row's gate and up rows), and a lane a 32-weight chunk of each (a Q8_0
//     or Q4_0 block, a sub-block group, 32 halves) at a time: each x it
//     loads serves the RPS rows, and the loads of a chunk's RPS rows are
//     in flight together.
//   - Weights become floats without a conversion instruction: a byte b
//     masked into the low mantissa of 2^23 (bits 0x4B000000 | b) is the
//     float 8388608 + b, exactly, and one subtraction of 8388608 (+128 for
//     Q8_0's signed bytes, flipped by ^0x80; + the type's zero point) makes
//     the value exactly, before any product: the 2^23-sized floats are
//     never summed. Bytes that fit are left in place (2^23 + 256^t b, the
//     scale taking 256^-t); MAGIC_SHIFT shifts each down instead and
//     CONVERT_I2F converts, for the bench. A weight then costs a mask, an
//     add, its scale and NB multiply-adds, and the NB vectors share each
//     decoded weight. (On an H200 the three decodings ran at the same
//     speed within 13%: the conversion is not what bounds this kernel.)
//   - The row's sums are added by subgroupAdd (TPR, constant 1, must be the
//     device's subgroup size); no shared memory, no barrier.
// Rows must be a whole number of 32-weight chunks (cols % 32 == 0: every
// quantized type's block, and every decode shape); Profile.Matvec keeps
// other rows on matvec.comp.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#include "include/common.glsl"
#define OP_MATVEC
#include "include/push.glsl"
#include "include/handoff.glsl"

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 32; // the subgroup size: lanes of a row group
layout(constant_id = 2) const uint NB = 1;   // vectors a pass over the rows
layout(constant_id = 3) const uint RPS = 2;  // rows a subgroup

layout(std430, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, binding = 0) readonly buffer Weights4 { uvec4 w4[]; };
layout(std430, binding = 1) HANDOFF_COHERENT readonly buffer X4 { vec4 x4[]; }; // [n][cols]
#ifdef ADD
layout(std430, binding = 2) HANDOFF_COHERENT buffer Y { float y[]; }; // [n][rows], added to
#else
layout(std430, binding = 2) writeonly buffer Y { float y[]; };        // [n][rows]
#endif
#ifdef NORM
layout(std430, binding = 3) readonly buffer NormW4 { vec4 nw4[]; };   // [cols] RMSNorm weight
#endif

#ifdef SWIGLU
const uint MATS = 2u; // gate and up, stacked
#else
const uint MATS = 1u;
#endif
const uint RW = RPS * MATS; // rows walked: gate rows, then up rows

#ifdef WEIGHT_SUBBLOCK
#include "include/subblock.glsl"
#endif

// MAGIC is 2^23's bits: ORed with an integer below 2^23 it is the float
// 2^23 + that integer, exactly.
const uint MAGIC = 0x4B000000u;

// magic4 is the 4 bytes of u, low byte first, each as 2^23 + byte.
vec4 magic4(uint u) {
	return uintBitsToFloat(((uvec4(u) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu) | MAGIC);
}

#ifdef WEIGHT_BF16
// unpackBF16x2 is the two bfloat16 of u, low half first: the top halves of floats.
vec2 unpackBF16x2(uint u) {
	return uintBitsToFloat(uvec2(u << 16, u & 0xffff0000u));
}
#endif

// A chunk of one row as loaded: raw words and the scales that apply.
struct Chunk {
	uvec4 a, b, c, d; // raw: F16/BF16 all four, Q8_0 a, b, Q4_0 a, sub-block quads a (values 0..15), b (16..31)
	vec4 s;           // Q8_0, Q4_0: s.x the block's scale; sub-block: (scale, min) of values 0..15 in xy, 16..31 in zw
};

// loadChunk is chunk c (32 weights) of row r.
Chunk loadChunk(uint r, uint c) {
	Chunk k = Chunk(uvec4(0u), uvec4(0u), uvec4(0u), uvec4(0u), vec4(0.0));
	uint chunks = p.cols / 32u, g = r * chunks + c;
#if defined(WEIGHT_F16) || defined(WEIGHT_BF16)
	k.a = w4[4u * g], k.b = w4[4u * g + 1u], k.c = w4[4u * g + 2u], k.d = w4[4u * g + 3u];
#elif defined(WEIGHT_Q8_0_SPLIT)
	k.a = w4[2u * g], k.b = w4[2u * g + 1u];
	uint at = (MATS * p.rows * p.cols) / 4u; // word offset of the scales
	k.s.x = unpackHalf2x16(w[at + (g >> 1)] >> ((g & 1u) * 16u)).x;
#elif defined(WEIGHT_Q4_0_SPLIT)
	k.a = w4[g];
	uint at = (MATS * p.rows * p.cols / 2u) / 4u;
	k.s.x = unpackHalf2x16(w[at + (g >> 1)] >> ((g & 1u) * 16u)).x;
#elif defined(WEIGHT_SUBBLOCK)
	sbGroupQuads(g, k.a, k.b);
	vec2 dd = sbSuper(g);
#if SB_SUB == 16
	uint sm = w[sbScales + g * SB_SSTRIDE]; // both sub-blocks' (sc, m)
	k.s = vec4(dd.x * float(bitfieldExtract(int(sm), 0, 8)), dd.y * float((sm >> 8) & 0xffu),
		dd.x * float(bitfieldExtract(int(sm), 16, 8)), dd.y * float(sm >> 24));
#else
	vec2 s0 = sbScaleIn(g, dd);
	k.s = vec4(s0, s0);
#endif
#else
#error "matvec_rows reads F16, BF16, Q8_0, Q4_0 and the sub-block types"
#endif
	return k;
}

// weights4 is weights 4j..4j+3 of chunk k (j a constant after unrolling),
// decoded as the reference does: the exact integer, times its scale (less
// its min).
vec4 weights4(Chunk k, uint j) {
#if defined(WEIGHT_F16) || defined(WEIGHT_BF16)
#ifdef WEIGHT_BF16
#define UNPACK2(u) unpackBF16x2(u)
#else
#define UNPACK2(u) unpackHalf2x16(u)
#endif
	uvec4 q = j < 2u ? k.a : j < 4u ? k.b : j < 6u ? k.c : k.d;
	uint o = 2u * (j & 1u);
	return vec4(UNPACK2(q[o]), UNPACK2(q[o + 1u]));
#elif defined(WEIGHT_Q8_0_SPLIT)
	uint raw = j < 4u ? k.a[j] : k.b[j - 4u];
#if defined(CONVERT_I2F)
	return vec4(ivec4(uvec4(raw) << uvec4(24u, 16u, 8u, 0u)) >> 24) * k.s.x;
#elif !defined(MAGIC_SHIFT)
	// Bytes 1 and 3 stay at bits 8..15 (of u and of u >> 16): 2^23 + 256 (b + 128),
	// exact; the scale takes the 1/256, a power of two, so the products are
	// the same floats. One and-or a byte, a shift a pair.
	uint u = raw ^ 0x80808080u, v = u >> 16;
	vec4 q = uintBitsToFloat(uvec4(u & 0xffu, u & 0xff00u, v & 0xffu, v & 0xff00u) | MAGIC) -
		vec4(8388736.0, 8421376.0, 8388736.0, 8421376.0);
	return q * (k.s.x * vec4(1.0, 1.0 / 256.0, 1.0, 1.0 / 256.0));
#else // MAGIC_SHIFT: each byte shifted down first
	uint u = raw ^ 0x80808080u; // b + 128, unsigned
	return (magic4(u) - 8388736.0) * k.s.x;
#endif
#elif defined(WEIGHT_Q4_0_SPLIT)
	// byte i: element i in the low nibble, i+16 in the high one, as q+8
	uint u = j < 4u ? k.a[j] & 0x0f0f0f0fu : (k.a[j - 4u] >> 4u) & 0x0f0f0f0fu;
	return (magic4(u) - 8388616.0) * k.s.x;
#else
	uint u = j < 4u ? k.a[j] : k.b[j - 4u];
	vec2 sm = j < 4u ? k.s.xy : k.s.zw;
#if defined(CONVERT_I2F)
	return sbQ(u) * sm.x - (sm.x * float(SB_ZERO) + sm.y);
#elif !defined(MAGIC_SHIFT)
	// Values are below 128: bytes 0..2 stay in place (2^23 + 256^t q, exact);
	// the scale takes 256^-t. Byte 3 is shifted down.
	const vec4 at = vec4(1.0, 256.0, 65536.0, 1.0);
	vec4 q = uintBitsToFloat(uvec4(u & 0xffu, u & 0xff00u, u & 0xff0000u, u >> 24) | MAGIC) - (8388608.0 + float(SB_ZERO) * at);
	return q * (sm.x / at) - sm.y;
#else // MAGIC_SHIFT
	vec4 q = magic4(u) - (8388608.0 + float(SB_ZERO));
	return q * sm.x - sm.y;
#endif
#endif
}

void main() {
#ifdef WEIGHT_SUBBLOCK
	sbInit(MATS * p.rows * (p.cols / 32u));
#endif
	uint r0 = (groupIndex() * (gl_WorkGroupSize.x / TPR) + gl_SubgroupID) * RPS;
	if (r0 >= p.rows) {
		return; // the whole subgroup: no sum is left waiting for it
	}
	uint lane = gl_SubgroupInvocationID, chunks = p.cols / 32u;
	uint rowOf[RW]; // the rows walked: rows past the last compute row rows-1 again, unwritten
	[[unroll]] for (uint i = 0u; i < RW; i++) {
		uint r = min(r0 + i % RPS, p.rows - 1u);
		rowOf[i] = i < RPS ? r : r + p.rows;
	}
	for (uint s0 = 0u; s0 < p.n; s0 += NB) {
		uint xs[NB]; // each vector's first vec4
		float acc[RW * NB];
#ifdef NORM
		float ss[NB];
#endif
		[[unroll]] for (uint k = 0u; k < NB; k++) {
			xs[k] = min(s0 + k, p.n - 1u) * (p.cols / 4u);
#ifdef NORM
			ss[k] = 0.0;
#endif
		}
		[[unroll]] for (uint i = 0u; i < RW * NB; i++) {
			acc[i] = 0.0;
		}
		for (uint c = lane; c < chunks; c += TPR) {
			Chunk ch[RW];
			[[unroll]] for (uint i = 0u; i < RW; i++) {
				ch[i] = loadChunk(rowOf[i], c);
			}
			[[unroll]] for (uint j = 0u; j < 8u; j++) {
				vec4 wq[RW];
				[[unroll]] for (uint i = 0u; i < RW; i++) {
					wq[i] = weights4(ch[i], j);
				}
				[[unroll]] for (uint k = 0u; k < NB; k++) {
					vec4 xv = x4[xs[k] + 8u * c + j];
#ifdef NORM
					ss[k] += dot(xv, xv); // each x once a subgroup: the sum of squares
					xv *= nw4[8u * c + j];
#endif
					[[unroll]] for (uint i = 0u; i < RW; i++) {
						acc[i * NB + k] += dot(wq[i], xv);
					}
				}
			}
		}
		[[unroll]] for (uint k = 0u; k < NB; k++) {
			float inv = 1.0;
#ifdef NORM
			// mod.RMSNorm: inv = 1/sqrt(mean(x^2) + eps), applied to the sums.
			inv = 1.0 / sqrt(subgroupAdd(ss[k]) / float(p.cols) + p.eps);
#endif
			[[unroll]] for (uint i = 0u; i < RPS; i++) {
				float g = subgroupAdd(acc[i * NB + k]) * inv;
#ifdef SWIGLU
				float u = subgroupAdd(acc[(i + RPS) * NB + k]) * inv;
#endif
				if (lane == 0u && r0 + i < p.rows && s0 + k < p.n) {
					uint at = (s0 + k) * p.rows + r0 + i;
#if defined(SWIGLU)
					y[at] = g / (1.0 + exp(-g)) * u;
#elif defined(ADD)
					y[at] = y[at] + g;
#else
					y[at] = g;
#endif
				}
			}
		}
	}
}
#include "include/handoff_main.glsl"
