#version 450
// decode_attention: causal softmax attention with GQA over a compact KV
// cache whose entries carry their original positions (DESIGN.md §3: a
// routed layer's cache holds only its selected tokens, K already rotated),
// for the decode step:
//
//   out[i][h] = sum_e softmax_e(scale * q[i][h] . k[e][kvh]) v[e][kvh]
//   over the entries e with kPos[e] <= qPos[i] (the causal mask by original
//   position), kvh = h / (nHead/nKVHead). A row that sees no entry gets 0.
//
// The number of entries is read from a buffer (counts[layer]), not a push
// constant, so that a decode step recorded once can be replayed while the
// cache grows: the count is maintained on the GPU by decode_kv (and, in a
// routed layer, depends on routing decisions the CPU never reads).
//
// A workgroup takes one (query row, head). The cache can be as long as the
// context, so the scores do not fit anywhere at once: each of the WG
// invocations walks every WG-th entry with its own online softmax (running
// max m, running sum l, running output acc rescaled whenever m grows;
// Milakov & Gimelshein 2018) and no barrier, which suits lavapipe, where a
// workgroup barrier costs more than the arithmetic. At the end the WG partial
// results are merged by the common max: two barriers, then each invocation
// sums a few output dimensions over the partials. The accumulators live in
// shared memory, [headDim][WG], because headDim is a push constant (one
// kernel for every model) and a register array needs a compile-time size.
// The kernel does not assume the cache is sorted: a later entry is skipped
// by its position, not by its index. (Batches of rows go to
// attention_split.comp, which shares each key among 32 rows.)
//
// With KV_F16 the cache holds halves, two to a word (decode_kv's KV_F16).
//
// With SPLIT (flash-decoding, DESIGN.md §6) the entries are cut into
// SPLITS chunks (constant 2) of ceil(entries/SPLITS), a workgroup each, so a
// long context keeps the whole GPU busy instead of nHead workgroups; each
// writes its chunk's running max m, sum l and unnormalized output acc
// (the softmax of its chunk before the division) to out as
// [n][nHead][SPLITS][2 + headDim], and decode_attention_combine merges them.
// An empty chunk writes m = NO_SCORE, l = 0, acc = 0.
//
// Specialization constants (AttentionSpec, DecodeAttentionSplitSpec): 0 WG,
// 1 MAX_HD, 2 SPLITS (SPLIT only). Dispatch AttentionGroups(n, nHead), or
// DecodeAttentionSplitGroups(n, nHead, splits).
#include "include/common.glsl"
#define OP_DECODE_ATTENTION
#include "include/push_decode.glsl"

layout(local_size_x = 32, local_size_x_id = 0) in;
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
layout(std430, binding = 5) readonly buffer Counts { uint counts[]; }; // [nLayer] entries per layer
layout(std430, binding = 6) writeonly buffer Out { float out_[]; };   // [n][nHead*headDim]; SPLIT: [n][nHead][SPLITS][2+headDim]

#ifdef SPLIT
layout(constant_id = 2) const uint SPLITS = 16;
#endif

shared float qs[MAX_HD];              // this row's query head
shared float accs[MAX_HD * gl_WorkGroupSize.x]; // [d][invocation] running outputs
shared float ms[gl_WorkGroupSize.x];  // running max of each invocation
shared float ls[gl_WorkGroupSize.x];  // running sum, then rescaled to the common max

// Below any score: the running max before the first visible entry. Finite,
// so that m - max stays a number (exp of it is 0) without relying on the
// driver's handling of infinities.
const float NO_SCORE = -1e30;

void main() {
	const uint WG = gl_WorkGroupSize.x;
	uint tid = gl_LocalInvocationID.x;
	uint g = groupIndex();
#ifdef SPLIT
	uint split = g % SPLITS;
	g /= SPLITS;
#endif
	if (g >= p.n * p.nHead) {
		return; // a surplus workgroup of a 2D grid: all its invocations leave
	}
	uint i = g / p.nHead, h = g % p.nHead;
	uint hd = p.headDim;
	uint kvh = h / (p.nHead / p.nKVHead);
	uint qBase = i * p.nHead * hd + h * hd;
	uint kvd = p.nKVHead * hd;
	uint qp = qPos[i];
	uint first = 0u, entries = counts[p.layer];
#ifdef SPLIT
	uint chunk = (entries + SPLITS - 1u) / SPLITS;
	first = min(split * chunk, entries);
	entries = min(first + chunk, entries);
#endif

	for (uint d = tid; d < hd; d += WG) {
		qs[d] = q[qBase + d];
	}
	for (uint d = 0u; d < hd; d++) {
		accs[d * WG + tid] = 0.0;
	}
	barrier(); // qs is complete

	float m = NO_SCORE, l = 0.0;
	for (uint e = first + tid; e < entries; e += WG) {
		if (kPos[e] > qp) {
			continue; // a later token: masked
		}
		uint kb = e * kvd + kvh * hd;
		float dot = 0.0;
		for (uint d = 0u; d < hd; d++) {
			dot += qs[d] * kAt(kb + d);
		}
		float s = dot * p.scale;
		if (!(s <= m)) { // a new max (or a NaN, which spreads): rescale what was summed so far
			float a = exp(m - s);
			l *= a;
			for (uint d = 0u; d < hd; d++) {
				accs[d * WG + tid] *= a;
			}
			m = s;
		}
		float pe = exp(s - m);
		l += pe;
		for (uint d = 0u; d < hd; d++) {
			accs[d * WG + tid] += pe * vAt(kb + d);
		}
	}
	ms[tid] = m;
	barrier(); // every running max is in ms

	// Rescale this invocation's partial result to the common max.
	float mx = NO_SCORE;
	for (uint t = 0u; t < WG; t++) {
		mx = maxNaN(mx, ms[t]);
	}
	float a = exp(m - mx);
	ls[tid] = l * a;
	for (uint d = 0u; d < hd; d++) {
		accs[d * WG + tid] *= a;
	}
	barrier(); // every partial is rescaled

	float sum = 0.0;
	for (uint t = 0u; t < WG; t++) {
		sum += ls[t];
	}
#ifdef SPLIT
	uint pBase = (g * SPLITS + split) * (2u + hd); // this chunk's partial
	if (tid == 0u) {
		out_[pBase] = mx;
		out_[pBase + 1u] = sum;
	}
	for (uint d = tid; d < hd; d += WG) {
		float o = 0.0;
		for (uint t = 0u; t < WG; t++) {
			o += accs[d * WG + t];
		}
		out_[pBase + 2u + d] = o;
	}
#else
	for (uint d = tid; d < hd; d += WG) {
		float o = 0.0;
		for (uint t = 0u; t < WG; t++) {
			o += accs[d * WG + t];
		}
		out_[qBase + d] = sum == 0.0 ? 0.0 : o / sum; // never negative; NaN stays
	}
#endif
}
