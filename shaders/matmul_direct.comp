#version 450
// matmul_direct: Y[s][yOff + r] = W[r] . X[s] for r < rows, s < n, on
// tensor cores (VK_NV_cooperative_matrix, f16 x f16 -> f32, 16x16x16),
// each subgroup loading its 16x16 tiles straight from memory: no shared
// staging, no barriers in the loop. W and X come as planes of halves
// (planes.comp: [rowsP][colsP], zero padded to whole tiles), made by one
// pass over each matrix, where matmul_coop.comp dequantizes, converts and
// stages every value again in each workgroup that reads it, behind two
// barriers a step (docs/matmul-cost.md: the H200 ran that kernel at a
// near-constant ~2 us a step, whatever the type and the load).
//
// A workgroup owns BM tokens by BN rows; each of its subgroups a block of
// WM tokens by WN rows, (WM/16) x (WN/16) accumulators. Along K it walks
// 32 columns an iteration in two halves: the second half's tiles load while
// the first half's are multiplied, and the next iteration's first half
// while the second's are (the loads of one half in flight behind the
// products of the other). X's rows are the A operand (row-major), W's rows
// B's columns (B = W^T, column-major): every tile is 16 rows of 32
// contiguous bytes. The subgroups of a workgroup read the same tiles of X
// (those along the rows) or of W (those along the tokens) at about the same
// time, so the repeats come from L1.
//
// DIRECT_HILO keeps f32's precision as matmul_coop's COOP_HILO does: both
// operands as a high and a low half (planes.comp's PLANES_HILO), three
// products a tile, Xlo.Whi + Xhi.Wlo + Xhi.Whi (the small ones first), or
// two where W has no lo plane (p.wLo == 0: F16 weights are their own hi).
// Without it one product of the high halves (llama.cpp's arithmetic).
//
// EMULATE_COOPMAT does the same product in plain arithmetic (each
// invocation of a group of 32 holds the 8 accumulators of a 16x16 tile
// that the final write reads back, as matmul_coop's emulation), reading
// the planes as words: lavapipe runs it, so CI checks the planes'
// indexing, padding and the edges against the CPU; only coopMatLoadNV and
// coopMatMulAddNV are left to a GPU (the benchmark validates before it
// times).
//
// With kSplit set, workgroup z walks columns [z kSplit, (z+1) kSplit) of
// K only and writes its partial sums to y = [splits][n][rows] (ldy and
// yOff unused), which splitk_reduce sums in order, as matmul.comp's
// split-K: at a few token tiles the grid is too small to fill a GPU
// (Profile.MatmulDirectSplit).
//
// Specialization constants (MatmulDirectSpec.Constants): 0 WG = 32 *
// (BM/WM) * (BN/WN), 1 BM, 2 BN, 3 WM, 4 WN (WM, WN multiples of 16).
// Dispatch MatmulDirectGroups(rows, n, spec); the planes' rowsP and nP are
// multiples of BN and BM (MatmulDirectSpec.Pad), colsP of 32.
#include "include/common.glsl"
#extension GL_EXT_control_flow_attributes : require
#ifndef EMULATE_COOPMAT
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#endif
#define OP_MATMUL_DIRECT
#include "include/push_direct.glsl"

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 64;  // tokens per workgroup
layout(constant_id = 2) const uint BN = 128; // rows per workgroup
layout(constant_id = 3) const uint WM = 32;  // tokens per subgroup, a multiple of 16
layout(constant_id = 4) const uint WN = 64;  // rows per subgroup, a multiple of 16

#ifdef EMULATE_COOPMAT
layout(std430, binding = 0) readonly buffer W { uint wd[]; }; // planes, two halves a word
layout(std430, binding = 1) readonly buffer X { uint xd[]; };
#else
layout(std430, binding = 0) readonly buffer W { uvec4 wq[]; }; // planes, eight halves a uvec4
layout(std430, binding = 1) readonly buffer X { uvec4 xq[]; };
#endif
layout(std430, binding = 2) writeonly buffer Y { float y[]; }; // [n][ldy]

const uint TI = WM / 16u;               // tiles per subgroup across tokens
const uint TJ = WN / 16u;               // tiles per subgroup across rows
const uint SGN = BN / WN;               // subgroups across the rows
const uint NSG = (BM / WM) * (BN / WN); // subgroups per workgroup

shared float cs[NSG * 256u]; // a 16x16 f32 tile per subgroup, row-major [token][row]

#ifdef EMULATE_COOPMAT
// half h of a plane binding, as the f32 it is exactly.
float halfW(uint h) {
	return unpackHalf2x16(wd[h >> 1])[h & 1u];
}

float halfX(uint h) {
	return unpackHalf2x16(xd[h >> 1])[h & 1u];
}
#endif

void main() {
	uint tid = gl_LocalInvocationID.x;
#ifdef EMULATE_COOPMAT
	uint sg = tid / 32u, lane = tid % 32u;
#else
	uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
#endif
	uint sgM = sg / SGN, sgN = sg % SGN;
	uint r0 = gl_WorkGroupID.x * BN + sgN * WN; // this subgroup's first row
	uint s0 = gl_WorkGroupID.y * BM + sgM * WM; // and first token
	uint m = lane / 2u, nc = (lane % 2u) * 8u;  // the tile element a lane writes: row m, columns nc ..
	uint k0 = 0u, k1 = p.colsP;                 // the columns this workgroup walks
	if (p.kSplit != 0u) {
		k0 = gl_WorkGroupID.z * p.kSplit;
		k1 = min(p.colsP, k0 + p.kSplit);
	}

#ifdef EMULATE_COOPMAT
	float acc[TI * TJ * 8u];
	for (uint i = 0u; i < TI * TJ * 8u; i++) {
		acc[i] = 0.0;
	}
#ifdef DIRECT_HILO
	uint xLo = 8u * p.xLo, wLo = 8u * p.wLo; // in halves
#endif
	for (uint k = k0; k < k1; k++) {
		[[unroll]] for (uint ti = 0u; ti < TI; ti++) {
			uint a = (s0 + 16u * ti + m) * p.colsP + k;
			float xh = halfX(a);
#ifdef DIRECT_HILO
			float xl = halfX(xLo + a);
#endif
			[[unroll]] for (uint tj = 0u; tj < TJ; tj++) {
				for (uint e = 0u; e < 8u; e++) {
					uint b = (r0 + 16u * tj + nc + e) * p.colsP + k;
					float wh = halfW(b);
#ifdef DIRECT_HILO
					float small = xl * wh;
					if (p.wLo != 0u) {
						small += xh * halfW(wLo + b);
					}
					acc[(ti * TJ + tj) * 8u + e] += xh * wh + small;
#else
					acc[(ti * TJ + tj) * 8u + e] += xh * wh;
#endif
				}
			}
		}
	}
#else
	uint str = p.colsP / 8u; // a plane row in uvec4s
	fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[TI * TJ];
	[[unroll]] for (uint i = 0u; i < TI * TJ; i++) {
		acc[i] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
	}
	// Two sets of tiles: set 0 at columns k, set 1 at k + 16.
	fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> ah0[TI], ah1[TI], bh0[TJ], bh1[TJ];
#ifdef DIRECT_HILO
	fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> al0[TI], al1[TI], bl0[TJ], bl1[TJ];
	bool wlo = p.wLo != 0u;
#endif
// LOAD(set, k): set's tiles at column k (k / 8 in uvec4s).
#ifdef DIRECT_HILO
#define LOAD(S, K) \
	[[unroll]] for (uint ti = 0u; ti < TI; ti++) { \
		uint a = (s0 + 16u * ti) * str + (K) / 8u; \
		coopMatLoadNV(ah##S[ti], xq, a, str, false); \
		coopMatLoadNV(al##S[ti], xq, p.xLo + a, str, false); \
	} \
	[[unroll]] for (uint tj = 0u; tj < TJ; tj++) { \
		uint b = (r0 + 16u * tj) * str + (K) / 8u; \
		coopMatLoadNV(bh##S[tj], wq, b, str, true); \
		if (wlo) { \
			coopMatLoadNV(bl##S[tj], wq, p.wLo + b, str, true); \
		} \
	}
#define MULTIPLY(S) \
	[[unroll]] for (uint ti = 0u; ti < TI; ti++) { \
		[[unroll]] for (uint tj = 0u; tj < TJ; tj++) { \
			acc[ti * TJ + tj] = coopMatMulAddNV(al##S[ti], bh##S[tj], acc[ti * TJ + tj]); \
		} \
	} \
	if (wlo) { \
		[[unroll]] for (uint ti = 0u; ti < TI; ti++) { \
			[[unroll]] for (uint tj = 0u; tj < TJ; tj++) { \
				acc[ti * TJ + tj] = coopMatMulAddNV(ah##S[ti], bl##S[tj], acc[ti * TJ + tj]); \
			} \
		} \
	} \
	[[unroll]] for (uint ti = 0u; ti < TI; ti++) { \
		[[unroll]] for (uint tj = 0u; tj < TJ; tj++) { \
			acc[ti * TJ + tj] = coopMatMulAddNV(ah##S[ti], bh##S[tj], acc[ti * TJ + tj]); \
		} \
	}
#else
#define LOAD(S, K) \
	[[unroll]] for (uint ti = 0u; ti < TI; ti++) { \
		coopMatLoadNV(ah##S[ti], xq, (s0 + 16u * ti) * str + (K) / 8u, str, false); \
	} \
	[[unroll]] for (uint tj = 0u; tj < TJ; tj++) { \
		coopMatLoadNV(bh##S[tj], wq, (r0 + 16u * tj) * str + (K) / 8u, str, true); \
	}
#define MULTIPLY(S) \
	[[unroll]] for (uint ti = 0u; ti < TI; ti++) { \
		[[unroll]] for (uint tj = 0u; tj < TJ; tj++) { \
			acc[ti * TJ + tj] = coopMatMulAddNV(ah##S[ti], bh##S[tj], acc[ti * TJ + tj]); \
		} \
	}
#endif
	LOAD(0, k0)
	for (uint k = k0; k < k1; k += 32u) {
		LOAD(1, k + 16u)
		MULTIPLY(0)
		if (k + 32u < k1) {
			LOAD(0, k + 32u)
		}
		MULTIPLY(1)
	}
#endif

	// Each tile through the subgroup's scratch: lane reads row m, columns
	// nc .. nc+8 (what the emulation's lane holds).
	[[unroll]] for (uint ti = 0u; ti < TI; ti++) {
		[[unroll]] for (uint tj = 0u; tj < TJ; tj++) {
#ifdef EMULATE_COOPMAT
			for (uint e = 0u; e < 8u; e++) {
				cs[sg * 256u + m * 16u + nc + e] = acc[(ti * TJ + tj) * 8u + e];
			}
#else
			coopMatStoreNV(acc[ti * TJ + tj], cs, sg * 256u, 16u, false);
			subgroupMemoryBarrierShared();
			subgroupBarrier();
#endif
			uint s = s0 + 16u * ti + m;
			// [n][ldy] from yOff, or slice z's [n][rows] partial sums
			uint at = p.kSplit != 0u ? (gl_WorkGroupID.z * p.n + s) * p.rows : s * p.ldy + p.yOff;
			for (uint e = 0u; e < 8u; e++) {
				uint r = r0 + 16u * tj + nc + e;
				if (s < p.n && r < p.rows) {
					y[at + r] = cs[sg * 256u + m * 16u + nc + e];
				}
			}
#ifndef EMULATE_COOPMAT
			subgroupBarrier(); // read before the next tile's store
#endif
		}
	}
}
