#version 450
// attention: causal softmax attention with GQA over a compact KV cache whose
// entries carry their original positions (DESIGN.md §3: a routed layer's
// cache holds only its selected tokens, K already rotated).
//
//   out[i][h] = sum_e softmax_e(scale * q[i][h] . k[e][kvh]) v[e][kvh]
//   over the entries e with kPos[e] <= qPos[i] (the causal mask by original
//   position), kvh = h / (nHead/nKVHead). A row that sees no entry gets 0.
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
//
// The kernel does not assume the cache is sorted: a later entry is skipped by
// its position, not by its index.
//
// Specialization constants (AttentionSpec): 0 WG, 1 MAX_HD (headDim <=
// MAX_HD); shared memory is 4*(MAX_HD*(WG+1) + 2*WG) bytes. Dispatch
// Groups(n * nHead).
#include "include/common.glsl"
#define OP_ATTENTION
#include "include/push_matmul_attn.glsl"

layout(local_size_x = 32, local_size_x_id = 0) in;
layout(constant_id = 1) const uint MAX_HD = 128; // the largest headDim

layout(std430, binding = 0) readonly buffer Q { float q[]; };         // [n][nHead*headDim], rotated
layout(std430, binding = 1) readonly buffer K { float k[]; };         // [entries][nKVHead*headDim], rotated
layout(std430, binding = 2) readonly buffer V { float v[]; };         // [entries][nKVHead*headDim]
layout(std430, binding = 3) readonly buffer KPos { uint kPos[]; };    // [entries] original positions
layout(std430, binding = 4) readonly buffer QPos { uint qPos[]; };    // [n] original positions
layout(std430, binding = 5) writeonly buffer Out { float out_[]; };   // [n][nHead*headDim]

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
	if (g >= p.n * p.nHead) {
		return; // a surplus workgroup of a 2D grid: all its invocations leave
	}
	uint i = g / p.nHead, h = g % p.nHead;
	uint hd = p.headDim;
	uint kvh = h / (p.nHead / p.nKVHead);
	uint qBase = i * p.nHead * hd + h * hd;
	uint kvd = p.nKVHead * hd;
	uint qp = qPos[i];

	for (uint d = tid; d < hd; d += WG) {
		qs[d] = q[qBase + d];
	}
	for (uint d = 0u; d < hd; d++) {
		accs[d * WG + tid] = 0.0;
	}
	barrier(); // qs is complete

	float m = NO_SCORE, l = 0.0;
	for (uint e = tid; e < p.entries; e += WG) {
		if (kPos[e] > qp) {
			continue; // a later token: masked
		}
		uint kb = e * kvd + kvh * hd;
		float dot = 0.0;
		for (uint d = 0u; d < hd; d++) {
			dot += qs[d] * k[kb + d];
		}
		float s = dot * p.scale;
		if (s > m) { // a new max: rescale what was summed so far
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
			accs[d * WG + tid] += pe * v[kb + d];
		}
	}
	ms[tid] = m;
	barrier(); // every running max is in ms

	// Rescale this invocation's partial result to the common max.
	float mx = NO_SCORE;
	for (uint t = 0u; t < WG; t++) {
		mx = max(mx, ms[t]);
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
	for (uint d = tid; d < hd; d += WG) {
		float o = 0.0;
		for (uint t = 0u; t < WG; t++) {
			o += accs[d * WG + t];
		}
		out_[qBase + d] = sum > 0.0 ? o / sum : 0.0;
	}
}
