#version 450
// matmul: Y[s][yOff + r] = W[wRow0 + r] . X[s] for r < rows, s < n, for
// prefill chunks and eval windows (many tokens at once), with W of a type of
// shaders.WeightTypes in the layout the decode step's matvec reads
// (shaders.MatvecBytes: F32, F16, BF16 as in the file; Q8_0 and Q4_0 split;
// the other quantized types in the sub-block layout), so one upload serves
// both, selected by the type's define (WEIGHT_F32, WEIGHT_F16, WEIGHT_BF16,
// WEIGHT_Q8_0_SPLIT, WEIGHT_Q4_0_SPLIT, WEIGHT_SUBBLOCK), read through uint
// words by include/weights.glsl, and X, Y in F32. The binding of W holds
// wRows rows (a piece of a matrix bound in pieces, or a stack of matrices
// uploaded together); the dispatch computes rows of them from wRow0. Y's
// rows are ldy apart and the outputs start at column yOff: a piece of a
// matrix writes its columns of the whole output, a part of a stack its own
// output. Nothing here needs an offset binding, so no alignment applies.
//
// A classic shared-memory tiling: a workgroup owns a tile of BM tokens by BN
// rows of W and walks the columns BK at a time. Each step it stages the BM x
// BK slice of X and the BN x BK slice of W (dequantized once) in shared
// memory between two barriers, then every invocation multiplies TM tokens by
// TN rows out of it, in registers. Each weight read from memory thus serves
// BM tokens and each x value BN rows, where matvec reads a row once per
// token. Tiles past the edge are zero-filled, so n, rows and cols need not be
// multiples of the tile (a quantized type's cols are multiples of its block).
//
// On lavapipe a barrier costs more than the arithmetic, and so does a load
// whose address differs per invocation (MatmulSpecCPU takes bigger steps,
// fewer barriers). A variant without shared memory or barriers, each
// invocation reading its W rows directly with the x values common to the
// workgroup, measured no faster there (2.4-3.7x matvec against 2.8-4.9x).
//
// lavapipe ends an invocation's loops after 65535 iterations in all
// (llvmpipe's loop limiter, LP_MAX_TGSI_LOOP_ITERATIONS); the loops here run
// a few times per step, so cols up to 16384 are safe there
// (TestMatmulLongRows).
//
// MATMUL_PREFETCH (the matmul_pf variants) loads each step's slices into
// registers during the previous step's products (software pipelining), a
// candidate for GPUs (BenchmarkMatmulGPU) that the engine does not pick yet.
//
// Split-K (p.kSplit != 0, MatmulSplitGroups): workgroup z walks columns
// [z*kSplit, min(cols, (z+1)*kSplit)) only, a multiple of BK, and writes
// its partial sums to y as [splits][n][rows] (ldy and yOff unused);
// splitk_reduce.comp then sums the slices in order into the real y. At a
// few tokens the grid is rows/BN workgroups (172 for a 7B FFN's 11008 rows
// at BN 64: about one per SM of an H200), each walking all of K serially;
// slices give the GPU several times as many in flight (Profile.MatmulSplit,
// docs/matmul-cost.md).
//
// The staging order (constant 6, WALONG): 0 gives neighbouring invocations
// neighbouring ROWS of W (quad i is row i%BN) and neighbouring tokens of X
// (quad i is token i%BM), whose addresses are a row apart, a cache line per
// invocation per load; 1 gives them neighbouring quads ALONG a row of each
// (quad i is row or token i/(BK/4), columns 4*(i%(BK/4))), so a subgroup's
// loads cover whole runs of a few rows. Both write the same shared layout,
// whose column strides BNP = BN + PADW and BMP = BM + PADW pad the stores
// of the second order onto different banks (the product loop reads
// consecutive rows either way; the first order needs no padding and has
// none). The H200 measured the row order at 3.3-5.5 TFLOP/s for Q8_0 and
// 12-19 for F16 at 512 tokens (two loads a quad, each 32 lines a subgroup;
// docs/matmul-cost.md).
//
// Double buffering (constant 7, DBUF, the prefetch variants only): two
// copies of each staged tile, so a step's stores go to the copy the last
// step did not read and one barrier a step suffices where the single copy
// needs two (every invocation must be done reading before it is
// overwritten). The matmul_pf variants with WALONG and DBUF are the
// pipelined tile (MatmulSpec.Pipe): loads in flight during the products,
// coalesced, one barrier a step.
//
// Specialization constants (MatmulSpec.Constants): 0 WG = (BM/TM)*(BN/TN)
// invocations, 1 BM, 2 BN, 3 BK (a multiple of 4: W is loaded in quads), 4 TM,
// 5 TN, 6 WALONG, 7 DBUF. Dispatch MatmulGroups(rows, n, spec): x over row
// tiles, y over token tiles (MatmulSplitGroups: z over K slices).
#include "include/common.glsl"
#define OP_MATMUL
#include "include/push_matmul_attn.glsl"

// The defaults are MatmulSpecGPU.
layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint BM = 64; // tokens per tile
layout(constant_id = 2) const uint BN = 64; // rows of W per tile
layout(constant_id = 3) const uint BK = 16; // columns per step, a multiple of 4
layout(constant_id = 4) const uint TM = 8;  // tokens per invocation, divides BM
layout(constant_id = 5) const uint TN = 4;  // rows per invocation, divides BN
layout(constant_id = 6) const uint WALONG = 0; // 1: W and X staged along their rows (see above)
layout(constant_id = 7) const uint DBUF = 0; // 1: two copies of the staged tiles (MATMUL_PREFETCH only)

layout(std430, binding = 0) readonly buffer Weights { uint w[]; }; // [wRows] rows, F32/F16, or split Q8_0/Q4_0
layout(std430, binding = 1) readonly buffer X { float x[]; }; // [n][cols]
// The same bindings as wide words: a quad of x, two words of W, one load
// each where cols is a multiple of 4 (every quad is then 16-byte aligned in
// x and 8-byte aligned in an F16/BF16 W; the engine binds x at offsets of
// whole rows).
layout(std430, binding = 0) readonly buffer Weights2 { uvec2 w2[]; };
layout(std430, binding = 1) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };     // [n][ldy], columns yOff..yOff+rows written

#include "include/weights.glsl"
#ifdef WEIGHT_SUBBLOCK
#include "include/subblock.glsl"
#endif

// Staged tiles in quads of columns, column-major ([k/4][token],
// [k/4][row]) so that the inner loop's reads by neighbouring invocations
// are neighbouring vec4s: one 16-byte load serves four multiply-adds (on
// lavapipe a shared load whose address differs per invocation is a gather,
// the inner loop's main cost).
// BNP and BMP pad the columns so that WALONG's stores, BK/4 quads of a
// row to neighbouring invocations, fall on distinct banks in each group of
// 8 16-byte stores: a column stride of BN + 32/BK quads (BN and BM
// multiples of 8). The row order (WALONG 0) keeps the unpadded layout it
// was measured with (lavapipe's). Under DBUF each array holds two copies,
// XSZ and WSZ vec4s apart.
const uint PADW = WALONG * ((32u + BK - 1u) / BK);
const uint BNP = BN + PADW;
const uint BMP = BM + PADW;
const uint XSZ = (BK / 4u) * BMP;
const uint WSZ = (BK / 4u) * BNP;
shared vec4 xs[(1u + DBUF) * XSZ];
shared vec4 ws[(1u + DBUF) * WSZ];

#include "include/matmul_weights.glsl"

// wQuad is quad i of the step's W slice as (row in the tile, quad of
// columns): by rows (WALONG 0) or along them (1).
uvec2 wQuad(uint i) {
	return WALONG != 0u ? uvec2(i / (BK / 4u), i % (BK / 4u)) : uvec2(i % BN, i / BN);
}

// stageW is quad i of the step's W slice, W[r0 + rr][k0 + 4*kq ..] for
// (rr, kq) = wQuad(i) (zero past the rows), which goes to ws[kq*BNP + rr].
vec4 stageW(uint i, uint r0, uint k0) {
	uvec2 q = wQuad(i);
	uint r = r0 + q.x;
	return r < p.rows ? loadWeightQuad(p.wRow0 + r, k0 + 4u * q.y) : vec4(0.0);
}

// wSlot is where quad i of the W slice goes in ws: i itself in the row
// order (unpadded: kq*BN + rr).
uint wSlot(uint i) {
	uvec2 q = wQuad(i);
	return WALONG != 0u ? q.y * BNP + q.x : i;
}

// xQuad is quad i of the step's X slice as (token in the tile, quad of
// columns): by tokens (WALONG 0) or along the rows (1).
uvec2 xQuad(uint i) {
	return WALONG != 0u ? uvec2(i / (BK / 4u), i % (BK / 4u)) : uvec2(i % BM, i / BM);
}

// xSlot is where quad i of the X slice goes in xs: i itself in the token
// order (unpadded: kq*BM + ss).
uint xSlot(uint i) {
	uvec2 q = xQuad(i);
	return WALONG != 0u ? q.y * BMP + q.x : i;
}

// stageX is quad i of the step's X slice, X[s0 + ss][k0 + 4*kq ..] for
// (ss, kq) = xQuad(i) (zero past the tokens and the columns), which goes
// to xs[xSlot(i)].
vec4 stageX(uint i, uint s0, uint k0) {
	uvec2 q = xQuad(i);
	uint ss = q.x, kq = q.y;
	uint s = s0 + ss, c = k0 + 4u * kq;
	vec4 v = vec4(0.0);
	if (s < p.n) {
		uint e = s * p.cols + c;
		if ((p.cols & 3u) == 0u && c < p.cols) { // the quad is all in (c + 4 <= cols), and e a multiple of 4
			v = x4[e >> 2];
		} else if (c + 4u <= p.cols) {
			v = vec4(x[e], x[e + 1u], x[e + 2u], x[e + 3u]);
		} else {
			for (uint t = 0u; t < 4u; t++) {
				if (c + t < p.cols) {
					v[t] = x[e + t];
				}
			}
		}
	}
	return v;
}

#ifdef MATMUL_PREFETCH
// WG is the workgroup size (constant 0 is (BM/TM)*(BN/TN)); WQ and XQ the
// quads of W's and X's slices an invocation stages a step.
const uint WG = (BM / TM) * (BN / TN);
const uint WQ = (BN * (BK / 4u) + WG - 1u) / WG;
const uint XQ = (BM * (BK / 4u) + WG - 1u) / WG;

// storeTiles writes an invocation's prefetched quads to copy c of the
// staged tiles.
void storeTiles(vec4 wreg[WQ], vec4 xreg[XQ], uint tid, uint c) {
	for (uint q = 0u; q < WQ; q++) {
		if (tid + q * WG < BN * (BK / 4u)) {
			ws[c * WSZ + wSlot(tid + q * WG)] = wreg[q];
		}
	}
	for (uint q = 0u; q < XQ; q++) {
		if (tid + q * WG < BM * (BK / 4u)) {
			xs[c * XSZ + xSlot(tid + q * WG)] = xreg[q];
		}
	}
}
#endif

void main() {
#ifdef WEIGHT_SUBBLOCK
	sbInit(p.wRows * (p.cols / 32u));
#endif
#ifndef MATMUL_PREFETCH
	const uint WG = gl_WorkGroupSize.x;
#endif
	const uint NTX = BN / TN; // invocations across the tile's rows
	const uint NTY = BM / TM; // invocations across the tile's tokens
	uint tid = gl_LocalInvocationID.x;
	uint r0 = gl_WorkGroupID.x * BN;
	uint s0 = gl_WorkGroupID.y * BM;
	// This invocation's outputs: rows r0 + tx + i*NTX, tokens s0 + ty + j*NTY
	// (strided, so neighbours read neighbouring shared words).
	uint tx = tid % NTX;
	uint ty = tid / NTX;

	// The columns this workgroup walks: all, or its K slice.
	uint kBegin = 0u, kEnd = p.cols;
	if (p.kSplit != 0u) {
		kBegin = gl_WorkGroupID.z * p.kSplit;
		kEnd = min(p.cols, kBegin + p.kSplit);
	}

	float acc[TM * TN]; // [token][row]
	for (uint i = 0u; i < TM * TN; i++) {
		acc[i] = 0.0;
	}
#ifdef MATMUL_PREFETCH
	// The next step's quads are loaded into registers while this step's
	// tiles multiply, so the loads' latency hides behind the products.
	vec4 wreg[WQ], xreg[XQ];
	for (uint q = 0u; q < WQ; q++) {
		wreg[q] = tid + q * WG < BN * (BK / 4u) ? stageW(tid + q * WG, r0, kBegin) : vec4(0.0);
	}
	for (uint q = 0u; q < XQ; q++) {
		xreg[q] = tid + q * WG < BM * (BK / 4u) ? stageX(tid + q * WG, s0, kBegin) : vec4(0.0);
	}
	// cur is the copy of the tiles this step reads (0 without DBUF). With
	// DBUF the first step's tiles are stored here, and each step stores
	// the next one's into the other copy after its products.
	uint cur = 0u;
	if (DBUF != 0u) {
		storeTiles(wreg, xreg, tid, 0u);
		barrier(); // the first tiles are complete before anyone reads them
	}
#endif
	for (uint k0 = kBegin; k0 < kEnd; k0 += BK) {
#ifdef MATMUL_PREFETCH
		if (DBUF == 0u) {
			storeTiles(wreg, xreg, tid, 0u);
			barrier(); // the tiles are complete before anyone reads them
		}
		if (k0 + BK < kEnd) {
			for (uint q = 0u; q < WQ; q++) {
				wreg[q] = tid + q * WG < BN * (BK / 4u) ? stageW(tid + q * WG, r0, k0 + BK) : vec4(0.0);
			}
			for (uint q = 0u; q < XQ; q++) {
				xreg[q] = tid + q * WG < BM * (BK / 4u) ? stageX(tid + q * WG, s0, k0 + BK) : vec4(0.0);
			}
		}
		uint xb = cur * XSZ, wb = cur * WSZ;
#else
		// Stage W[r0 .. r0+BN][k0 .. k0+BK] in quads (quad i at wSlot(i)).
		for (uint i = tid; i < BN * (BK / 4u); i += WG) {
			ws[wSlot(i)] = stageW(i, r0, k0);
		}
		// Stage X[s0 .. s0+BM][k0 .. k0+BK] in quads (quad i at xSlot(i)).
		for (uint i = tid; i < BM * (BK / 4u); i += WG) {
			xs[xSlot(i)] = stageX(i, s0, k0);
		}
		barrier(); // the tiles are complete before anyone reads them
		const uint xb = 0u, wb = 0u;
#endif
		for (uint kq = 0u; kq < BK / 4u; kq++) {
			vec4 a[TM], b[TN];
			for (uint j = 0u; j < TM; j++) {
				a[j] = xs[xb + kq * BMP + ty + j * NTY];
			}
			for (uint i = 0u; i < TN; i++) {
				b[i] = ws[wb + kq * BNP + tx + i * NTX];
			}
			for (uint j = 0u; j < TM; j++) {
				for (uint i = 0u; i < TN; i++) {
					acc[j * TN + i] += dot(a[j], b[i]);
				}
			}
		}
#ifdef MATMUL_PREFETCH
		if (DBUF != 0u) {
			// The other copy was last read a step ago, before the barrier
			// that ended it: storing into it now races with no reader.
			if (k0 + BK < kEnd) {
				storeTiles(wreg, xreg, tid, cur ^ 1u);
			}
			cur ^= 1u;
		}
#endif
		barrier(); // DBUF: the next tiles are complete; else everyone is done reading before they are overwritten
	}
	for (uint j = 0u; j < TM; j++) {
		uint s = s0 + ty + j * NTY;
		for (uint i = 0u; i < TN; i++) {
			uint r = r0 + tx + i * NTX;
			if (s < p.n && r < p.rows) {
				if (p.kSplit != 0u) { // this slice's partial sum, [z][s][r]
					y[(gl_WorkGroupID.z * p.n + s) * p.rows + r] = acc[j * TN + i];
				} else {
					y[s * p.ldy + p.yOff + r] = acc[j * TN + i];
				}
			}
		}
	}
}
