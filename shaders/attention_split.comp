#version 450
// attention_split and attention_merge: attention.comp's causal softmax
// attention with GQA over a compact KV cache (entries carry their original
// positions; entry e is visible to row i iff kPos[e] <= qPos[i]), with the
// entries cut into key tiles of splitLen (flash-decoding's split-K), so any
// context runs on any device: a workgroup walks one tile of one (row, head),
// so the loops per invocation are bounded by splitLen, not by the context
// (lavapipe runs at most LavapipeLoopIterations per loop invocation), and a
// long context gives the GPU splits times more workgroups.
//
// ATTN_SPLIT: workgroup (row i, head h, tile s) runs attention.comp's
//   algorithm over entries [s*splitLen, min((s+1)*splitLen, entries)):
//   each invocation keeps an online softmax (running max m, sum l, output
//   acc) over every WG-th entry, merged in the workgroup by the common max,
//   and writes the tile's partial result: its max m_s, sum l_s and the
//   unnormalised output o_s[d] = sum_e exp(score_e - m_s) v[e][d].
//   With ATTN_COUNTS the entry count is counts[layer] (the generate-mode
//   cache, whose count the GPU keeps); entries is then only the most there
//   can be, which sets the grid. Dispatch Groups(n * nHead * splits).
//   With KV_F16 the cache holds halves, two to a word (a generate-mode
//   cache of shaders.KVF16: prefill_kv_f16, decode_kv_f16).
// ATTN_MERGE: workgroup (row, head) combines the splits partials: M = max
//   m_s, L = sum l_s exp(m_s - M), out[d] = sum o_s[d] exp(m_s - M) / L; a
//   row that sees no entry (L = 0) gets 0. Dispatch Groups(n * nHead).
//
// Specialization constants: 0 WG, 1 MAX_HD (AttentionSpec).
#include "include/common.glsl"
#define OP_ATTENTION_SPLIT
#include "include/push_matmul_attn.glsl"

layout(local_size_x = 32, local_size_x_id = 0) in;
const float NO_SCORE = -1e30; // below any score, finite (see attention.comp)

#if defined(ATTN_SPLIT)
layout(constant_id = 1) const uint MAX_HD = 128; // the largest headDim

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

shared float qs[MAX_HD];
shared float accs[MAX_HD * gl_WorkGroupSize.x]; // [d][invocation]
shared float ms[gl_WorkGroupSize.x];
shared float ls[gl_WorkGroupSize.x];

void main() {
	const uint WG = gl_WorkGroupSize.x;
	uint tid = gl_LocalInvocationID.x;
	uint g = groupIndex();
	if (g >= p.n * p.nHead * p.splits) {
		return;
	}
	uint s = g % p.splits, ih = g / p.splits;
	uint i = ih / p.nHead, h = ih % p.nHead;
	uint hd = p.headDim;
	uint kvh = h / (p.nHead / p.nKVHead);
	uint qBase = i * p.nHead * hd + h * hd;
	uint kvd = p.nKVHead * hd;
	uint qp = qPos[i];
#ifdef ATTN_COUNTS
	uint entries = min(counts[p.layer], p.entries);
#else
	uint entries = p.entries;
#endif
	uint e0 = s * p.splitLen, e1 = min(e0 + p.splitLen, entries);

	for (uint d = tid; d < hd; d += WG) {
		qs[d] = q[qBase + d];
	}
	for (uint d = 0u; d < hd; d++) {
		accs[d * WG + tid] = 0.0;
	}
	barrier();

	float m = NO_SCORE, l = 0.0;
	for (uint e = e0 + tid; e < e1; e += WG) {
		if (kPos[e] > qp) {
			if (p.sorted != 0u) {
				break; // every later entry of this invocation is later still
			}
			continue;
		}
		uint kb = e * kvd + kvh * hd;
		float dot = 0.0;
		for (uint d = 0u; d < hd; d++) {
			dot += qs[d] * kAt(kb + d);
		}
		float sc = dot * p.scale;
		if (sc > m) {
			float a = exp(m - sc);
			l *= a;
			for (uint d = 0u; d < hd; d++) {
				accs[d * WG + tid] *= a;
			}
			m = sc;
		}
		float pe = exp(sc - m);
		l += pe;
		for (uint d = 0u; d < hd; d++) {
			accs[d * WG + tid] += pe * vAt(kb + d);
		}
	}
	ms[tid] = m;
	barrier();

	float mx = NO_SCORE;
	for (uint t = 0u; t < WG; t++) {
		mx = max(mx, ms[t]);
	}
	float a = exp(m - mx);
	ls[tid] = l * a;
	for (uint d = 0u; d < hd; d++) {
		accs[d * WG + tid] *= a;
	}
	barrier();

	uint pb = ih * p.splits + s;
	for (uint d = tid; d < hd; d += WG) {
		float o = 0.0;
		for (uint t = 0u; t < WG; t++) {
			o += accs[d * WG + t];
		}
		partO[pb * hd + d] = o;
	}
	if (tid == 0u) {
		float sum = 0.0;
		for (uint t = 0u; t < WG; t++) {
			sum += ls[t];
		}
		partML[pb] = vec2(mx, sum);
	}
}

#elif defined(ATTN_MERGE)
layout(std430, binding = 0) readonly buffer PartO { float partO[]; };   // [n*nHead*splits][headDim]
layout(std430, binding = 1) readonly buffer PartML { vec2 partML[]; };  // [n*nHead*splits] (m, l)
layout(std430, binding = 2) writeonly buffer Out { float out_[]; };     // [n][nHead*headDim]

void main() {
	const uint WG = gl_WorkGroupSize.x;
	uint ih = groupIndex();
	if (ih >= p.n * p.nHead) {
		return;
	}
	uint hd = p.headDim;
	uint pb = ih * p.splits;
	float mx = NO_SCORE;
	for (uint s = 0u; s < p.splits; s++) {
		mx = max(mx, partML[pb + s].x);
	}
	float sum = 0.0;
	for (uint s = 0u; s < p.splits; s++) {
		vec2 ml = partML[pb + s];
		sum += ml.y * exp(ml.x - mx);
	}
	for (uint d = gl_LocalInvocationID.x; d < hd; d += WG) {
		float o = 0.0;
		for (uint s = 0u; s < p.splits; s++) {
			o += partO[(pb + s) * hd + d] * exp(partML[pb + s].x - mx);
		}
		out_[ih * hd + d] = sum > 0.0 ? o / sum : 0.0;
	}
}
#else
#error "define ATTN_SPLIT or ATTN_MERGE"
#endif
