#version 450
// matvec_dot: y = W x for Q8_0 weights (the split layout, RepackQ8_0) and
// one vector, with the products as integer dot products (SPIR-V's OpSDot
// on four packed int8, VK_KHR_shader_integer_dot_product: NVIDIA's DP4A,
// AMD's v_dot4_i32_i8) against x quantized once per workgroup into shared
// memory, as the CPU backend quantizes its activations (engine/cpu's
// quantizeRow, Q8_0-style blocks of 32: d = max|x| / 127, q = x * 127 /
// max|x| rounded to the nearest, ties to even; a block holding a NaN or an
// infinity gets a NaN scale, so that its rows' sums are NaN).
//
// Where matvec_words converts each weight to a float and multiplies it by
// a float of x (loaded from memory, 4 bytes a weight), here a lane takes
// units of 8 weights (two words of int8) of RPS rows (2 RPS under SwiGLU:
// gate rows, then up rows), UNROLL units a row in flight, lanes
// interleaved so that a subgroup's loads of weights are one contiguous
// span; each unit is 2 dot products with two words of x from shared
// memory, its integer sum converted once and scaled by the weights'
// block scale times x's. docs/matvec-cost.md, "Integer dot products".
//
// Before the walk the workgroup quantizes x (with the norm: x times the
// RMSNorm weight, the 1/rms applied to the sums at the end, a scalar the
// quantization does not see): an invocation a block of 32 at a time. The
// first units of weights are loaded before it, so that their latency
// overlaps it.
//
// Spec: [workgroup size, the subgroup size, vectors (1: one vector),
// rows a subgroup, units a lane loads ahead per row, columns x holds
// (XCAP: the shared arrays' size, cols rounded up to 32 or more)].
// cols a multiple of 32, at most XCAP.
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

shared uint xq[XCAP / 4u];   // x's int8, 4 a word
shared float xd[XCAP / 32u]; // x's block scales
#ifdef NORM
shared float ssum[gl_WorkGroupSize.x / 8u + 1u]; // the subgroups' sums of squares (subgroups of 8 or more)
#endif

// quantizeBlock quantizes x's block b (times the norm's weight with NORM)
// into xq and xd, and returns the sum of squares of its raw values.
float quantizeBlock(uint b) {
	vec4 v[8];
	float ss = 0.0, amax = 0.0;
	bool bad = false;
	[[unroll]] for (uint i = 0u; i < 8u; i++) {
		vec4 a = x4[8u * b + i];
		ss += dot(a, a);
#ifdef NORM
		a *= nw4[8u * b + i];
#endif
		v[i] = a;
		bad = bad || any(isnan(a)) || any(isinf(a));
		vec4 m = abs(a);
		amax = max(amax, max(max(m.x, m.y), max(m.z, m.w)));
	}
	float NaN = uintBitsToFloat(0x7fc00000u);
	xd[b] = bad ? NaN : amax / 127.0;
	float id = amax > 0.0 && !bad ? 127.0 / amax : 0.0;
	[[unroll]] for (uint i = 0u; i < 8u; i++) {
		ivec4 q = ivec4(roundEven(v[i] * id));
		xq[8u * b + i] = uint(q.x & 0xff) | uint(q.y & 0xff) << 8 | uint(q.z & 0xff) << 16 | uint(q.w & 0xff) << 24;
	}
	return ss;
}

// Unit is one unit of one row as loaded: two words of int8 and the
// block's scale.
struct Unit {
	uvec2 q;
	float s;
};

Unit loadUnit(uint r, uint v) {
	uint g = r * (p.cols / 8u) + v; // the unit counted over the binding
	uint blk = g >> 2, at = (MATS * p.rows * p.cols) / 4u;
	return Unit(w2[g], unpackHalf2x16(w[at + (blk >> 1)] >> ((blk & 1u) * 16u)).x);
}

void main() {
	uint r0 = (groupIndex() * (gl_WorkGroupSize.x / TPR) + gl_SubgroupID) * RPS;
	uint lane = gl_SubgroupInvocationID, units = p.cols / 8u, tid = gl_LocalInvocationID.x;
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
	for (uint b = tid; b < p.cols / 32u; b += gl_WorkGroupSize.x) {
		ss += quantizeBlock(b);
	}
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
			uint x0 = xq[2u * v], x1 = xq[2u * v + 1u];
			float xs = xd[v >> 2];
			[[unroll]] for (uint i = 0u; i < RW; i++) {
				Unit u = un[m * RW + i];
				int d = sdot4x8(u.q.x, x0, 0) + sdot4x8(u.q.y, x1, 0);
				acc[i] += float(d) * (u.s * xs);
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
