#version 450
// attention_coop: attention_split's key-tile pass (attention_split.comp:
// the same bindings, push constants, partial results, partO written only
// where a row saw a key, and attention_merge after it) with the two products of flash attention on tensor cores
// (VK_NV_cooperative_matrix, f16 x f16 -> f32, 16x16x16), over an F16
// generate-mode cache (KV_F16 and ATTN_COUNTS: its keys and values are
// halves already, so they are exact operands).
//
// A workgroup takes ROWS = 16 * NSG query rows of one head and one key
// tile of the cache, each of its NSG subgroups 16 rows; it stages BC keys
// and values at a time in shared memory (zero past the tile's end, so a
// masked key multiplies zeros), and each subgroup:
//   1. S = Q K^T: its 16 rows' scores of the BC keys, BC/16 accumulators,
//      Q held as operands from the start (HD/16 high and HD/16 low halves);
//   2. S to shared memory; two lanes a row (lane 2r and 2r+1, half the keys
//      each) mask the keys the row does not see (kPos > qPos, past the
//      entries), take the block's max, rescale the row's running sum to
//      the new running max m, and write P = exp(s - m) as a high and a low
//      half (the max moves only by this block's scores: flash attention's
//      block step, as attention_split's);
//   3. O = O * alpha + P V: the row's rescale alpha = exp(m_old - m) is
//      applied to the accumulators element by element, each element's row
//      read from a matrix of row indices of the accumulators' own type
//      (element-wise operations between matrices of one type pair the same
//      elements, so element i of every such matrix in an invocation lies in
//      the same row and column); then the products.
// Precision: a score is Qhi.K + Qlo.K with Q = Qhi + Qlo + O(2^-22 |Q|) and
// K exact, summed in f32; P is scaled by PSCALE = 2^15 before its split
// (P <= 1, so P * PSCALE is a normal half down to P = 2^-29 and the split
// keeps it to 2^-22 relative), V exact. The output's error bound is
// attentionCase.coopScale's (shaders/attention_coop_test.go).
//
// EMULATE_COOPMAT does the same products in plain arithmetic: each
// invocation of a group of 32 holds row lane/2, columns 8*(lane%2) .. +8 of
// every 16x16 accumulator (matmul_direct's emulation's layout), the groups
// meeting through workgroup barriers where a subgroup's would do, and P
// written as packHalf2x16(hi, lo) in the scores' own words. Lavapipe runs
// it: CI checks the staging, masking, softmax, rescale and partial
// results against the CPU; only coopMatLoadNV, coopMatStoreNV,
// coopMatMulAddNV and the row-index matrix are left to a GPU (the
// self-check at device open runs the kernel against the same oracle).
//
// Specialization constants (AttentionCoopSpec): 0 WG = 32 * NSG, 1 HD (the
// head dimension, a multiple of 16), 2 BC (keys staged at a time, a
// multiple of 16). Dispatch AttentionCoopGroups(n, nHead, splits, spec);
// then attention_merge.
#include "include/common.glsl"
#extension GL_EXT_control_flow_attributes : require
#ifndef EMULATE_COOPMAT
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#endif
#define OP_ATTENTION_SPLIT
#include "include/push_matmul_attn.glsl"

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint HD = 64; // the head dimension, a multiple of 16
layout(constant_id = 2) const uint BC = 32; // keys staged at a time, a multiple of 16

layout(std430, binding = 0) readonly buffer Q { float q[]; };          // [n][nHead*headDim], rotated
layout(std430, binding = 1) readonly buffer K { uvec4 k4[]; };         // [entries][nKVHead*headDim/8] eight halves, rotated
layout(std430, binding = 2) readonly buffer V { uvec4 v4[]; };         // [entries][nKVHead*headDim/8] eight halves
layout(std430, binding = 3) readonly buffer KPos { uint kPos[]; };     // [entries] original positions
layout(std430, binding = 4) readonly buffer QPos { uint qPos[]; };     // [n] original positions
layout(std430, binding = 5) readonly buffer Counts { uint counts[]; }; // [nLayer]: the entry count is counts[layer]
layout(std430, binding = 6) writeonly buffer PartO { float partO[]; }; // [n*nHead*splits][headDim]
layout(std430, binding = 7) writeonly buffer PartML { vec2 partML[]; }; // [n*nHead*splits] (m, l)

const float NO_SCORE = -1e30;  // below any score, finite (attention_split.comp)
const float PSCALE = 32768.0;  // P's scale before its split into halves (2^15: P <= 1)
const uint NSG = gl_WorkGroupSize.x / 32u; // subgroups of 32 (or emulated groups)
const uint ROWS = 16u * NSG;
const uint HT = HD / 16u;      // 16-wide tiles of a head
const uint CT = BC / 16u;      // 16-key tiles of a staged block
const uint H8 = HD / 8u;       // uvec4s of a head's row of halves
const uint HALF = BC / 2u;     // keys a lane of a row's pair takes

shared uvec4 kt[BC * H8]; // [key][d/8] the staged keys' halves (zero past the tile)
shared uvec4 vt[BC * H8]; // [key][d/8] their values
shared uint pt[BC];       // their positions
shared uint lastPos;      // the latest position of the workgroup's rows
shared float alphaSh[ROWS]; // each row's rescale for this block
shared float pairSh[NSG * 32u]; // a row's two lanes meet here
#ifdef EMULATE_COOPMAT
// The scores of a subgroup's rows [16][BC] as float bits, then P in the
// same words as packHalf2x16(hi, lo).
shared uint ss[NSG * 16u * BC];
#define SG_SYNC() memoryBarrierShared(); barrier()
#else
shared float ss[NSG * 16u * BC];        // [sg][row][key] the scores (and at the end the output tiles)
shared float16_t ph[NSG * 2u * 16u * BC]; // [sg][hi, lo][row][key] P (at the start Q's tiles)
shared float ridx[256];                 // a 16x16 matrix whose element (r, c) is r
#define SG_SYNC() subgroupMemoryBarrierShared(); subgroupBarrier()
#endif

#ifdef EMULATE_COOPMAT
// h-th half of the staged tile t (kt or vt), exactly.
float keyHalf(uint h) {
	uvec4 w = kt[h >> 3];
	return unpackHalf2x16(w[(h >> 1) & 3u])[h & 1u];
}
float valHalf(uint h) {
	uvec4 w = vt[h >> 3];
	return unpackHalf2x16(w[(h >> 1) & 3u])[h & 1u];
}
#endif

void main() {
	uint tid = gl_LocalInvocationID.x;
#ifdef EMULATE_COOPMAT
	uint sg = tid / 32u, lane = tid % 32u;
#else
	uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
#endif
	uint u = sg * 32u + lane;          // this invocation's slot; u ^ 1 is its row partner's
	uint r = lane / 2u, side = lane % 2u; // its row of the subgroup's 16, and which half of the keys (and of a tile's columns)
	uint g = groupIndex();
	uint blocks = (p.n + ROWS - 1u) / ROWS;
	if (g >= blocks * p.nHead * p.splits) {
		return; // the whole workgroup: g is uniform
	}
	uint s = g % p.splits, bh = g / p.splits;
	uint h = bh % p.nHead;
	uint i = (bh / p.nHead) * ROWS + sg * 16u + r; // this lane's query row
	bool live = i < p.n;
	uint kvh = h / (p.nHead / p.nKVHead);
	uint kvd8 = p.nKVHead * H8; // a cache entry in uvec4s
	uint entries = min(counts[p.layer], p.entries);
	uint e0 = s * p.splitLen, e1 = min(e0 + p.splitLen, entries);
	uint pb = (i * p.nHead + h) * p.splits + s;
	if (e0 >= entries) { // a tile past the cache's count (uniform): nothing to see, partO left as it was
		if (live && side == 0u) {
			partML[pb] = vec2(NO_SCORE, 0.0);
		}
		return;
	}
	uint qp = live ? qPos[i] : 0u;
	uint qBase = i * p.nHead * HD + h * HD;
	uint sgS = sg * 16u * BC; // this subgroup's scores

	if (tid == 0u) {
		lastPos = 0u;
	}
#ifndef EMULATE_COOPMAT
	for (uint t = tid; t < 256u; t += gl_WorkGroupSize.x) {
		ridx[t] = float(t / 16u);
	}
#endif
	barrier();
	if (live) {
		atomicMax(lastPos, qp);
	}

	// Q as operands: the high halves and the low halves of each 16-wide
	// tile of the rows' queries (zero for rows past n).
#ifdef EMULATE_COOPMAT
	uint qhl[HD]; // row r's query as packHalf2x16(hi, lo)
	for (uint d = 0u; d < HD; d++) {
		float x = live ? q[qBase + d] : 0.0;
		float hi = toHalf(x);
		qhl[d] = packHalf2x16(vec2(hi, toHalf(x - hi)));
	}
	float oacc[HT * 8u];
	for (uint t = 0u; t < HT * 8u; t++) {
		oacc[t] = 0.0;
	}
#else
	uint sgP = sg * 2u * 16u * BC; // this subgroup's P (and Q's tiles at the start)
	fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> qh[HT], ql[HT];
	[[unroll]] for (uint t = 0u; t < HT; t++) {
		for (uint e = 0u; e < 8u; e++) {
			float x = live ? q[qBase + 16u * t + 8u * side + e] : 0.0;
			float hi = toHalf(x); // not float16_t(x): see toHalf
			ph[sgP + r * 16u + 8u * side + e] = float16_t(hi);
			ph[sgP + 256u + r * 16u + 8u * side + e] = float16_t(x - hi);
		}
		SG_SYNC();
		coopMatLoadNV(qh[t], ph, sgP, 16u, false);
		coopMatLoadNV(ql[t], ph, sgP + 256u, 16u, false);
		SG_SYNC(); // loaded before the next tile's stores
	}
	fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> rowm; // element i's row of any 16x16 f32 matrix
	coopMatLoadNV(rowm, ridx, 0u, 16u, false);
	fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> sacc[CT], oacc[HT];
	[[unroll]] for (uint t = 0u; t < HT; t++) {
		oacc[t] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
	}
#endif
	barrier();
	uint last = lastPos;

	float m = NO_SCORE, l = 0.0; // the row's running max, and this lane's part of its sum
	for (uint t0 = e0; t0 < e1; t0 += BC) {
		uint cnt = min(BC, e1 - t0);
		// Stage the block: keys past cnt are zeros (their P is zero, and
		// zero times a zero value adds nothing, where a stale value might
		// be a NaN).
		for (uint x = tid; x < BC * H8; x += gl_WorkGroupSize.x) {
			uint j = x / H8, c = x % H8;
			uvec4 kw = uvec4(0u), vw = uvec4(0u);
			if (j < cnt) {
				uint at = (t0 + j) * kvd8 + kvh * H8 + c;
				kw = k4[at];
				vw = v4[at];
			}
			kt[x] = kw;
			vt[x] = vw;
		}
		for (uint j = tid; j < cnt; j += gl_WorkGroupSize.x) {
			pt[j] = kPos[t0 + j];
		}
		barrier();
		bool past = p.sorted != 0u && pt[0] > last; // uniform: no row sees any of these, or later ones
		if (!past) {
			// 1. The scores of the subgroup's rows, to shared memory.
#ifdef EMULATE_COOPMAT
			for (uint ct = 0u; ct < CT; ct++) {
				for (uint e = 0u; e < 8u; e++) {
					uint kb = (16u * ct + 8u * side + e) * HD; // the key's first half
					float a = 0.0;
					for (uint d = 0u; d < HD; d++) {
						vec2 hl = unpackHalf2x16(qhl[d]);
						float kd = keyHalf(kb + d);
						a += hl.x * kd + hl.y * kd;
					}
					ss[sgS + r * BC + 16u * ct + 8u * side + e] = floatBitsToUint(a);
				}
			}
#else
			[[unroll]] for (uint ct = 0u; ct < CT; ct++) {
				sacc[ct] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
				[[unroll]] for (uint t = 0u; t < HT; t++) {
					// B = K^T: column n of the tile is key 16ct+n's dimensions 16t ..
					fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> kb;
					coopMatLoadNV(kb, kt, 16u * ct * H8 + 2u * t, H8, true);
					sacc[ct] = coopMatMulAddNV(ql[t], kb, sacc[ct]);
					sacc[ct] = coopMatMulAddNV(qh[t], kb, sacc[ct]);
				}
				coopMatStoreNV(sacc[ct], ss, sgS + 16u * ct, BC, false);
			}
#endif
			SG_SYNC();
			// 2. The softmax's block step, two lanes a row.
			float sc[HALF];
			float bm = NO_SCORE;
			for (uint jj = 0u; jj < HALF; jj++) {
				uint j = side * HALF + jj;
#ifdef EMULATE_COOPMAT
				sc[jj] = uintBitsToFloat(ss[sgS + r * BC + j]) * p.scale;
#else
				sc[jj] = ss[sgS + r * BC + j] * p.scale;
#endif
				if (live && j < cnt && pt[j] <= qp) {
					bm = maxNaN(bm, sc[jj]);
				} else {
					sc[jj] = NO_SCORE; // masked: no probability
				}
			}
			pairSh[u] = bm;
			SG_SYNC();
			bm = maxNaN(bm, pairSh[u ^ 1u]);
			float alpha = 1.0;
			if (!(bm <= NO_SCORE)) { // the row sees a key of the block (or a score is NaN)
				float mn = maxNaN(m, bm);
				alpha = exp(m - mn);
				m = mn;
			}
			l *= alpha;
			for (uint jj = 0u; jj < HALF; jj++) {
				uint j = side * HALF + jj;
				float pe = sc[jj] <= NO_SCORE ? 0.0 : exp(sc[jj] - m);
				l += pe;
				float x = pe * PSCALE;
				float hi = toHalf(x);
#ifdef EMULATE_COOPMAT
				ss[sgS + r * BC + j] = packHalf2x16(vec2(hi, toHalf(x - hi)));
#else
				ph[sgP + r * BC + j] = float16_t(hi);
				ph[sgP + 16u * BC + r * BC + j] = float16_t(x - hi);
#endif
			}
			if (side == 0u) {
				alphaSh[sg * 16u + r] = alpha;
			}
			SG_SYNC();
			// 3. O = O * alpha + P V.
#ifdef EMULATE_COOPMAT
			float a = alphaSh[sg * 16u + r]; // every element this lane holds is in row r
			for (uint t = 0u; t < HT; t++) {
				for (uint e = 0u; e < 8u; e++) {
					uint d = 16u * t + 8u * side + e;
					float o = oacc[t * 8u + e] * a;
					for (uint j = 0u; j < BC; j++) {
						vec2 pw = unpackHalf2x16(ss[sgS + r * BC + j]);
						float vd = valHalf(j * HD + d);
						o += pw.y * vd + pw.x * vd;
					}
					oacc[t * 8u + e] = o;
				}
			}
#else
			fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> pa[CT], pl[CT];
			[[unroll]] for (uint ct = 0u; ct < CT; ct++) {
				coopMatLoadNV(pa[ct], ph, sgP + 16u * ct, BC, false);
				coopMatLoadNV(pl[ct], ph, sgP + 16u * BC + 16u * ct, BC, false);
			}
			[[unroll]] for (uint t = 0u; t < HT; t++) {
				for (int x = 0; x < oacc[t].length(); x++) {
					oacc[t][x] *= alphaSh[sg * 16u + uint(rowm[x])];
				}
				[[unroll]] for (uint ct = 0u; ct < CT; ct++) {
					// B = V: row k of the tile is key 16ct+k's dimensions 16t ..
					fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> vb;
					coopMatLoadNV(vb, vt, 16u * ct * H8 + 2u * t, H8, false);
					oacc[t] = coopMatMulAddNV(pl[ct], vb, oacc[t]);
					oacc[t] = coopMatMulAddNV(pa[ct], vb, oacc[t]);
				}
			}
#endif
		}
		barrier(); // everyone is done with the block before the next is staged
		if (past) {
			break;
		}
	}

	// The row's sum is its two lanes'; its output is P V / PSCALE.
	pairSh[u] = l;
	SG_SYNC();
	l += pairSh[u ^ 1u];
	[[unroll]] for (uint t = 0u; t < HT; t++) {
#ifndef EMULATE_COOPMAT
		coopMatStoreNV(oacc[t], ss, sgS, 16u, false);
		SG_SYNC();
#endif
		for (uint e = 0u; e < 8u; e++) {
#ifdef EMULATE_COOPMAT
			float o = oacc[t * 8u + e];
#else
			float o = ss[sgS + r * 16u + 8u * side + e];
#endif
			if (live && l != 0.0) { // l = 0: no key seen, partO left as it was (attention_merge skips it)
				partO[pb * HD + 16u * t + 8u * side + e] = o * (1.0 / PSCALE);
			}
		}
#ifndef EMULATE_COOPMAT
		SG_SYNC(); // read before the next tile's store
#endif
	}
	if (live && side == 0u) {
		partML[pb] = vec2(m, l);
	}
}
