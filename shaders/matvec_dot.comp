#version 450
// matvec_dot: y[s] = W x[s] for NB vectors a pass of quantized weights
// (Q8_0, Q4_0 and the sub-block types: Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, in
// their repacked layouts), with the products as integer dot products
// (SPIR-V's OpSDot on four packed int8, VK_KHR_shader_integer_dot_product:
// NVIDIA's DP4A, AMD's v_dot4_i32_i8) against x quantized by each
// workgroup into shared memory, as the CPU backend quantizes its
// activations for the same weights: blocks of XB (32; 256 for the
// K-quants, ggml's Q8_K, as engine/cpu's quantizeK), d = max|x| / 127, q =
// x * 127 / max|x| rounded to the nearest, ties to even; a block holding a
// NaN or an infinity gets a NaN scale, so that its rows' sums are NaN.
//
// Where matvec_words converts each weight to a float and multiplies it by
// a float of x (loaded from memory, 4 bytes a weight), here a lane takes
// 32-weight groups of RPS rows (2 RPS under SwiGLU: gate rows, then up
// rows), UNROLL groups a row in flight, lanes interleaved: a group's raw
// words (Q8_0: its 32 int8, 8 words; Q4_0 and the sub-block types: its
// low- and high-bit words, its sub-blocks' scale word, its super-block's
// d and dmin) are decoded at use into 8 quads of q (unsigned below 128:
// signed bytes as they are), each quad an OpSDot with a word of x, per
// sub-block (16 or 32 values) the exact integer sc * (sum q x - zero *
// sum x) and m * sum x (sum x, the sub-block's sum of x's q, made once by
// the quantization, as Q8_K's bsums), then d and dmin and x's scale in
// floats: ggml's arithmetic x = d sc (q - zero) - dmin m, summed in
// integers. Each decoded group serves the NB vectors. docs/matvec-cost.md,
// "Integer dot products".
//
// The columns go in tiles of XCAP: for each tile the workgroup loads its
// first groups of weights, quantizes the NB vectors' part of x (with the
// norm: x times the RMSNorm weight, the 1/rms applied to the sums at the
// end, a scalar the quantization does not see) an invocation a chunk of 32
// at a time (for blocks of 256 each chunk's max first, then after a
// barrier each block's), and after a barrier walks the tile. A row of
// cols <= XCAP is one tile. Every invocation quantizes and meets every
// barrier, also those of a subgroup past the rows.
//
// PREQ (a batched step's variants, Profile.MatvecBatch): x comes quantized
// once for the step by dot_x.comp, as this kernel would quantize it (the
// norm's weight applied, the 1/rms not), and each tile is copied into the
// shared arrays instead of quantized by every workgroup: the same sums.
//
// Spec: [workgroup size, the subgroup size, vectors a pass, rows a
// subgroup, groups a lane loads ahead per row, columns a tile (XCAP: a
// multiple of 256; the shared arrays hold NB vectors of it)]. cols a
// multiple of 32 (of the type's block).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_spirv_intrinsics : require
#include "include/common.glsl"
#define OP_MATVEC
#include "include/push.glsl"

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 32;    // the subgroup size
layout(constant_id = 2) const uint NB = 1;      // vectors a pass
layout(constant_id = 3) const uint RPS = 4;     // rows a subgroup
layout(constant_id = 4) const uint UNROLL = 2;  // groups a lane loads ahead per row
layout(constant_id = 5) const uint XCAP = 4096; // columns a tile

// sdot4x8 is OpSDot (id 4450) of a and b as 4 packed signed 8-bit
// integers (PackedVectorFormat4x8Bit, 0): capabilities DotProduct (6019)
// and DotProductInput4x8BitPacked (6018). Debian 12's glslang has no GLSL
// builtin for it; GL_EXT_spirv_intrinsics names the instruction.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4x8(uint a, uint b, spirv_literal int fmt);

layout(std430, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, binding = 0) readonly buffer Weights4 { uvec4 w4[]; };
#ifdef PREQ
// x as dot_x.comp quantized it for the step (DotXBytes' layout): [n][cols/4]
// words of q, then [n][cols/32] words each of the chunks' halves' sums,
// their blocks' scales and the sums of squares of their raw values.
layout(std430, binding = 1) readonly buffer XQ { uint xg[]; };
layout(std430, binding = 1) readonly buffer XQ4 { uvec4 xg4[]; };
#else
layout(std430, binding = 1) readonly buffer X4 { vec4 x4[]; }; // [n][cols]
#endif
#ifdef ADD
layout(std430, binding = 2) buffer Y { float y[]; }; // [n][rows], added to
#else
layout(std430, binding = 2) writeonly buffer Y { float y[]; }; // [n][rows]
#endif
#if defined(NORM) && !defined(PREQ)
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
#elif !defined(WEIGHT_Q8_0_SPLIT) && !defined(WEIGHT_Q4_0_SPLIT)
#error "matvec_dot reads Q8_0, Q4_0 and the sub-block types"
#endif
#ifdef XB_WIDE
const uint XB = 256u;
#else
const uint XB = 32u;
#endif
const uint TC = XCAP / 32u; // chunks of 32 a vector's tile holds

// x's tile, NB vectors of TC chunks: chunk c of vector k at k * TC + c.
shared uint xq[NB * XCAP / 4u];  // q, 4 int8 a word
shared float xd[NB * XCAP / XB]; // the blocks' scales
#ifndef WEIGHT_Q8_0_SPLIT
shared uint xs2[NB * TC]; // each chunk's sums of q: its first 16's in the low half (int16), its last 16's high
#endif
#if defined(XB_WIDE) && !defined(PREQ)
shared float am[NB * TC]; // each chunk's max|x|; negative when it holds a NaN or an infinity
#endif
#ifdef NORM
const uint SGS = gl_WorkGroupSize.x / 8u + 1u; // room for the subgroups' sums (subgroups of 8 or more)
shared float ssum[NB * SGS]; // each vector's sums of squares, a subgroup's at k * SGS + subgroup
#endif

#ifndef PREQ
#include "include/dotx.glsl"

// storeChunk quantizes a chunk's values val into the tile's chunk sc by
// its block's max magnitude amax (dotxQuantize), and, where the weights
// need them, the sums of its halves' q into xs2.
void storeChunk(uint sc, vec4 val[8], float amax) {
	uint q[8], s2;
	dotxQuantize(val, amax, q, s2);
	[[unroll]] for (uint i = 0u; i < 8u; i++) {
		xq[8u * sc + i] = q[i];
	}
#ifndef WEIGHT_Q8_0_SPLIT
	xs2[sc] = s2;
#endif
}
#endif

// Unit is one 32-weight group of one row as loaded: Q8_0: its 32 int8 in
// lo and hi, its scale's half in dd's low bits; Q4_0: its 16 nibble bytes
// in lo (as the sub-block layout's), its scale's half in dd's low bits;
// the sub-block types: its low-bit words (lo), high-bit words (hi.xy), its
// sub-blocks' scale word (sm: sub-blocks of 32: (sc, m) in its low 16
// bits; of 16: both sub-blocks') and its super-block's d and dmin (dd).
struct Unit {
	uvec4 lo, hi;
	uint sm, dd;
};

// loadUnit is group v of row r (rows counted over the binding).
Unit loadUnit(uint r, uint v) {
	uint g = r * (p.cols / 32u) + v; // the group counted over the binding
	Unit u;
	u.hi = uvec4(0u), u.sm = 0u;
#if defined(WEIGHT_Q8_0_SPLIT)
	u.lo = w4[2u * g], u.hi = w4[2u * g + 1u];
	u.dd = w[(MATS * p.rows * p.cols) / 4u + (g >> 1)] >> ((g & 1u) * 16u);
#elif defined(WEIGHT_Q4_0_SPLIT)
	u.lo = w4[g];
	u.dd = w[(MATS * p.rows * p.cols / 2u) / 4u + (g >> 1)] >> ((g & 1u) * 16u);
#else
	uvec2 hi;
	sbGroupWords(g, u.lo, hi);
	u.hi.xy = hi;
#if SB_SUB == 16
	u.sm = w[sbScales + g * SB_SSTRIDE];
#else
	u.sm = w[sbScales + (g >> 1)] >> ((g & 1u) * 16u);
#endif
	u.dd = w[sbSupers + g / uint(SB_SUPER / 32)];
#endif
	return u;
}

// XUnit is x's part of a group: its 8 words of q (values 4j..4j+3 in a[j]
// for j < 4, b[j-4] after), the sums of each half's q and its block's
// scale.
struct XUnit {
	uvec4 a, b;
	ivec2 s;
	float d;
};

// loadX is the tile's chunk sc of x.
XUnit loadX(uint sc) {
	XUnit x;
	x.a = uvec4(xq[8u * sc], xq[8u * sc + 1u], xq[8u * sc + 2u], xq[8u * sc + 3u]);
	x.b = uvec4(xq[8u * sc + 4u], xq[8u * sc + 5u], xq[8u * sc + 6u], xq[8u * sc + 7u]);
#ifdef WEIGHT_Q8_0_SPLIT
	x.s = ivec2(0);
#else
	int s = int(xs2[sc]);
	x.s = ivec2(bitfieldExtract(s, 0, 16), bitfieldExtract(s, 16, 16));
#endif
	x.d = xd[sc / (XB / 32u)];
	return x;
}

int dot4(uvec4 q, uvec4 x) {
	return sdot4x8(q.x, x.x, 0) + sdot4x8(q.y, x.y, 0) + sdot4x8(q.z, x.z, 0) + sdot4x8(q.w, x.w, 0);
}

// unitDot is a group's part of its row's dot product with x's part x.
float unitDot(Unit u, XUnit x) {
#if defined(WEIGHT_Q8_0_SPLIT)
	int d = dot4(u.lo, x.a) + dot4(u.hi, x.b);
	return float(d) * (unpackHalf2x16(u.dd).x * x.d);
#elif defined(WEIGHT_Q4_0_SPLIT)
	// q + 8 in the nibbles: sum (q - 8) x = sum q x - 8 sum x
	int d = dot4(u.lo & 0x0f0f0f0fu, x.a) + dot4((u.lo >> 4u) & 0x0f0f0f0fu, x.b) - 8 * (x.s.x + x.s.y);
	return float(d) * (unpackHalf2x16(u.dd).x * x.d);
#else
	uvec4 qa, qb;
	sbQuadsOf(u.lo, u.hi.xy, qa, qb);
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

#ifdef PREQ
// quantizeTile copies the tile of chunks c0.. (tc of them) of the NB
// vectors s0.. (past the last vector n-1, n-1 again) from x's quantized
// copy into the shared arrays, and adds each vector's chunks' sums of
// squares to ss[k]: the chunks an invocation takes, and the order it adds
// them in, are the other quantizeTile's, so that the two variants' sums
// are the same.
void quantizeTile(uint s0, uint c0, uint tc, inout float ss[NB]) {
	uint chunks = p.cols / 32u, meta = p.n * (p.cols / 4u), nc = p.n * chunks;
	for (uint i = gl_LocalInvocationID.x; i < NB * tc; i += gl_WorkGroupSize.x) {
		uint k = i / tc, c = i - k * tc;
		uint g = min(s0 + k, p.n - 1u) * chunks + c0 + c; // the chunk counted over the buffer
		uint sc = k * TC + c;
		uvec4 a = xg4[2u * g], b = xg4[2u * g + 1u];
		xq[8u * sc] = a.x, xq[8u * sc + 1u] = a.y, xq[8u * sc + 2u] = a.z, xq[8u * sc + 3u] = a.w;
		xq[8u * sc + 4u] = b.x, xq[8u * sc + 5u] = b.y, xq[8u * sc + 6u] = b.z, xq[8u * sc + 7u] = b.w;
#ifndef WEIGHT_Q8_0_SPLIT
		xs2[sc] = xg[meta + g];
#endif
#ifdef XB_WIDE
		if ((c & 7u) == 0u) {
			xd[sc >> 3] = uintBitsToFloat(xg[meta + nc + g]);
		}
#else
		xd[sc] = uintBitsToFloat(xg[meta + nc + g]);
#endif
#ifdef NORM
		float s = uintBitsToFloat(xg[meta + 2u * nc + g]);
		[[unroll]] for (uint j = 0u; j < NB; j++) {
			ss[j] += j == k ? s : 0.0;
		}
#endif
	}
}
#else
// quantizeTile quantizes the tile of chunks c0.. (tc of them) of the NB
// vectors s0.. (past the last vector n-1, n-1 again: its sums are not
// written) into the shared arrays, and adds each vector's sum of squares
// of its raw values to ss[k] (this invocation's chunks').
void quantizeTile(uint s0, uint c0, uint tc, inout float ss[NB]) {
	uint tid = gl_LocalInvocationID.x;
#ifdef XB_WIDE
	// Each chunk's max, then each block's from its 8 chunks'.
	for (uint i = tid; i < NB * tc; i += gl_WorkGroupSize.x) {
		uint k = i / tc, c = i - k * tc;
		vec4 val[8];
		float s;
		am[k * TC + c] = dotxLoad(min(s0 + k, p.n - 1u), c0 + c, val, s);
		[[unroll]] for (uint j = 0u; j < NB; j++) {
			ss[j] += j == k ? s : 0.0;
		}
	}
	barrier();
	for (uint i = tid; i < NB * tc; i += gl_WorkGroupSize.x) {
		uint k = i / tc, c = i - k * tc;
		vec4 val[8];
		float s, amax = 0.0;
		dotxLoad(min(s0 + k, p.n - 1u), c0 + c, val, s);
		bool bad = false;
		[[unroll]] for (uint b = 0u; b < 8u; b++) {
			float m = am[k * TC + (c & ~7u) + b];
			bad = bad || m < 0.0;
			amax = max(amax, m);
		}
		amax = bad ? -1.0 : amax;
		if ((c & 7u) == 0u) {
			xd[(k * TC + c) >> 3] = dotxScale(amax);
		}
		storeChunk(k * TC + c, val, amax);
	}
#else
	for (uint i = tid; i < NB * tc; i += gl_WorkGroupSize.x) {
		uint k = i / tc, c = i - k * tc;
		vec4 val[8];
		float s;
		float amax = dotxLoad(min(s0 + k, p.n - 1u), c0 + c, val, s);
		[[unroll]] for (uint j = 0u; j < NB; j++) {
			ss[j] += j == k ? s : 0.0;
		}
		xd[k * TC + c] = dotxScale(amax);
		storeChunk(k * TC + c, val, amax);
	}
#endif
}
#endif

void main() {
#ifdef WEIGHT_SUBBLOCK
	sbInit(MATS * p.rows * (p.cols / 32u));
#endif
	uint r0 = (groupIndex() * (gl_WorkGroupSize.x / TPR) + gl_SubgroupID) * RPS;
	uint lane = gl_SubgroupInvocationID, chunks = p.cols / 32u;
	bool walks = r0 < p.rows; // uniform in the subgroup; every invocation quantizes
	uint rowOf[RW];
	[[unroll]] for (uint i = 0u; i < RW; i++) {
		uint r = min(r0 + i % RPS, p.rows - 1u);
		rowOf[i] = i < RPS ? r : r + p.rows;
	}
	for (uint s0 = 0u; s0 < p.n; s0 += NB) {
		float acc[RW * NB], ss[NB];
		[[unroll]] for (uint i = 0u; i < RW * NB; i++) {
			acc[i] = 0.0;
		}
		[[unroll]] for (uint k = 0u; k < NB; k++) {
			ss[k] = 0.0;
		}
		for (uint c0 = 0u; c0 < chunks; c0 += TC) {
			uint tc = min(TC, chunks - c0); // the tile's groups a row
			// The tile's first groups' loads in flight while x is quantized.
			Unit un[UNROLL * RW];
			if (walks) {
				[[unroll]] for (uint m = 0u; m < UNROLL; m++) {
					uint v = c0 + min(lane + m * TPR, tc - 1u);
					[[unroll]] for (uint i = 0u; i < RW; i++) {
						un[m * RW + i] = loadUnit(rowOf[i], v);
					}
				}
			}
			quantizeTile(s0, c0, tc, ss);
			barrier();
			if (walks) {
				for (uint v0 = lane; v0 < tc; v0 += UNROLL * TPR) {
					if (v0 != lane) { // the first step's groups were loaded before the quantization
						[[unroll]] for (uint m = 0u; m < UNROLL; m++) {
							uint v = c0 + min(v0 + m * TPR, tc - 1u);
							[[unroll]] for (uint i = 0u; i < RW; i++) {
								un[m * RW + i] = loadUnit(rowOf[i], v);
							}
						}
					}
					[[unroll]] for (uint m = 0u; m < UNROLL; m++) {
						uint v = v0 + m * TPR;
						if (v >= tc) {
							break;
						}
						[[unroll]] for (uint k = 0u; k < NB; k++) {
							XUnit xu = loadX(k * TC + v);
							[[unroll]] for (uint i = 0u; i < RW; i++) {
								acc[i * NB + k] += unitDot(un[m * RW + i], xu);
							}
						}
					}
				}
			}
			barrier(); // the tile read before the next one is written
		}
#ifdef NORM
		[[unroll]] for (uint k = 0u; k < NB; k++) {
			float t = subgroupAdd(ss[k]);
			if (lane == 0u) {
				ssum[k * SGS + gl_SubgroupID] = t;
			}
		}
		barrier();
#endif
		if (walks) {
			[[unroll]] for (uint k = 0u; k < NB; k++) {
				float inv = 1.0;
#ifdef NORM
				// mod.RMSNorm: inv = 1/sqrt(mean(x^2) + eps), applied to the sums.
				float t = 0.0;
				for (uint s = 0u; s < gl_NumSubgroups; s++) {
					t += ssum[k * SGS + s];
				}
				inv = 1.0 / sqrt(t / float(p.cols) + p.eps);
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
#ifdef NORM
		barrier(); // ssum read before the next pass writes it
#endif
	}
}
