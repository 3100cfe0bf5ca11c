#version 450
// matmul_coop: matmul.comp's product (Y[s][yOff + r] = W[wRow0 + r] . X[s]
// for r < rows, s < n; the same bindings, push constants and weight
// layouts) with the tile product on tensor cores: VK_NV_cooperative_matrix,
// or under COOPMAT_KHR VK_KHR_cooperative_matrix (include/coopmat.glsl),
// f16 x f16 -> f32 in 16x16x16 steps, a subgroup of 32 per block of
// WM tokens by WN rows.
//
// A workgroup owns BM tokens by BN rows and walks the columns BK at a time.
// Each step it stages the BM x BK slice of X and the BN x BK slice of W
// (dequantized once by loadWeightQuad) in shared memory as f16, row by row
// with BKP = BK + 8 elements a row (16-byte aligned rows, as the
// cooperative loads need, and not a multiple of the banks). Between two
// barriers every subgroup multiplies its (WM/16) x (WN/16) 16x16 tiles:
// X's rows are the A operand (row-major), W's rows B's columns (B = W^T,
// column-major). At the end each tile goes through shared memory (a 16x16
// f32 scratch per subgroup) to Y, where tokens and rows past n and rows
// are dropped: n, rows and cols need not be multiples of the tile.
//
// EMULATE_COOPMAT does the same with the tile product in plain arithmetic
// over the same shared tiles: the staged values are still rounded to f16,
// each invocation of a group of 32 (a "subgroup" by its index, whatever the
// device's subgroups) holds the 8 accumulators of a 16x16 tile that the
// final write reads back (row lane/2, columns (lane%2)*8 .. +8), and the
// sums run in f32 as the tensor cores' do. It needs no optional feature, so
// lavapipe runs it: the staging, indexing and edges are tested in CI
// against the CPU, and only coopMatMulAddNV itself is left to the device
// (the engine's self-check and the GPU benchmark).
//
// Precision: X and the decoded W are rounded to f16 (a relative error of
// 2^-11 each with round-to-nearest), summed in f32. Values past f16's range
// (65504) would overflow: weights never come near it, and activations of
// the models modrun runs stay far below it (llama.cpp's tensor-core path
// makes the same conversion).
//
// COOP_HILO (the matmul_coop_hilo variants, the engine's default on tensor
// cores) keeps f32's precision instead: each staged value v is split into
// two halves, hi = v rounded to a half (toHalf, in integer steps, so no
// compiler can fold it away) and lo = v - hi (exact in f32) rounded to a
// half, and each 16x16x16 step takes three products, Xhi.Whi + Xhi.Wlo +
// Xlo.Whi, into the f32 accumulators: hi + lo is v within 2^-22 of itself
// (and 2^-25 absolute where lo is a subnormal half), and the product left
// out, Xlo.Wlo, is within 2^-22 of X.W. An F16 weight is its own hi (lo is
// 0): two products. The tensor cores have an order of magnitude more
// throughput than these tiles use (27-53 of ~990 TFLOP/s on the H200,
// bench/results/2026-11-27-h200-nvidia-580.md), so the extra products cost
// shared memory traffic and registers, not tensor time: measured on a GPU
// by BenchmarkMatmulGPU's coop-hilo candidates. The emulation stores each
// (hi, lo) as one packHalf2x16 word (both exact halves, so the round trip
// is exact): the same shared bytes as the f32 emulation, within lavapipe's
// shared memory.
//
// COOP_PACKED (the matmul_coop_pk and matmul_coop_hilo_pk variants, bench
// candidates: docs/matmul-cost.md): the staged tiles as arrays of quads of
// halves (uvec2: two packHalf2x16 words), a quad converted and stored at
// once (two packed conversions, one 8-byte store, where the scalar kernel
// converts and stores each half alone), the cooperative loads reading
// those arrays (offsets and strides in quads); and under COOP_HILO hi split off by a mask, v's low
// 13 mantissa bits cleared (exact in a half from 2^-14 up;
// truncated to the halves' subnormal steps of 2^-24 below), in place of
// toHalf's integer rounding: hi is v truncated, so lo is within 2^-10 of v
// (2^-11 rounded) from 2^-14 up and under 2^-24 below, the bounds a
// driver converting toward zero already has. The emulation takes the same
// split (its lo rounded by toHalf), so CI checks that arithmetic; the
// vector arrays' loads only a GPU runs.
//
// COOP_XSPLIT (with COOP_HILO and COOP_PACKED: the matmul_coop_hilo_pk_xs
// variants, bench candidates) reads X already split, a word per element
// holding packHalf2x16(hi, lo) (split_halves.comp, one pass over X for
// every tile of rows that stages it): the staging moves the halves into
// the hi and lo tiles with integer ops and converts nothing of X, where
// the hilo kernel splits and converts each staged value of X again in
// every workgroup along the rows (docs/matmul-cost.md: the conversions
// are the diagnosed bound). X's halves are rounded to nearest, within the
// packed kernel's bound for truncated ones.
//
// The loops over a subgroup's tiles and an invocation's staged quads are
// unrolled ([[unroll]]; their bounds are specialization constants): arrays
// of cooperative matrices and registers indexed by a loop that is not are
// kept in memory.
//
// Split-K as matmul.comp's (p.kSplit != 0: workgroup z walks its slice of
// the columns, a multiple of BK, and writes partial sums [splits][n][rows]
// to y for splitk_reduce.comp). W is already staged along its rows here
// (loadStep: neighbouring invocations read neighbouring words of a row).
//
// Specialization constants (MatmulCoopSpec.Constants): 0 WG = 32 *
// (BM/WM) * (BN/WN), 1 BM, 2 BN, 3 BK, 4 WM, 5 WN (BK, WM, WN multiples of
// 16). Dispatch MatmulCoopGroups(rows, n, spec).
#include "include/common.glsl"
#extension GL_EXT_control_flow_attributes : require
#ifndef EMULATE_COOPMAT
#include "include/coopmat.glsl"
#endif
#if defined(COOPMAT_KHR) && (defined(EMULATE_COOPMAT) || defined(COOP_PACKED))
#error "COOPMAT_KHR is for the tensor-core product of the unpacked tiles"
#endif
#define OP_MATMUL
#include "include/push_matmul_attn.glsl"

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 64; // tokens per tile
layout(constant_id = 2) const uint BN = 64; // rows of W per tile
layout(constant_id = 3) const uint BK = 32; // columns per step, a multiple of 16
layout(constant_id = 4) const uint WM = 32; // tokens per subgroup, a multiple of 16
layout(constant_id = 5) const uint WN = 32; // rows per subgroup, a multiple of 16

#if defined(COOP_XSPLIT) && !(defined(COOP_HILO) && defined(COOP_PACKED))
#error "COOP_XSPLIT is a variant of the packed hilo kernel"
#endif
layout(std430, binding = 0) readonly buffer Weights { uint w[]; };
#ifdef COOP_XSPLIT
layout(std430, binding = 1) readonly buffer X { uint x[]; }; // [n][cols]: packHalf2x16(hi, lo)
#else
layout(std430, binding = 1) readonly buffer X { float x[]; }; // [n][cols]
#endif
// The same bindings as wide words: a quad of x, two words of W, one load
// each where cols is a multiple of 4 (every quad is then 16-byte aligned in
// x and 8-byte aligned in an F16/BF16 W; the engine binds x at offsets of
// whole rows).
layout(std430, binding = 0) readonly buffer Weights2 { uvec2 w2[]; };
#ifdef COOP_XSPLIT
layout(std430, binding = 1) readonly buffer X4 { uvec4 x4[]; };
#define XQUAD uvec4
#else
layout(std430, binding = 1) readonly buffer X4 { vec4 x4[]; };
#define XQUAD vec4
#endif
layout(std430, binding = 2) writeonly buffer Y { float y[]; }; // [n][ldy]

#include "include/weights.glsl"
#ifdef WEIGHT_SUBBLOCK
#include "include/subblock.glsl"
#endif
#include "include/matmul_weights.glsl"

const uint BKP = BK + 8u;              // shared elements per staged row
const uint TI = WM / 16u;              // tiles per subgroup across tokens
const uint TJ = WN / 16u;              // tiles per subgroup across rows
const uint SGN = BN / WN;              // subgroups across the rows
const uint NSG = (BM / WM) * (BN / WN); // subgroups per workgroup

#if defined(COOP_HILO) && !defined(WEIGHT_F16)
#define W_LO // the weights have a low half (an F16 weight is its own high half)
#endif

#ifdef EMULATE_COOPMAT
// f32 holding f16-rounded values: the same numbers the tensor cores see
// (toHalf, in integer steps: a compiler may fold
// unpackHalf2x16(packHalf2x16(v)) to v, as NVIDIA's does, and the
// emulation would then test f32 operands).
#define SH float
float toSH(float v) { return toHalf(v); }
#else
#define SH float16_t
SH toSH(float v) { return float16_t(v); }
#endif

#if defined(COOP_PACKED) && !defined(EMULATE_COOPMAT)
#define PK // the tiles in quads
// Quads of halves as two packHalf2x16 words (glslang 11's coopMatLoadNV
// takes uint vectors, not f16vec4).
shared uvec2 xs[BM * BKP / 4u]; // [token][k/4] (COOP_HILO: the high halves)
shared uvec2 ws[BN * BKP / 4u]; // [row][k/4]
#ifdef COOP_HILO
shared uvec2 xl[BM * BKP / 4u]; // the low halves
#ifdef W_LO
shared uvec2 wl[BN * BKP / 4u];
#endif
#endif
#else
#if defined(COOP_HILO) && defined(EMULATE_COOPMAT)
shared uint xs[BM * BKP]; // [token][k]: packHalf2x16(hi, lo)
shared uint ws[BN * BKP]; // [row][k]: packHalf2x16(hi, lo)
#else
shared SH xs[BM * BKP]; // [token][k] (COOP_HILO: the high halves)
shared SH ws[BN * BKP]; // [row][k]
#endif
#if defined(COOP_HILO) && !defined(EMULATE_COOPMAT)
shared SH xl[BM * BKP]; // the low halves
#ifdef W_LO
shared SH wl[BN * BKP];
#endif
#endif
#endif
// LD is the cooperative loads' unit: a quad of the tiles under PK.
#ifdef PK
const uint LD = 4u;
#else
const uint LD = 1u;
#endif
shared float cs[NSG * 256u]; // a 16x16 f32 tile per subgroup, row-major [token][row]

// hiOf is v's high half as stage1 splits it: rounded to the nearest half
// (toHalf), or under COOP_PACKED truncated: by a mask from 2^-14 up, to a
// multiple of 2^-24 below (both exact: v times 2^24 is).
float hiOf(float v) {
#ifdef COOP_PACKED
	return abs(v) >= 6.103515625e-05 ? uintBitsToFloat(floatBitsToUint(v) & 0xFFFFE000u) : trunc(v * 16777216.0) / 16777216.0;
#else
	return toHalf(v);
#endif
}

#ifndef PK
// stage1 stores v at element at of W's tile (isW) or X's.
void stage1(bool isW, uint at, float v) {
#ifdef COOP_HILO
	float hi = hiOf(v);
	float lo = v - hi; // exact: hi is v with its low mantissa bits rounded off
#ifdef EMULATE_COOPMAT
	uint word = packHalf2x16(vec2(hi, toHalf(lo))); // two exact halves: an exact round trip
	if (isW) {
		ws[at] = word;
	} else {
		xs[at] = word;
	}
#else
	if (isW) {
		ws[at] = SH(hi); // exact
#ifdef W_LO
		wl[at] = SH(lo);
#endif
	} else {
		xs[at] = SH(hi);
		xl[at] = SH(lo);
	}
#endif
#else
	if (isW) {
		ws[at] = toSH(v);
	} else {
		xs[at] = toSH(v);
	}
#endif
}

#endif

#ifdef PK
// halves4 is v as four halves in two words (packHalf2x16: one packed
// conversion a pair where the device has it).
uvec2 halves4(vec4 v) {
	return uvec2(packHalf2x16(v.xy), packHalf2x16(v.zw));
}
#endif

void stage4(bool isW, uint at, vec4 v) {
#ifdef PK
	// at is a multiple of 4 (BKP and the quads' columns are).
#ifdef COOP_HILO
	vec4 hi = mix(trunc(v * 16777216.0) / 16777216.0, uintBitsToFloat(floatBitsToUint(v) & 0xFFFFE000u),
		greaterThanEqual(abs(v), vec4(6.103515625e-05))); // hiOf, four at once
	vec4 lo = v - hi; // exact
	if (isW) {
		ws[at >> 2] = halves4(hi); // exact
#ifdef W_LO
		wl[at >> 2] = halves4(lo);
#endif
	} else {
		xs[at >> 2] = halves4(hi);
		xl[at >> 2] = halves4(lo);
	}
#else
	if (isW) {
		ws[at >> 2] = halves4(v);
	} else {
		xs[at >> 2] = halves4(v);
	}
#endif
#else
	stage1(isW, at, v.x);
	stage1(isW, at + 1u, v.y);
	stage1(isW, at + 2u, v.z);
	stage1(isW, at + 3u, v.w);
#endif
}

#ifdef COOP_XSPLIT
// stageXWords stores four elements of X, each a word packHalf2x16(hi, lo),
// at element at of X's tiles: the high halves into xs, the low into xl.
void stageXWords(uint at, uvec4 v) {
#ifdef PK
	xs[at >> 2] = uvec2((v.x & 0xFFFFu) | (v.y << 16), (v.z & 0xFFFFu) | (v.w << 16));
	xl[at >> 2] = uvec2((v.x >> 16) | (v.y & 0xFFFF0000u), (v.z >> 16) | (v.w & 0xFFFF0000u));
#else
	// The emulation's tiles hold the same words (hi, lo).
	xs[at] = v.x;
	xs[at + 1u] = v.y;
	xs[at + 2u] = v.z;
	xs[at + 3u] = v.w;
#endif
}
#endif

// WGS is the workgroup size (constant 0 must be 32 * NSG); WQ and XQ are
// how many quads of W's and X's slices an invocation stages a step.
const uint WGS = 32u * NSG;
const uint WQ = (BN * (BK / 4u) + WGS - 1u) / WGS;
const uint XQ = (BM * (BK / 4u) + WGS - 1u) / WGS;

// loadStep reads this invocation's quads of W[r0 .. r0+BN][k0 .. k0+BK]
// and X[s0 .. s0+BM][k0 .. k0+BK] (zero past the edges): quad i of a slice
// is row i / (BK/4), columns 4*(i % (BK/4)) .., so neighbouring
// invocations read neighbouring words of a row.
void loadStep(uint k0, uint r0, uint s0, uint tid, out vec4 wreg[WQ], out XQUAD xreg[XQ]) {
	[[unroll]] for (uint q = 0u; q < WQ; q++) {
		uint i = tid + q * WGS;
		uint rr = i / (BK / 4u), kq = i % (BK / 4u);
		uint r = r0 + rr;
		wreg[q] = i < BN * (BK / 4u) && r < p.rows ? loadWeightQuad(p.wRow0 + r, k0 + 4u * kq) : vec4(0.0);
	}
	[[unroll]] for (uint q = 0u; q < XQ; q++) {
		uint i = tid + q * WGS;
		uint ss = i / (BK / 4u), kq = i % (BK / 4u);
		uint s = s0 + ss, c = k0 + 4u * kq;
		XQUAD v = XQUAD(0);
		if (i < BM * (BK / 4u) && s < p.n) {
			uint e = s * p.cols + c;
			if ((p.cols & 3u) == 0u && c < p.cols) { // the quad is all in (c + 4 <= cols), and e a multiple of 4
				v = x4[e >> 2];
			} else if (c + 4u <= p.cols) {
				v = XQUAD(x[e], x[e + 1u], x[e + 2u], x[e + 3u]);
			} else {
				for (uint t = 0u; t < 4u; t++) {
					if (c + t < p.cols) {
						v[t] = x[e + t];
					}
				}
			}
		}
		xreg[q] = v;
	}
}

// storeStep writes the quads loadStep read into the shared tiles.
void storeStep(uint tid, vec4 wreg[WQ], XQUAD xreg[XQ]) {
	[[unroll]] for (uint q = 0u; q < WQ; q++) {
		uint i = tid + q * WGS;
		if (i < BN * (BK / 4u)) {
			stage4(true, (i / (BK / 4u)) * BKP + 4u * (i % (BK / 4u)), wreg[q]);
		}
	}
	[[unroll]] for (uint q = 0u; q < XQ; q++) {
		uint i = tid + q * WGS;
		if (i < BM * (BK / 4u)) {
#ifdef COOP_XSPLIT
			stageXWords((i / (BK / 4u)) * BKP + 4u * (i % (BK / 4u)), xreg[q]);
#else
			stage4(false, (i / (BK / 4u)) * BKP + 4u * (i % (BK / 4u)), xreg[q]);
#endif
		}
	}
}

void main() {
#ifdef WEIGHT_SUBBLOCK
	sbInit(p.wRows * (p.cols / 32u));
#endif
	uint tid = gl_LocalInvocationID.x;
#ifdef EMULATE_COOPMAT
	uint sg = tid / 32u, lane = tid % 32u;
#else
	uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
#endif
	uint sgM = sg / SGN, sgN = sg % SGN;
	uint r0 = gl_WorkGroupID.x * BN;
	uint s0 = gl_WorkGroupID.y * BM;

#ifdef EMULATE_COOPMAT
	float acc[TI * TJ * 8u];
	for (uint i = 0u; i < TI * TJ * 8u; i++) {
		acc[i] = 0.0;
	}
#else
	CM_C acc[TI * TJ];
	[[unroll]] for (uint i = 0u; i < TI * TJ; i++) {
		acc[i] = cmFillC(0.0);
	}
#endif

	// The next step's slices are loaded into registers while this step's
	// are multiplied (software pipelining): the loads' latency hides
	// behind the tile product instead of stalling before each barrier.
	// The columns this workgroup walks: all, or its K slice.
	uint kBegin = 0u, kEnd = p.cols;
	if (p.kSplit != 0u) {
		kBegin = gl_WorkGroupID.z * p.kSplit;
		kEnd = min(p.cols, kBegin + p.kSplit);
	}
	vec4 wreg[WQ];
	XQUAD xreg[XQ];
	loadStep(kBegin, r0, s0, tid, wreg, xreg);
	for (uint k0 = kBegin; k0 < kEnd; k0 += BK) {
		storeStep(tid, wreg, xreg);
		barrier(); // the tiles are complete before anyone reads them
		if (k0 + BK < kEnd) {
			loadStep(k0 + BK, r0, s0, tid, wreg, xreg);
		}
		[[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
#ifdef EMULATE_COOPMAT
			[[unroll]] for (uint ti = 0u; ti < TI; ti++) {
				[[unroll]] for (uint tj = 0u; tj < TJ; tj++) {
					uint a = (sgM * WM + 16u * ti + lane / 2u) * BKP + kk;
					for (uint e = 0u; e < 8u; e++) {
						uint b = (sgN * WN + 16u * tj + (lane % 2u) * 8u + e) * BKP + kk;
						float sum = acc[(ti * TJ + tj) * 8u + e];
						for (uint q = 0u; q < 16u; q++) {
#ifdef COOP_HILO
							vec2 xa = unpackHalf2x16(xs[a + q]), wb = unpackHalf2x16(ws[b + q]);
							sum += xa.x * wb.x + (xa.x * wb.y + xa.y * wb.x);
#else
							sum += xs[a + q] * ws[b + q];
#endif
						}
						acc[(ti * TJ + tj) * 8u + e] = sum;
					}
				}
			}
#else
			CM_A am[TI];
			CM_B bm[TJ];
			[[unroll]] for (uint ti = 0u; ti < TI; ti++) {
				CM_LOAD_A(am[ti], xs, ((sgM * WM + 16u * ti) * BKP + kk) / LD, BKP / LD);
			}
			[[unroll]] for (uint tj = 0u; tj < TJ; tj++) {
				CM_LOAD_B(bm[tj], ws, ((sgN * WN + 16u * tj) * BKP + kk) / LD, BKP / LD);
			}
#ifdef COOP_HILO
			// The small products first: they are summed before the large
			// one meets the accumulator.
			{
				CM_A al[TI];
				[[unroll]] for (uint ti = 0u; ti < TI; ti++) {
					CM_LOAD_A(al[ti], xl, ((sgM * WM + 16u * ti) * BKP + kk) / LD, BKP / LD);
				}
				[[unroll]] for (uint ti = 0u; ti < TI; ti++) {
					[[unroll]] for (uint tj = 0u; tj < TJ; tj++) {
						acc[ti * TJ + tj] = CM_MULADD(al[ti], bm[tj], acc[ti * TJ + tj]);
					}
				}
			}
#ifdef W_LO
			{
				CM_B bl[TJ];
				[[unroll]] for (uint tj = 0u; tj < TJ; tj++) {
					CM_LOAD_B(bl[tj], wl, ((sgN * WN + 16u * tj) * BKP + kk) / LD, BKP / LD);
				}
				[[unroll]] for (uint ti = 0u; ti < TI; ti++) {
					[[unroll]] for (uint tj = 0u; tj < TJ; tj++) {
						acc[ti * TJ + tj] = CM_MULADD(am[ti], bl[tj], acc[ti * TJ + tj]);
					}
				}
			}
#endif
#endif
			[[unroll]] for (uint ti = 0u; ti < TI; ti++) {
				[[unroll]] for (uint tj = 0u; tj < TJ; tj++) {
					acc[ti * TJ + tj] = CM_MULADD(am[ti], bm[tj], acc[ti * TJ + tj]);
				}
			}
#endif
		}
		barrier(); // everyone is done reading before the next step overwrites
	}

	// Each tile through the subgroup's scratch: lane reads row lane/2,
	// columns (lane%2)*8 .. +8 (what the emulation's lane holds).
	uint m = lane / 2u, nc = (lane % 2u) * 8u;
	[[unroll]] for (uint ti = 0u; ti < TI; ti++) {
		[[unroll]] for (uint tj = 0u; tj < TJ; tj++) {
#ifdef EMULATE_COOPMAT
			for (uint e = 0u; e < 8u; e++) {
				cs[sg * 256u + m * 16u + nc + e] = acc[(ti * TJ + tj) * 8u + e];
			}
#else
			CM_STORE(acc[ti * TJ + tj], cs, sg * 256u, 16u);
			subgroupMemoryBarrierShared();
			subgroupBarrier();
#endif
			uint s = s0 + sgM * WM + 16u * ti + m;
			for (uint e = 0u; e < 8u; e++) {
				uint r = r0 + sgN * WN + 16u * tj + nc + e;
				if (s < p.n && r < p.rows) {
					if (p.kSplit != 0u) { // this slice's partial sum, [z][s][r]
						y[(gl_WorkGroupID.z * p.n + s) * p.rows + r] = cs[sg * 256u + m * 16u + nc + e];
					} else {
						y[s * p.ldy + p.yOff + r] = cs[sg * 256u + m * 16u + nc + e];
					}
				}
			}
#ifndef EMULATE_COOPMAT
			subgroupBarrier(); // read before the next tile's store
#endif
		}
	}
}
