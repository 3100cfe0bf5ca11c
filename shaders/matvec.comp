#version 450
// matvec: y[s][r] = W[r] . x[s] for decode, with W of a weight type of
// shaders.WeightTypes (its define: WEIGHT_F32, WEIGHT_F16, WEIGHT_BF16,
// WEIGHT_Q8_0_SPLIT, WEIGHT_Q4_0_SPLIT, or WEIGHT_SUBBLOCK with its SB_*
// constants for Q4_1, Q5_0, Q5_1 and the K-quants) and x, y in F32.
// Decode reads every weight byte once per token, so this kernel is what
// decides a large model's speed: it must stream W at the device's rate
// (DESIGN.md §6). Hence:
//   - 16-byte loads (uvec4): F32 rows of a multiple of 4 columns, F16 rows of
//     a multiple of 8; other rows (small test shapes) take a scalar path.
//     Q8_0 and Q4_0 are read in the split layout that RepackQ8_0/RepackQ4_0
//     make at upload (matvec.go): all quants first, [rows][cols] int8 or
//     [rows][cols/2] nibble bytes, each block's 32 or 16 bytes 16-aligned,
//     then all scales, [rows][cols/32] f16. ggml's 34- and 18-byte blocks
//     would leave the quants 2-aligned. The other quantized types are read
//     in the sub-block layout (include/subblock.glsl), a group of 32 values
//     at a time: its low-bit words, high-bit words, and a scale per
//     sub-block; a sub-block's sum is scaled once (and, with a min, less
//     dmin*m times the sum of its x).
//   - several rows per workgroup: WG invocations (specialization constant 0)
//     take WG/TPR rows, TPR (constant 1) invocations per row, strided over
//     it (a Q8_0/Q4_0 block, or 16 bytes of F32/F16, at a time).
//   - the row's partial sums are added by subgroupAdd (REDUCE_SUBGROUP: TPR
//     must be the device's subgroup size, and a row is one subgroup) or else
//     by a tree in shared memory with barriers (any TPR, 1 included: on a
//     CPU device an invocation per row runs no barrier at all).
// The row is read once for up to NB vectors at a time (constant 2), so a
// step with a few tokens costs about one pass over the weights. More than
// 65535 workgroups use a 2D grid (groupIndex).
//
// Fusions (DESIGN.md §6: a dispatch and its barrier cost more than a small
// kernel's work on a GPU), each a define:
//   NORM      x is RMSNorm'd first with weight normw (binding 3) and p.eps:
//             y = W (x * inv * normw), inv = 1/sqrt(mean(x^2) + eps), each
//             row group summing x^2 from the x it loads for the dot product
//             anyway, so the rmsnorm dispatch before a matvec goes at the
//             cost of a multiply-add per element.
//   ADD       y += W x: the residual add after the output and down matvecs.
//   SWIGLU    W is gate and up stacked ([2*rows][cols]) and y[r] =
//             silu(gate_r . x) * (up_r . x): the swiglu dispatch goes.
#ifdef REDUCE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#extension GL_EXT_control_flow_attributes : require
#include "include/common.glsl"
#define OP_MATVEC
#include "include/push.glsl"

layout(local_size_x = 64, local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 64; // invocations per row, divides WG

// W and x are each bound once and read through two views: words for the
// scalar paths and the scales, 16-byte vectors for the aligned loads.
layout(std430, binding = 0) readonly buffer Weights { uint w[]; };    // see the layouts above
layout(std430, binding = 0) readonly buffer Weights4 { uvec4 w4[]; };
layout(std430, binding = 0) readonly buffer Weights2 { uvec2 w2[]; };
layout(std430, binding = 1) readonly buffer X { float x[]; };         // [n][cols]
layout(std430, binding = 1) readonly buffer X4 { vec4 x4[]; };
#ifdef ADD
layout(std430, binding = 2) buffer Y { float y[]; };                  // [n][rows], added to
#else
layout(std430, binding = 2) writeonly buffer Y { float y[]; };        // [n][rows]
#endif
#ifdef NORM
layout(std430, binding = 3) readonly buffer NormW { float nw[]; };    // [cols] RMSNorm weight
layout(std430, binding = 3) readonly buffer NormW4 { vec4 nw4[]; };
#endif

#ifdef SWIGLU
const uint MATS = 2u; // gate and up, stacked
#else
const uint MATS = 1u;
#endif

#include "include/weights.glsl"
#ifdef WEIGHT_SUBBLOCK
#define SB_WIDE // w2 and w4 are bound: sbRowsDot2
#include "include/subblock.glsl"
#endif

// Vectors per pass over the row (constant 2). A pass costs NB loads of x per
// weight even when fewer vectors are left, so decode (n = 1) wants NB = 1.
layout(constant_id = 2) const uint NB = 1;

// Rows per invocation (constant 3, with TPR = 1 and the shared-memory
// reduction only): 1, or RPI rows an invocation. For the sub-block types
// unfused or with ADD (a CPU device's decode, Profile.Matvec) the RPI rows
// are walked together (rowsPass), so that each load of x and each sum of x
// per sub-block serves RPI rows; other variants walk them one by one. On
// lavapipe an SSBO load is a walk over the SIMD lanes, a scalar load and a
// bounds check a lane and component, even where every lane reads the same
// x: loaded once a row, x took about 70% of a 4-bit matvec's time. Q2_K's
// and Q3_K's walk unrolls its loops over the RPI rows ([[unroll]]: NIR
// would not at 16 rows), so that acc and dd are registers, not arrays
// indexed at run time.
layout(constant_id = 3) const uint RPI = 1;

#ifndef REDUCE_SUBGROUP
shared float partial[NB * gl_WorkGroupSize.x];
#endif

// i8x4 is the 4 signed bytes of v, low byte first.
vec4 i8x4(uint v) {
	return vec4(ivec4(uvec4(v) << uvec4(24u, 16u, 8u, 0u)) >> 24);
}

// scaleAt is the f16 scale of block b (counted over the whole matrix) in a
// split layout whose scales start at byte `at` (a multiple of 4).
float scaleAt(uint at, uint b) {
	return unpackHalf2x16(w[(at >> 2) + (b >> 1)] >> ((b & 1u) * 16u)).x;
}

// X4(k, c) is elements 4c..4c+3 of vector k (at element offset xs[k], a
// multiple of 4, in accumulate), times the RMSNorm weight under NORM (the
// 1/rms is applied to the sum); X(k, j) is element j. Under NORM they also
// add the squares of the raw elements to ss[k] while wantSS: a row's
// invocations load every element of x exactly once, so their sums of ss
// make mean(x^2) with no second walk over x.
#ifdef NORM
float ss[NB];
bool wantSS = false;
vec4 loadX4(uint k, uint xs, uint c) {
	vec4 v = x4[xs / 4u + c];
	if (wantSS) {
		ss[k] += dot(v, v);
	}
	return v * nw4[c];
}
float loadX(uint k, uint xs, uint j) {
	float v = x[xs + j];
	if (wantSS) {
		ss[k] += v * v;
	}
	return v * nw[j];
}
#define X4(k, c) loadX4(k, xs[k], c)
#define X(k, j) loadX(k, xs[k], j)
#else
#define X4(k, c) x4[xs[k] / 4u + (c)]
#define X(k, j) x[xs[k] + (j)]
#endif

// accumulate adds to acc[k] the partial dot product of this invocation's
// part of row r with x[s0 + k] (k < NB; vectors past n repeat the last one
// and their sums are discarded).
void accumulate(uint r, uint s0, uint lane, inout float acc[NB]) {
	uint xs[NB]; // element offset of each vector
	for (uint k = 0u; k < NB; k++) {
		xs[k] = min(s0 + k, p.n - 1u) * p.cols;
	}
#if defined(WEIGHT_F32)
	if ((p.cols & 3u) == 0u) { // rows and x start on 16 bytes
		uint c4 = p.cols / 4u, base = r * c4;
		for (uint j = lane; j < c4; j += TPR) {
			vec4 wv = uintBitsToFloat(w4[base + j]);
			for (uint k = 0u; k < NB; k++) {
				acc[k] += dot(wv, X4(k, j));
			}
		}
	} else {
		uint base = r * p.cols;
		for (uint j = lane; j < p.cols; j += TPR) {
			float wv = loadF32(base + j);
			for (uint k = 0u; k < NB; k++) {
				acc[k] += wv * X(k, j);
			}
		}
	}
#elif defined(WEIGHT_F16) || defined(WEIGHT_BF16)
#ifdef WEIGHT_BF16
#define UNPACK2(u) unpackBF16x2(u)
#define LOAD1(e) loadBF16(e)
#else
#define UNPACK2(u) unpackHalf2x16(u)
#define LOAD1(e) loadF16(e)
#endif
	if ((p.cols & 7u) == 0u) { // 8 halves in 16 bytes
		uint c8 = p.cols / 8u, base = r * c8;
		for (uint j = lane; j < c8; j += TPR) {
			uvec4 u = w4[base + j];
			vec4 lo = vec4(UNPACK2(u.x), UNPACK2(u.y));
			vec4 hi = vec4(UNPACK2(u.z), UNPACK2(u.w));
			for (uint k = 0u; k < NB; k++) {
				acc[k] += dot(lo, X4(k, 2u * j)) + dot(hi, X4(k, 2u * j + 1u));
			}
		}
	} else {
		uint base = r * p.cols;
		for (uint j = lane; j < p.cols; j += TPR) {
			float wv = LOAD1(base + j);
			for (uint k = 0u; k < NB; k++) {
				acc[k] += wv * X(k, j);
			}
		}
	}
#elif defined(WEIGHT_Q8_0_SPLIT)
	// Block b of row r: quants w4[2(r*blocks+b)], w4[2(r*blocks+b)+1].
	uint blocks = p.cols / 32u;
	uint scales = MATS * p.rows * p.cols; // byte offset of the scales
	for (uint b = lane; b < blocks; b += TPR) {
		uint blk = r * blocks + b;
		uvec4 q0 = w4[2u * blk], q1 = w4[2u * blk + 1u];
		float d = scaleAt(scales, blk);
		for (uint k = 0u; k < NB; k++) {
			uint c = 8u * b; // the block's first vec4 of x
			float s = dot(i8x4(q0.x), X4(k, c)) + dot(i8x4(q0.y), X4(k, c + 1u)) +
				dot(i8x4(q0.z), X4(k, c + 2u)) + dot(i8x4(q0.w), X4(k, c + 3u)) +
				dot(i8x4(q1.x), X4(k, c + 4u)) + dot(i8x4(q1.y), X4(k, c + 5u)) +
				dot(i8x4(q1.z), X4(k, c + 6u)) + dot(i8x4(q1.w), X4(k, c + 7u));
			acc[k] += d * s;
		}
	}
#elif defined(WEIGHT_Q4_0_SPLIT)
	// Block b of row r: 16 bytes w4[r*blocks+b]; byte i holds element i in its
	// low nibble and element i+16 in its high one, each stored as q+8.
	uint blocks = p.cols / 32u;
	uint scales = MATS * p.rows * p.cols / 2u;
	for (uint b = lane; b < blocks; b += TPR) {
		uint blk = r * blocks + b;
		uvec4 q = w4[blk];
		float d = scaleAt(scales, blk);
		vec4 lo[4], hi[4];
		for (uint i = 0u; i < 4u; i++) {
			uvec4 v = uvec4(q[i]);
			lo[i] = vec4((v >> uvec4(0u, 8u, 16u, 24u)) & 15u) - 8.0;
			hi[i] = vec4((v >> uvec4(4u, 12u, 20u, 28u)) & 15u) - 8.0;
		}
		for (uint k = 0u; k < NB; k++) {
			uint c = 8u * b;
			float s = 0.0;
			for (uint i = 0u; i < 4u; i++) {
				s += dot(lo[i], X4(k, c + i)) + dot(hi[i], X4(k, c + 4u + i));
			}
			acc[k] += d * s;
		}
	}
#elif defined(WEIGHT_SUBBLOCK)
	uint groups = p.cols / 32u;
	for (uint b = lane; b < groups; b += TPR) {
		for (uint k = 0u; k < NB; k++) {
			uint c = 8u * b; // the group's first vec4 of x
			vec4 x0 = X4(k, c), x1 = X4(k, c + 1u), x2 = X4(k, c + 2u), x3 = X4(k, c + 3u);
			vec4 x4_ = X4(k, c + 4u), x5 = X4(k, c + 5u), x6 = X4(k, c + 6u), x7 = X4(k, c + 7u);
			acc[k] += sbGroupDot(r * groups + b, x0, x1, x2, x3, x4_, x5, x6, x7, sbXSums(x0, x1, x2, x3, x4_, x5, x6, x7));
		}
	}
#else
#error "define a weight type: WEIGHT_F32, WEIGHT_F16, WEIGHT_BF16, WEIGHT_Q8_0_SPLIT, WEIGHT_Q4_0_SPLIT, WEIGHT_SUBBLOCK"
#endif
}

// rowSum adds v[k] over the row's TPR invocations; every invocation of the
// row gets the sums. The shared-memory variant holds barriers: every
// invocation of the workgroup must call it.
#ifdef REDUCE_SUBGROUP
void rowSum(inout float v[NB], uint tid, uint lane) {
	for (uint k = 0u; k < NB; k++) {
		v[k] = subgroupAdd(v[k]);
	}
}
#else
void rowSum(inout float v[NB], uint tid, uint lane) {
	const uint WG = gl_WorkGroupSize.x;
	if (TPR == 1u) {
		return;
	}
	for (uint k = 0u; k < NB; k++) {
		partial[k * WG + tid] = v[k];
	}
	barrier();
	// Tree sum over the row's invocations, any TPR: fold the upper part
	// onto the lower.
	for (uint width = TPR; width > 1u;) {
		uint half_ = (width + 1u) / 2u;
		if (lane < width - half_) {
			for (uint k = 0u; k < NB; k++) {
				partial[k * WG + tid] += partial[k * WG + tid + half_];
			}
		}
		width = half_;
		barrier();
	}
	for (uint k = 0u; k < NB; k++) {
		v[k] = partial[k * WG + tid - lane];
	}
	barrier(); // partial is reused by the next sum
}
#endif

// rowPass computes y for row r of vectors s0..s0+NB-1 (the live ones).
void rowPass(uint r, uint s0, uint tid, uint lane, bool live) {
	float acc[NB];
	for (uint k = 0u; k < NB; k++) {
		acc[k] = 0.0;
	}
#ifdef NORM
	for (uint k = 0u; k < NB; k++) {
		ss[k] = 0.0;
	}
	wantSS = true; // the first walk over x sums its squares
#endif
	accumulate(r, s0, lane, acc);
#ifdef NORM
	wantSS = false;
#endif
	rowSum(acc, tid, lane);
#ifdef SWIGLU
	float up[NB];
	for (uint k = 0u; k < NB; k++) {
		up[k] = 0.0;
	}
	accumulate(r + p.rows, s0, lane, up);
	rowSum(up, tid, lane);
#endif
#ifdef NORM
	// mod.RMSNorm: inv = 1/sqrt(mean(x^2) + eps), applied to the sum.
	rowSum(ss, tid, lane);
	for (uint k = 0u; k < NB; k++) {
		float inv = 1.0 / sqrt(ss[k] / float(p.cols) + p.eps);
		acc[k] *= inv;
#ifdef SWIGLU
		up[k] *= inv;
#endif
	}
#endif
	if (live && lane == 0u) {
		for (uint k = 0u; k < NB && s0 + k < p.n; k++) {
			uint at = (s0 + k) * p.rows + r;
#if defined(SWIGLU)
			float g = acc[k];
			y[at] = g / (1.0 + exp(-g)) * up[k];
#elif defined(ADD)
			y[at] = y[at] + acc[k];
#else
			y[at] = acc[k];
#endif
		}
	}
}

#if defined(WEIGHT_SUBBLOCK) && !defined(NORM)
#if SB_BITS < 4
// rowsGroups adds to acc[i] row r0+i's dot product (rows past the last
// compute row rows-1 again) with groups b and b+1 (b even) of the vector
// whose first vec4 is at xs, for the RPI rows at once: the groups' x is
// loaded, summed per sub-block and prepared (sbRowsX) once for them all,
// and each row's weights read by sbRowsDot2's wide loads. dd[i] is the (d,
// dmin) of row i's super-block.
void rowsGroups(uint r0, uint xs, uint b, vec2 dd[RPI], inout float acc[RPI]) {
	uint groups = p.cols / 32u, c = xs + 8u * b;
	vec4 x0 = x4[c], x1 = x4[c + 1u], x2 = x4[c + 2u], x3 = x4[c + 3u];
	vec4 x4_ = x4[c + 4u], x5 = x4[c + 5u], x6 = x4[c + 6u], x7 = x4[c + 7u];
	vec4 z0 = x4[c + 8u], z1 = x4[c + 9u], z2 = x4[c + 10u], z3 = x4[c + 11u];
	vec4 z4 = x4[c + 12u], z5 = x4[c + 13u], z6 = x4[c + 14u], z7 = x4[c + 15u];
	vec2 sums = sbXSums(x0, x1, x2, x3, x4_, x5, x6, x7), sumz = sbXSums(z0, z1, z2, z3, z4, z5, z6, z7);
	sbRowsX(x0, x1, x2, x3, x4_, x5, x6, x7);
	sbRowsX(z0, z1, z2, z3, z4, z5, z6, z7);
	[[unroll]] for (uint i = 0u; i < RPI; i++) {
		uint r = min(r0 + i, p.rows - 1u);
		acc[i] += sbRowsDot2(r * groups + b, x0, x1, x2, x3, x4_, x5, x6, x7,
			z0, z1, z2, z3, z4, z5, z6, z7, sums, sumz, dd[i]);
	}
}

// rowsPass computes y for rows r0..r0+RPI-1 (those below p.rows; the others
// compute row rows-1 again and drop it) of vectors s0..s0+NB-1, alone (TPR
// = 1), two groups at a time for all RPI rows (rowsGroups), each row's
// super-block scales loaded once for its groups. (Q2_K and Q3_K.)
void rowsPass(uint r0, uint s0) {
	const uint GPS = uint(SB_SUPER) / 32u; // groups a super-block
	uint groups = p.cols / 32u;
	for (uint k = 0u; k < NB && s0 + k < p.n; k++) {
		uint xs = (s0 + k) * (p.cols / 4u); // the vector's first vec4
		float acc[RPI];
		[[unroll]] for (uint i = 0u; i < RPI; i++) {
			acc[i] = 0.0;
		}
		for (uint b0 = 0u; b0 < groups; b0 += GPS) {
			vec2 dd[RPI];
			[[unroll]] for (uint i = 0u; i < RPI; i++) {
				dd[i] = sbSuper(min(r0 + i, p.rows - 1u) * groups + b0);
			}
			for (uint j = 0u; j < GPS; j += 2u) {
				rowsGroups(r0, xs, b0 + j, dd, acc);
			}
		}
		[[unroll]] for (uint i = 0u; i < RPI && r0 + i < p.rows; i++) {
			uint at = (s0 + k) * p.rows + r0 + i;
#ifdef ADD
			y[at] = y[at] + acc[i];
#else
			y[at] = acc[i];
#endif
		}
	}
}
#else
// rowsPass computes y for rows r0..r0+RPI-1 (those below p.rows; the others
// compute row rows-1 again and drop it) of vectors s0..s0+NB-1, alone (TPR
// = 1): each group of x is loaded, and summed per sub-block, once for the
// RPI rows.
void rowsPass(uint r0, uint s0) {
	uint groups = p.cols / 32u;
	for (uint k = 0u; k < NB && s0 + k < p.n; k++) {
		uint xs = (s0 + k) * (p.cols / 4u); // the vector's first vec4
		float acc[RPI];
		for (uint i = 0u; i < RPI; i++) {
			acc[i] = 0.0;
		}
		for (uint b = 0u; b < groups; b++) {
			uint c = xs + 8u * b;
			vec4 x0 = x4[c], x1 = x4[c + 1u], x2 = x4[c + 2u], x3 = x4[c + 3u];
			vec4 x4_ = x4[c + 4u], x5 = x4[c + 5u], x6 = x4[c + 6u], x7 = x4[c + 7u];
			vec2 sums = sbXSums(x0, x1, x2, x3, x4_, x5, x6, x7);
			for (uint i = 0u; i < RPI; i++) {
				uint r = min(r0 + i, p.rows - 1u);
				acc[i] += sbGroupDot(r * groups + b, x0, x1, x2, x3, x4_, x5, x6, x7, sums);
			}
		}
		for (uint i = 0u; i < RPI && r0 + i < p.rows; i++) {
			uint at = (s0 + k) * p.rows + r0 + i;
#ifdef ADD
			y[at] = y[at] + acc[i];
#else
			y[at] = acc[i];
#endif
		}
	}
}
#endif
#endif

#ifdef WEIGHT_Q8_0_SPLIT
// q8Dot is block blk's dot product with the 8 vec4 of x x0..x7.
float q8Dot(uint scales, uint blk, vec4 x0, vec4 x1, vec4 x2, vec4 x3, vec4 x4_, vec4 x5, vec4 x6, vec4 x7) {
	uvec4 q0 = w4[2u * blk], q1 = w4[2u * blk + 1u];
	float s = dot(i8x4(q0.x), x0) + dot(i8x4(q0.y), x1) + dot(i8x4(q0.z), x2) + dot(i8x4(q0.w), x3) +
		dot(i8x4(q1.x), x4_) + dot(i8x4(q1.y), x5) + dot(i8x4(q1.z), x6) + dot(i8x4(q1.w), x7);
	return scaleAt(scales, blk) * s;
}

// rowsPass (Q8_0, every fusion) computes y for rows r0..r0+RPI-1 (those
// below p.rows; the others compute row rows-1 again and drop it) of
// vectors s0..s0+NB-1, alone (TPR = 1), a vector at a time: each vec4 of x
// is loaded once for the RPI rows (and their up rows under SWIGLU). On
// lavapipe the loads of x are most of a Q8_0 matvec's time (8 vec4 of x to
// 2 of quants a block), so that the step runner's steps of up to 8 rows
// (NB vectors a pass) cost about as many loads as a row each without it
// (BenchmarkMatvecVectors). Under NORM the walk sums x^2 from the x it
// loads and scales x by the norm weight; 1/rms is applied to the sums.
void rowsPass(uint r0, uint s0) {
	uint blocks = p.cols / 32u;
	uint scales = MATS * p.rows * p.cols; // byte offset of the scales
	for (uint k = 0u; k < NB && s0 + k < p.n; k++) {
		uint xs = (s0 + k) * (p.cols / 4u); // the vector's first vec4
		float acc[RPI];
#ifdef SWIGLU
		float up[RPI];
#endif
		[[unroll]] for (uint i = 0u; i < RPI; i++) {
			acc[i] = 0.0;
#ifdef SWIGLU
			up[i] = 0.0;
#endif
		}
		float sq = 0.0;
		for (uint b = 0u; b < blocks; b++) {
			uint c = xs + 8u * b;
			vec4 x0 = x4[c], x1 = x4[c + 1u], x2 = x4[c + 2u], x3 = x4[c + 3u];
			vec4 x4_ = x4[c + 4u], x5 = x4[c + 5u], x6 = x4[c + 6u], x7 = x4[c + 7u];
#ifdef NORM
			sq += dot(x0, x0) + dot(x1, x1) + dot(x2, x2) + dot(x3, x3) + dot(x4_, x4_) + dot(x5, x5) + dot(x6, x6) + dot(x7, x7);
			uint n4 = 8u * b;
			x0 *= nw4[n4];
			x1 *= nw4[n4 + 1u];
			x2 *= nw4[n4 + 2u];
			x3 *= nw4[n4 + 3u];
			x4_ *= nw4[n4 + 4u];
			x5 *= nw4[n4 + 5u];
			x6 *= nw4[n4 + 6u];
			x7 *= nw4[n4 + 7u];
#endif
			[[unroll]] for (uint i = 0u; i < RPI; i++) {
				uint r = min(r0 + i, p.rows - 1u);
				acc[i] += q8Dot(scales, r * blocks + b, x0, x1, x2, x3, x4_, x5, x6, x7);
#ifdef SWIGLU
				up[i] += q8Dot(scales, (r + p.rows) * blocks + b, x0, x1, x2, x3, x4_, x5, x6, x7);
#endif
			}
		}
#ifdef NORM
		// mod.RMSNorm: inv = 1/sqrt(mean(x^2) + eps), applied to the sum.
		float inv = 1.0 / sqrt(sq / float(p.cols) + p.eps);
#endif
		[[unroll]] for (uint i = 0u; i < RPI && r0 + i < p.rows; i++) {
			uint at = (s0 + k) * p.rows + r0 + i;
#ifdef NORM
			acc[i] *= inv;
#endif
#if defined(SWIGLU)
			float g = acc[i];
			y[at] = g / (1.0 + exp(-g)) * (up[i] * inv);
#elif defined(ADD)
			y[at] = y[at] + acc[i];
#else
			y[at] = acc[i];
#endif
		}
	}
}
#endif

#ifdef REDUCE_SUBGROUP
// A row is one subgroup (TPR = gl_SubgroupSize, which the host takes from the
// device's subgroup size): no shared memory, no barrier, and a surplus
// subgroup past the last row leaves at once.
void main() {
#ifdef WEIGHT_SUBBLOCK
	sbInit(MATS * p.rows * (p.cols / 32u));
#endif
	uint r = groupIndex() * (gl_WorkGroupSize.x / TPR) + gl_SubgroupID;
	if (r >= p.rows) {
		return;
	}
	for (uint s0 = 0u; s0 < p.n; s0 += NB) {
		rowPass(r, s0, 0u, gl_SubgroupInvocationID, true);
	}
}
#else
void main() {
#ifdef WEIGHT_SUBBLOCK
	sbInit(MATS * p.rows * (p.cols / 32u));
#endif
	const uint WG = gl_WorkGroupSize.x;
	uint tid = gl_LocalInvocationID.x;
	if (RPI > 1u) { // TPR = 1: no barriers
		uint r0 = (groupIndex() * WG + tid) * RPI;
		for (uint s0 = 0u; s0 < p.n; s0 += NB) {
#if (defined(WEIGHT_SUBBLOCK) && !defined(NORM)) || defined(WEIGHT_Q8_0_SPLIT)
			rowsPass(r0, s0);
#else
			// Other types and fusions: the rows one after the other (correct,
			// and no faster: Profile.Matvec does not choose it).
			for (uint i = 0u; i < RPI; i++) {
				rowPass(min(r0 + i, p.rows - 1u), s0, tid, 0u, r0 + i < p.rows);
			}
#endif
		}
		return;
	}
	uint lane = tid % TPR;
	uint r = groupIndex() * (WG / TPR) + tid / TPR;
	// Invocations past the last row compute row rows-1 again and drop it, so
	// every invocation reaches every barrier.
	bool live = r < p.rows;
	r = min(r, p.rows - 1u);
	for (uint s0 = 0u; s0 < p.n; s0 += NB) {
		rowPass(r, s0, tid, lane, live);
	}
}
#endif
