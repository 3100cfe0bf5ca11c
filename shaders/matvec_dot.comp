#version 450
// matvec_dot: y = W x for one vector of quantized weights (Q8_0, Q4_0 and
// the sub-block types: Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, in their repacked
// layouts), with the products as integer dot products (SPIR-V's OpSDot on
// four packed int8, VK_KHR_shader_integer_dot_product: NVIDIA's DP4A,
// AMD's v_dot4_i32_i8) against x quantized once per workgroup into shared
// memory, as the CPU backend quantizes its activations for the same
// weights: blocks of XB (32; 256 for the K-quants, ggml's Q8_K, as
// engine/cpu's quantizeK), d = max|x| / 127, q = x * 127 / max|x| rounded
// to the nearest, ties to even; a block holding a NaN or an infinity gets
// a NaN scale, so that its rows' sums are NaN.
//
// Where matvec_words converts each weight to a float and multiplies it by
// a float of x (loaded from memory, 4 bytes a weight), here a lane takes
// units of weights of RPS rows (2 RPS under SwiGLU: gate rows, then up
// rows), UNROLL units a row in flight, lanes interleaved so that a
// subgroup's loads of weights are one contiguous span:
//   - Q8_0: a unit is 8 weights (two words of int8): 2 dot products with
//     two words of x, the integer sum converted once and scaled by the
//     weights' block scale times x's;
//   - Q4_0 and the sub-block types: a unit is a 32-weight group (its low-
//     and high-bit words, its sub-blocks' scale word, its super-block's
//     d and dmin): its 8 quads of unsigned q (below 128, so signed bytes)
//     dotted with 8 words of x, per sub-block (16 or 32 values) the exact
//     integer sc * (sum q x - zero * sum x) and m * sum x (sum x, the
//     sub-block's sum of x's q, made once by the quantization, as Q8_K's
//     bsums), then d and dmin and x's scale in floats: ggml's arithmetic
//     x = d sc (q - zero) - dmin m, summed in integers.
// docs/matvec-cost.md, "Integer dot products".
//
// Before the walk the workgroup quantizes x (with the norm: x times the
// RMSNorm weight, the 1/rms applied to the sums at the end, a scalar the
// quantization does not see): an invocation a chunk of 32 at a time; for
// blocks of 256 each chunk's max first, then (after a barrier) each
// block's. The first units of weights are loaded before it, so that their
// latency overlaps it.
//
// Spec: [workgroup size, the subgroup size, vectors (1: one vector),
// rows a subgroup, units a lane loads ahead per row, columns x holds
// (XCAP: the shared arrays' size, a multiple of 256, cols or more)].
// cols a multiple of 32 (of the type's block), at most XCAP.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_spirv_intrinsics : require
#include "include/common.glsl"
#define OP_MATVEC
#include "include/push.glsl"

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 32; // the subgroup size
layout(constant_id = 2) const uint NB = 1;   // one vector (declared for the spec's shape)
layout(constant_id = 3) const uint RPS = 4;  // rows a subgroup
layout(constant_id = 4) const uint UNROLL = 4;
layout(constant_id = 5) const uint XCAP = 4096; // columns the shared arrays hold

// sdot4x8 is OpSDot (id 4450) of a and b as 4 packed signed 8-bit
// integers (PackedVectorFormat4x8Bit, 0): capabilities DotProduct (6019)
// and DotProductInput4x8BitPacked (6018). Debian 12's glslang has no GLSL
// builtin for it; GL_EXT_spirv_intrinsics names the instruction.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4x8(uint a, uint b, spirv_literal int fmt);

layout(std430, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, binding = 0) readonly buffer Weights2 { uvec2 w2[]; };
layout(std430, binding = 1) readonly buffer X4 { vec4 x4[]; }; // [n][cols]
#ifdef ADD
layout(std430, binding = 2) buffer Y { float y[]; }; // [n][rows], added to
#else
layout(std430, binding = 2) writeonly buffer Y { float y[]; }; // [n][rows]
#endif
#ifdef NORM
layout(std430, binding = 3) readonly buffer NormW4 { vec4 nw4[]; }; // [cols] RMSNorm weight
#endif

#ifdef SWIGLU
const uint MATS = 2u;
#else
const uint MATS = 1u;
#endif
const uint RW = RPS * MATS; // rows walked: gate rows, then up rows

#if defined(WEIGHT_SUBBLOCK)
#include "include/subblock.glsl"
#if SB_SUPER == 256
#define XB_WIDE // x in blocks of 256 (Q8_K): 8 chunks of 32 a block
#endif
#elif defined(WEIGHT_Q4_0_SPLIT)
layout(std430, binding = 0) readonly buffer Weights4 { uvec4 w4[]; };
#elif !defined(WEIGHT_Q8_0_SPLIT)
#error "matvec_dot reads Q8_0, Q4_0 and the sub-block types"
#endif
#ifdef XB_WIDE
const uint XB = 256u;
#else
const uint XB = 32u;
#endif

shared uint xq[XCAP / 4u];   // x's int8, 4 a word
shared float xd[XCAP / XB];  // x's block scales
#ifndef WEIGHT_Q8_0_SPLIT
shared uint xs2[XCAP / 32u]; // each chunk of 32's sums of q: its first 16's in the low half (int16), its last 16's high
#endif
#ifdef XB_WIDE
shared float am[XCAP / 32u]; // each chunk's max|x|; negative when it holds a NaN or an infinity
#endif
#ifdef NORM
shared float ssum[gl_WorkGroupSize.x / 8u + 1u]; // the subgroups' sums of squares (subgroups of 8 or more)
#endif

// loadChunk is x's chunk c (values 32c..32c+31; times the norm's weight
// with NORM) in v, with the sum of squares of its raw values in ss; it
// returns their max magnitude, or -1 when one is not finite.
float loadChunk(uint c, out vec4 v[8], out float ss) {
	float amax = 0.0;
	bool bad = false;
	ss = 0.0;
	[[unroll]] for (uint i = 0u; i < 8u; i++) {
		vec4 a = x4[8u * c + i];
		ss += dot(a, a);
#ifdef NORM
		a *= nw4[8u * c + i];
#endif
		v[i] = a;
		bad = bad || any(isnan(a)) || any(isinf(a));
		vec4 m = abs(a);
		amax = max(amax, max(max(m.x, m.y), max(m.z, m.w)));
	}
	return bad ? -1.0 : amax;
}

// storeChunk quantizes chunk c's values v into xq by its block's max
// magnitude amax (negative: the block is not finite, its scale is NaN and
// its q do not matter), and, where the weights need them, the sums of its
// halves' q into xs2.
void storeChunk(uint c, vec4 v[8], float amax) {
	float id = amax > 0.0 ? 127.0 / amax : 0.0;
	ivec4 s = ivec4(0);
	[[unroll]] for (uint i = 0u; i < 8u; i++) {
		ivec4 q = ivec4(roundEven(v[i] * id));
		xq[8u * c + i] = uint(q.x & 0xff) | uint(q.y & 0xff) << 8 | uint(q.z & 0xff) << 16 | uint(q.w & 0xff) << 24;
		if (i < 4u) {
			s.xy += q.xy + q.zw;
		} else {
			s.zw += q.xy + q.zw;
		}
	}
#ifndef WEIGHT_Q8_0_SPLIT
	xs2[c] = uint((s.x + s.y) & 0xffff) | uint(s.z + s.w) << 16;
#endif
}

// blockScale is x's block scale for a block of max magnitude amax.
float blockScale(float amax) {
	return amax < 0.0 ? uintBitsToFloat(0x7fc00000u) : amax / 127.0;
}

#ifdef WEIGHT_Q8_0_SPLIT
// Unit is one unit of one row as loaded: 8 weights, two words of int8, and
// the block's scale.
struct Unit {
	uvec2 q;
	float s;
};
const uint UNIT = 8u;

Unit loadUnit(uint r, uint v) {
	uint g = r * (p.cols / 8u) + v; // the unit counted over the binding
	uint blk = g >> 2, at = (MATS * p.rows * p.cols) / 4u;
	return Unit(w2[g], unpackHalf2x16(w[at + (blk >> 1)] >> ((blk & 1u) * 16u)).x);
}

// XUnit is x's part of unit v: its two words of q and its block's scale.
struct XUnit {
	uvec2 q;
	float d;
};

XUnit loadX(uint v) {
	return XUnit(uvec2(xq[2u * v], xq[2u * v + 1u]), xd[v >> 2]);
}

float unitDot(Unit u, XUnit x) {
	int d = sdot4x8(u.q.x, x.q.x, 0) + sdot4x8(u.q.y, x.q.y, 0);
	return float(d) * (u.s * x.d);
}
#else
// Unit is one 32-weight group of one row as loaded: its raw low-bit words
// (lo: Q4_0's 16 nibble bytes, as the sub-block layout's), high-bit words
// (hi), scale word (sm: Q4_0 none; sub-blocks of 32: (sc, m) in its low
// 16 bits; of 16: both sub-blocks') and super-block word (dd: d and dmin
// as halves; Q4_0's scale in the low half).
struct Unit {
	uvec4 lo;
	uvec2 hi;
	uint sm, dd;
};
const uint UNIT = 32u;

Unit loadUnit(uint r, uint v) {
	uint g = r * (p.cols / 32u) + v; // the group counted over the binding
	Unit u;
#ifdef WEIGHT_Q4_0_SPLIT
	u.lo = w4[g], u.hi = uvec2(0u), u.sm = 0u;
	u.dd = w[(MATS * p.rows * p.cols / 2u) / 4u + (g >> 1)] >> ((g & 1u) * 16u);
#else
	sbGroupWords(g, u.lo, u.hi);
#if SB_SUB == 16
	u.sm = w[sbScales + g * SB_SSTRIDE];
#else
	u.sm = w[sbScales + (g >> 1)] >> ((g & 1u) * 16u);
#endif
	u.dd = w[sbSupers + g / uint(SB_SUPER / 32)];
#endif
	return u;
}

// XUnit is x's part of group v: its 8 words of q (values 4j..4j+3 in
// a[j] for j < 4, b[j-4] after), the sums of each half's q and its
// block's scale.
struct XUnit {
	uvec4 a, b;
	ivec2 s;
	float d;
};

XUnit loadX(uint v) {
	XUnit x;
	x.a = uvec4(xq[8u * v], xq[8u * v + 1u], xq[8u * v + 2u], xq[8u * v + 3u]);
	x.b = uvec4(xq[8u * v + 4u], xq[8u * v + 5u], xq[8u * v + 6u], xq[8u * v + 7u]);
	int s = int(xs2[v]);
	x.s = ivec2(bitfieldExtract(s, 0, 16), bitfieldExtract(s, 16, 16));
	x.d = xd[v / (XB / 32u)];
	return x;
}

int dot4(uvec4 q, uvec4 x) {
	return sdot4x8(q.x, x.x, 0) + sdot4x8(q.y, x.y, 0) + sdot4x8(q.z, x.z, 0) + sdot4x8(q.w, x.w, 0);
}

float unitDot(Unit u, XUnit x) {
#ifdef WEIGHT_Q4_0_SPLIT
	// q + 8 in the nibbles: sum (q - 8) x = sum q x - 8 sum x
	int d = dot4(u.lo & 0x0f0f0f0fu, x.a) + dot4((u.lo >> 4u) & 0x0f0f0f0fu, x.b) - 8 * (x.s.x + x.s.y);
	return float(d) * (unpackHalf2x16(u.dd).x * x.d);
#else
	uvec4 qa, qb;
	sbQuadsOf(u.lo, u.hi, qa, qb);
	int s0 = dot4(qa, x.a), s1 = dot4(qb, x.b);
	int isum, msum = 0;
#if SB_SUB == 16
	isum = bitfieldExtract(int(u.sm), 0, 8) * (s0 - SB_ZERO * x.s.x) + bitfieldExtract(int(u.sm), 16, 8) * (s1 - SB_ZERO * x.s.y);
#ifdef SB_MIN
	msum = int((u.sm >> 8) & 0xffu) * x.s.x + int(u.sm >> 24) * x.s.y;
#endif
#else
	int sx = x.s.x + x.s.y;
	isum = bitfieldExtract(int(u.sm), 0, 8) * (s0 + s1 - SB_ZERO * sx);
#ifdef SB_MIN
	msum = int((u.sm >> 8) & 0xffu) * sx;
#endif
#endif
	vec2 dd = unpackHalf2x16(u.dd);
	return (dd.x * float(isum) - dd.y * float(msum)) * x.d;
#endif
}
#endif

void main() {
#ifdef WEIGHT_SUBBLOCK
	sbInit(MATS * p.rows * (p.cols / 32u));
#endif
	uint r0 = (groupIndex() * (gl_WorkGroupSize.x / TPR) + gl_SubgroupID) * RPS;
	uint lane = gl_SubgroupInvocationID, units = p.cols / UNIT, tid = gl_LocalInvocationID.x;
	bool walks = r0 < p.rows; // uniform in the subgroup; every invocation quantizes
	uint rowOf[RW];
	[[unroll]] for (uint i = 0u; i < RW; i++) {
		uint r = min(r0 + i % RPS, p.rows - 1u);
		rowOf[i] = i < RPS ? r : r + p.rows;
	}
	// The first units' loads in flight while x is quantized.
	Unit un[UNROLL * RW];
	if (walks) {
		[[unroll]] for (uint m = 0u; m < UNROLL; m++) {
			uint v = min(lane + m * TPR, units - 1u);
			[[unroll]] for (uint i = 0u; i < RW; i++) {
				un[m * RW + i] = loadUnit(rowOf[i], v);
			}
		}
	}
	float ss = 0.0;
	uint chunks = p.cols / 32u;
#ifdef XB_WIDE
	// Each chunk's max, then each block's from its 8 chunks'.
	for (uint c = tid; c < chunks; c += gl_WorkGroupSize.x) {
		vec4 v[8];
		float s;
		am[c] = loadChunk(c, v, s);
		ss += s;
	}
	barrier();
	for (uint c = tid; c < chunks; c += gl_WorkGroupSize.x) {
		vec4 v[8];
		float s, amax = 0.0;
		loadChunk(c, v, s);
		bool bad = false;
		[[unroll]] for (uint k = 0u; k < 8u; k++) {
			float m = am[(c & ~7u) + k];
			bad = bad || m < 0.0;
			amax = max(amax, m);
		}
		amax = bad ? -1.0 : amax;
		if ((c & 7u) == 0u) {
			xd[c >> 3] = blockScale(amax);
		}
		storeChunk(c, v, amax);
	}
#else
	for (uint c = tid; c < chunks; c += gl_WorkGroupSize.x) {
		vec4 v[8];
		float s;
		float amax = loadChunk(c, v, s);
		ss += s;
		xd[c] = blockScale(amax);
		storeChunk(c, v, amax);
	}
#endif
#ifdef NORM
	ss = subgroupAdd(ss);
	if (lane == 0u) {
		ssum[gl_SubgroupID] = ss;
	}
#endif
	barrier();
	if (!walks) {
		return; // past the rows: after the barrier, which every invocation meets
	}
	float inv = 1.0;
#ifdef NORM
	ss = 0.0;
	for (uint s = 0u; s < gl_NumSubgroups; s++) {
		ss += ssum[s];
	}
	inv = 1.0 / sqrt(ss / float(p.cols) + p.eps);
#endif
	float acc[RW];
	[[unroll]] for (uint i = 0u; i < RW; i++) {
		acc[i] = 0.0;
	}
	for (uint v0 = lane; v0 < units; v0 += UNROLL * TPR) {
		if (v0 != lane) { // the first step's units were loaded before the quantization
			[[unroll]] for (uint m = 0u; m < UNROLL; m++) {
				uint v = min(v0 + m * TPR, units - 1u);
				[[unroll]] for (uint i = 0u; i < RW; i++) {
					un[m * RW + i] = loadUnit(rowOf[i], v);
				}
			}
		}
		[[unroll]] for (uint m = 0u; m < UNROLL; m++) {
			uint v = v0 + m * TPR;
			if (v >= units) {
				break;
			}
			XUnit xu = loadX(v);
			[[unroll]] for (uint i = 0u; i < RW; i++) {
				acc[i] += unitDot(un[m * RW + i], xu);
			}
		}
	}
	[[unroll]] for (uint i = 0u; i < RPS; i++) {
		float g = subgroupAdd(acc[i]) * inv;
#ifdef SWIGLU
		float u = subgroupAdd(acc[i + RPS]) * inv;
#endif
		if (lane == 0u && r0 + i < p.rows) {
			uint at = r0 + i;
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
