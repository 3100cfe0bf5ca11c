#version 450
// matvec_words: matvec_rows (RPS rows a subgroup, weights decoded by the
// 2^23 mantissa trick, NB vectors, every fusion) with its lanes reading
// the row in small interleaved units instead of 32-weight chunks: lane l
// takes units l, l + TPR, l + 2 TPR, ..., UNROLL of them a loop step, so
// that a subgroup's load of weights is one contiguous span and its loads
// of x are lanes 32 bytes apart. On an H200 (gpu-results run A)
// matvec_rows's speed grew with the rows a subgroup (x loaded once for
// more rows) and with nothing else, the conversion included, and fell
// with the vectors: the loads of x, a lane 128 bytes from the next (a
// cache line each), looked like the bound. A unit:
//   F16    16 bytes, 8 weights (x: 2 vec4)
//   Q8_0    8 bytes, 8 weights of a block (x: 2 vec4), its block's scale
//   Q4_K    8 bytes of a group's low plane: weights 8h..8h+7 (low nibbles)
//          and 16+8h..16+8h+7 (high ones), h = unit % 2 (x: 4 vec4)
// Rows must be a whole number of 32-weight groups (cols % 32 == 0).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#include "include/common.glsl"
#define OP_MATVEC
#include "include/push.glsl"

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 32; // the subgroup size
#ifdef FIXED_NB_RPS
// The bench's check of whether arrays sized by specialization constants
// cost (a driver that does not unroll them keeps acc[] in memory): NB 1,
// 4 rows a subgroup and UNROLL 4 fixed at compile time; the spec must say
// the same.
const uint NB = 1u;
const uint RPS = 4u;
const uint UNROLL = 4u;
layout(constant_id = 2) const uint NB_SPEC = 1;  // declared for the table's spec, unused
layout(constant_id = 3) const uint RPS_SPEC = 4;
layout(constant_id = 4) const uint UNROLL_SPEC = 4;
#else
layout(constant_id = 2) const uint NB = 1;   // vectors a pass
layout(constant_id = 3) const uint RPS = 4;  // rows a subgroup
// Units a lane loads per loop step, per row, all in flight together: 4 for
// one vector (the loads are the work); with many vectors each unit's
// products take NB times longer, and its UNROLL * RW units held in
// registers beside the RW * NB sums make it spill (docs/matvec-cost.md,
// "Registers").
layout(constant_id = 4) const uint UNROLL = 4;
#endif

layout(std430, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, binding = 0) readonly buffer Weights2 { uvec2 w2[]; };
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
const uint MATS = 2u;
#else
const uint MATS = 1u;
#endif
const uint RW = RPS * MATS; // rows walked: gate rows, then up rows

#ifdef WEIGHT_SUBBLOCK
#include "include/subblock.glsl"
#if SB_BITS != 4 || SB_SUB != 32
#error "matvec_words reads the 4-bit sub-block types with sub-blocks of 32 (Q4_K, Q4_1)"
#endif
const uint XPU = 4u; // vec4 of x a unit
#else
const uint XPU = 2u;
#endif

const uint MAGIC = 0x4B000000u; // 2^23's bits

// unitsPerRow is how many units make a row of cols.
uint unitsPerRow() {
#if defined(WEIGHT_F16)
	return p.cols / 8u;
#elif defined(WEIGHT_Q8_0_SPLIT)
	return p.cols / 8u;
#else
	return p.cols / 16u;
#endif
}

// Unit is one unit of one row as loaded.
struct Unit {
	uvec4 q;  // F16: 8 halves; Q8_0: .xy 8 bytes; Q4_K: .xy 2 words of the low plane
	vec4 s;   // Q8_0: .x the block's scale; Q4_K: (d*sc, dmin*m)
};

Unit loadUnit(uint r, uint v) {
	Unit u = Unit(uvec4(0u), vec4(0.0));
	uint g = r * unitsPerRow() + v; // the unit counted over the binding
#if defined(WEIGHT_F16)
	u.q = w4[g];
#elif defined(WEIGHT_Q8_0_SPLIT)
	u.q.xy = w2[g];
	uint blk = g >> 2, at = (MATS * p.rows * p.cols) / 4u;
	u.s.x = unpackHalf2x16(w[at + (blk >> 1)] >> ((blk & 1u) * 16u)).x;
#else
	u.q.xy = w2[g]; // the plane of low bits starts the binding: group g>>1's words 2(g&1), 2(g&1)+1
	u.s.xy = sbScaleIn(g >> 1, sbSuper(g >> 1));
#endif
	return u;
}

// weights4 is the unit's weights 4j..4j+3 (j < 2*XPU... see the table above).
vec4 weights4(Unit u, uint j) {
#if defined(WEIGHT_F16)
	uint o = 2u * j;
	return vec4(unpackHalf2x16(u.q[o]), unpackHalf2x16(u.q[o + 1u]));
#elif defined(WEIGHT_Q8_0_SPLIT)
	uint b = u.q[j] ^ 0x80808080u, c = b >> 16; // bytes 1, 3 in place: 2^23 + 256 (b + 128)
	vec4 q = uintBitsToFloat(uvec4(b & 0xffu, b & 0xff00u, c & 0xffu, c & 0xff00u) | MAGIC) -
		vec4(8388736.0, 8421376.0, 8388736.0, 8421376.0);
	return q * (u.s.x * vec4(1.0, 1.0 / 256.0, 1.0, 1.0 / 256.0));
#else
	// j 0, 1: low nibbles of words 0, 1; j 2, 3: their high nibbles. Nibbles
	// at bits 0, 8, 16 (and 4, 12 after a shift) stay in place.
	uint b = j < 2u ? u.q[j] : u.q[j - 2u] >> 4;
	const vec4 at = vec4(1.0, 256.0, 65536.0, 1.0);
	vec4 q = uintBitsToFloat(uvec4(b & 0xfu, b & 0xf00u, b & 0xf0000u, (b >> 24) & 0xfu) | MAGIC) - (8388608.0 + float(SB_ZERO) * at);
	return q * (u.s.x / at) - u.s.y;
#endif
}

// xAt is the vec4 of x (counted in the vector) that weights4(u, j) of unit v meet.
uint xAt(uint v, uint j) {
#if defined(WEIGHT_SUBBLOCK)
	// group v>>1, words 2(v&1)+j%2: low nibbles values 4(2h + j%2).., high ones 16 more
	return 8u * (v >> 1) + 2u * (v & 1u) + (j & 1u) + (j >> 1) * 4u;
#else
	return 2u * v + j;
#endif
}

void main() {
#ifdef WEIGHT_SUBBLOCK
	sbInit(MATS * p.rows * (p.cols / 32u));
#endif
	uint r0 = (groupIndex() * (gl_WorkGroupSize.x / TPR) + gl_SubgroupID) * RPS;
	if (r0 >= p.rows) {
		return; // the whole subgroup
	}
	uint lane = gl_SubgroupInvocationID, units = unitsPerRow();
	uint rowOf[RW];
	[[unroll]] for (uint i = 0u; i < RW; i++) {
		uint r = min(r0 + i % RPS, p.rows - 1u);
		rowOf[i] = i < RPS ? r : r + p.rows;
	}
	for (uint s0 = 0u; s0 < p.n; s0 += NB) {
		uint xs[NB];
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
		for (uint v0 = lane; v0 < units; v0 += UNROLL * TPR) {
			// Every row's UNROLL units first: their loads in flight together.
			Unit un[UNROLL * RW];
			[[unroll]] for (uint m = 0u; m < UNROLL; m++) {
				uint v = min(v0 + m * TPR, units - 1u);
				[[unroll]] for (uint i = 0u; i < RW; i++) {
					un[m * RW + i] = loadUnit(rowOf[i], v);
				}
			}
			[[unroll]] for (uint m = 0u; m < UNROLL; m++) {
				uint v = v0 + m * TPR;
				if (v >= units) {
					break;
				}
				[[unroll]] for (uint j = 0u; j < XPU; j++) {
					vec4 wq[RW];
					[[unroll]] for (uint i = 0u; i < RW; i++) {
						wq[i] = weights4(un[m * RW + i], j);
					}
					uint c = xAt(v, j);
					[[unroll]] for (uint k = 0u; k < NB; k++) {
						vec4 xv = x4[xs[k] + c];
#ifdef NORM
						ss[k] += dot(xv, xv);
						xv *= nw4[c];
#endif
						[[unroll]] for (uint i = 0u; i < RW; i++) {
							acc[i * NB + k] += dot(wq[i], xv);
						}
					}
				}
			}
		}
		[[unroll]] for (uint k = 0u; k < NB; k++) {
			float inv = 1.0;
#ifdef NORM
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
