#version 450
// attention_split and attention_merge: causal softmax attention with GQA
// over a compact KV cache (entries carry their original positions; entry e
// is visible to row i iff kPos[e] <= qPos[i]), for a batch of query rows
// (a prefill chunk, an eval window), with the entries cut into key tiles of
// splitLen (flash-decoding's split-K), so any context runs on any device:
// the loops of an invocation are bounded by splitLen, not by the context
// (lavapipe runs at most LavapipeLoopIterations per invocation), and a long
// context gives the GPU splits times more workgroups.
//
// ATTN_SPLIT: workgroup (block b of WG query rows, head h, tile s), flash
//   attention's way: the workgroup stages BKEYS keys and values of the tile
//   at a time in shared memory, and each invocation, one query row
//   (b*WG + its index) with its query and output in registers, runs an
//   online softmax (running max m, sum l, output acc) over them. Every key
//   read from memory thus serves WG rows (one workgroup per row would read
//   it WG times). Each staged block is scored first, then the running
//   state is rescaled once to the block's max and each key takes one exp.
//   The tile's partial result of each row is its max m_s,
//   sum l_s and the unnormalised output o_s[d] = sum_e exp(score_e - m_s)
//   v[e][d], written only where the tile saw a key (l != 0: a tile past
//   the cache's count, or before a row's position, leaves partO as it was
//   and writes (m, l) = (NO_SCORE, 0), which attention_merge skips: at a
//   long context's bound most tiles of a prompt are). With Sorted (kPos
//   ascends: every cache here) a row stops at
//   its first later entry, and the workgroup at the first staged block that
//   none of its rows sees. With ATTN_COUNTS the entry count is
//   counts[layer] (the generate-mode cache, whose count the GPU keeps);
//   entries is then only the most there can be, which sets the grid. With
//   KV_F16 the cache holds halves, two to a word (a generate-mode cache of
//   shaders.KVF16: prefill_kv_f16, decode_kv_f16). Dispatch
//   AttentionSplitGroups(n, nHead, splits).
// ATTN_MERGE: workgroup (row, head) combines the splits partials: M = max
//   m_s, L = sum l_s exp(m_s - M), out[d] = sum o_s[d] exp(m_s - M) / L,
//   reading o_s only where l_s != 0; a row that sees no entry (L = 0) gets
//   0. Dispatch Groups(n * nHead).
//
// ATTN_LANES (with ATTN_SPLIT): LPR invocations a query row, lanes of one
//   subgroup, each holding the quads d4 = lane, lane + LPR, ... of the
//   row's query and output: an invocation keeps 2*HD/LPR floats of them in
//   registers instead of 2*HD (at HD 128, 256: past NVIDIA's 255 registers
//   a thread; RADV's compiler for RDNA3 spilled 631 registers, 178 at HD 64:
//   docs/decode-attention-cost.md). A score is the lanes' partial sums
//   (each over its quads in order) added by subgroupShuffleXor, the same
//   sum in every lane of the row. Rows per workgroup: WG / LPR.
//
// Specialization constants (AttentionSplitSpec, Profile.AttentionSplit): 0
// WG (rows per workgroup; with ATTN_LANES invocations, LPR a row), 1 HD
// (the head dimension, exactly: the register arrays and their loops have
// constant bounds), 2 BKEYS (keys staged at a time: the shared tiles are
// 2*BKEYS*HD floats), 3 LPR (ATTN_LANES: lanes a row, a power of 2 up to
// the subgroup size). ATTN_MERGE takes only WG.
#if defined(ATTN_LANES)
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#include "include/common.glsl"
#define OP_ATTENTION_SPLIT
#include "include/push_matmul_attn.glsl"

layout(local_size_x = 32, local_size_x_id = 0) in;
const float NO_SCORE = -1e30; // below any score, finite (see decode_attention.comp)

#if defined(ATTN_SPLIT)
layout(constant_id = 1) const uint HD = 64;     // the head dimension
layout(constant_id = 2) const uint BKEYS = 32;  // keys staged at a time
#ifdef ATTN_LANES
layout(constant_id = 3) const uint LPR = 4;     // lanes a row
#else
const uint LPR = 1u;
#endif

layout(std430, binding = 0) readonly buffer Q { float q[]; };         // [n][nHead*headDim], rotated
#ifdef KV_F16
layout(std430, binding = 1) readonly buffer K { uint k[]; };          // [entries][nKVHead*headDim/2] f16 pairs, rotated
layout(std430, binding = 2) readonly buffer V { uint v[]; };          // [entries][nKVHead*headDim/2] f16 pairs
float kAt(uint i) { return unpackHalf2x16(k[i >> 1])[i & 1u]; }
float vAt(uint i) { return unpackHalf2x16(v[i >> 1])[i & 1u]; }
#else
layout(std430, binding = 1) readonly buffer K { float k[]; };         // [entries][nKVHead*headDim], rotated
layout(std430, binding = 2) readonly buffer V { float v[]; };         // [entries][nKVHead*headDim]
float kAt(uint i) { return k[i]; }
float vAt(uint i) { return v[i]; }
#endif
layout(std430, binding = 3) readonly buffer KPos { uint kPos[]; };    // [entries] original positions
layout(std430, binding = 4) readonly buffer QPos { uint qPos[]; };    // [n] original positions
layout(std430, binding = 5) readonly buffer Counts { uint counts[]; }; // ATTN_COUNTS: [nLayer]; else unread
layout(std430, binding = 6) writeonly buffer PartO { float partO[]; }; // [n*nHead*splits][headDim]
layout(std430, binding = 7) writeonly buffer PartML { vec2 partML[]; }; // [n*nHead*splits] (m, l)


const uint HD4 = (HD + 3u) / 4u; // quads of the head, the last zero-padded
const uint HDL = (HD4 + LPR - 1u) / LPR; // quads a lane holds: lane c has c, c + LPR, ...

// The staged keys and values in quads: one 16-byte load serves four
// multiply-adds (on lavapipe each shared load is a gather).
shared vec4 kt[BKEYS * HD4]; // [key][d/4]
shared vec4 vt[BKEYS * HD4]; // [key][d/4]
shared uint pt[BKEYS];       // their positions
shared uint lastPos;         // the latest position of the block's rows

void main() {
	const uint WG = gl_WorkGroupSize.x;
	const uint ROWS = WG / LPR;
	uint tid = gl_LocalInvocationID.x;
#ifdef ATTN_LANES
	// A row's lanes are LPR neighbours in one subgroup.
	uint lane = gl_SubgroupInvocationID % LPR;
	uint row = gl_SubgroupID * (gl_SubgroupSize / LPR) + gl_SubgroupInvocationID / LPR;
#else
	const uint lane = 0u;
	uint row = tid;
#endif
	uint g = groupIndex();
	uint blocks = (p.n + ROWS - 1u) / ROWS;
	if (g >= blocks * p.nHead * p.splits) {
		return; // the whole workgroup: g is uniform
	}
	uint s = g % p.splits, bh = g / p.splits;
	uint h = bh % p.nHead, i = (bh / p.nHead) * ROWS + row;
	bool live = i < p.n;
	uint kvh = h / (p.nHead / p.nKVHead);
	uint kvd = p.nKVHead * HD;
#ifdef ATTN_COUNTS
	uint entries = min(counts[p.layer], p.entries);
#else
	uint entries = p.entries;
#endif
	uint e0 = s * p.splitLen, e1 = min(e0 + p.splitLen, entries);
	uint pb = (i * p.nHead + h) * p.splits + s;
	if (e0 >= entries) { // a tile past the cache's count (uniform): nothing to see
		if (live && lane == 0u) {
			partML[pb] = vec2(NO_SCORE, 0.0);
		}
		return;
	}

	vec4 qr[HDL], acc[HDL];
	uint qp = 0u;
	if (tid == 0u) {
		lastPos = 0u;
	}
	barrier();
	for (uint c = 0u; c < HDL; c++) {
		qr[c] = vec4(0.0);
		acc[c] = vec4(0.0);
	}
	if (live) {
		qp = qPos[i];
		uint qBase = i * p.nHead * HD + h * HD;
		for (uint c = 0u; c < HDL; c++) {
			for (uint t = 0u; t < 4u; t++) {
				uint d = 4u * (lane + LPR * c) + t;
				if (d < HD) {
					qr[c][t] = q[qBase + d];
				}
			}
		}
		atomicMax(lastPos, qp);
	}
	barrier();
	uint last = lastPos;

	float m = NO_SCORE, l = 0.0;
	for (uint t0 = e0; t0 < e1; t0 += BKEYS) {
		uint cnt = min(BKEYS, e1 - t0);
		for (uint j = 0u; j < cnt; j++) { // no division per element: lavapipe does those a lane at a time
			uint at = (t0 + j) * kvd + kvh * HD;
			for (uint d4 = tid; d4 < HD4; d4 += WG) {
				vec4 kq = vec4(0.0), vq = vec4(0.0);
				for (uint t = 0u; t < 4u; t++) {
					if (4u * d4 + t < HD) {
						kq[t] = kAt(at + 4u * d4 + t);
						vq[t] = vAt(at + 4u * d4 + t);
					}
				}
				kt[j * HD4 + d4] = kq;
				vt[j * HD4 + d4] = vq;
			}
		}
		for (uint j = tid; j < cnt; j += WG) {
			pt[j] = kPos[t0 + j];
		}
		barrier();
		bool past = p.sorted != 0u && pt[0] > last; // uniform: no row sees any of these, or later ones
		if (live && !past) {
			// The staged keys' scores first, then one rescale to their max
			// and an exp per key: flash attention's block step.
			float sc[BKEYS];
			float bm = NO_SCORE;
			uint jn = cnt; // keys to look at: with Sorted, up to the first later one
			for (uint j = 0u; j < cnt; j++) {
				if (pt[j] > qp) {
					if (p.sorted != 0u) {
						jn = j;
						break;
					}
					continue;
				}
				// In element order, as mod.Attend sums: a score of 100 or
				// more moves its probability by its rounding (ulps of 1e-5).
				float dt = 0.0;
				for (uint c = 0u; c < HDL; c++) {
					uint d4 = lane + LPR * c;
					if (LPR == 1u || d4 < HD4) {
						vec4 kq = kt[j * HD4 + d4];
						dt += qr[c].x * kq.x;
						dt += qr[c].y * kq.y;
						dt += qr[c].z * kq.z;
						dt += qr[c].w * kq.w;
					}
				}
#ifdef ATTN_LANES
				for (uint o = 1u; o < LPR; o <<= 1) { // a row's lanes share a subgroup
					dt += subgroupShuffleXor(dt, o);
				}
#endif
				sc[j] = dt * p.scale;
				bm = maxNaN(bm, sc[j]);
			}
			if (!(bm <= NO_SCORE)) { // some key is visible (or a score is NaN)
				float mn = maxNaN(m, bm);
				float a = exp(m - mn);
				l *= a;
				for (uint c = 0u; c < HDL; c++) {
					acc[c] *= a;
				}
				m = mn;
				for (uint j = 0u; j < jn; j++) {
					if (pt[j] > qp) {
						continue;
					}
					float pe = exp(sc[j] - m);
					l += pe;
					for (uint c = 0u; c < HDL; c++) {
						uint d4 = lane + LPR * c;
						if (LPR == 1u || d4 < HD4) {
							acc[c] += pe * vt[j * HD4 + d4];
						}
					}
				}
			}
		}
		barrier(); // everyone is done with the tile before the next is staged
		if (past) {
			break;
		}
	}
	if (live && l != 0.0) { // l = 0: no key seen, and partO is left as it was (attention_merge skips it); a NaN l writes
		for (uint c = 0u; c < HDL; c++) {
			for (uint t = 0u; t < 4u; t++) {
				uint d = 4u * (lane + LPR * c) + t;
				if (d < HD) {
					partO[pb * HD + d] = acc[c][t];
				}
			}
		}
	}
	if (live && lane == 0u) {
		partML[pb] = vec2(m, l);
	}
}

#elif defined(ATTN_MERGE)
layout(std430, binding = 0) readonly buffer PartO { float partO[]; };   // [n*nHead*splits][headDim]
layout(std430, binding = 1) readonly buffer PartML { vec2 partML[]; };  // [n*nHead*splits] (m, l)
layout(std430, binding = 2) writeonly buffer Out { float out_[]; };     // [n][nHead*headDim]

#include "include/attention_merge.glsl"

void main() {
	uint ih = groupIndex();
	if (ih >= p.n * p.nHead) {
		return;
	}
	mergeSplits(ih, p.headDim, p.splits, gl_LocalInvocationID.x, gl_WorkGroupSize.x);
}
#else
#error "define ATTN_SPLIT or ATTN_MERGE"
#endif
