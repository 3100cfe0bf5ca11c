#version 450
// decode_attend: a decode step's whole attention in one dispatch
// (DESIGN.md §6, at most 5 dispatches per block): decode_kv's RoPE and KV
// append, then decode_attention's split pass and decode_attention_combine's
// merge, for one token whose raw q, k and v lie in qkv (the q|k|v matvec's
// output).
//
// A workgroup per (head h, chunk s of SPLITS): the cache's entries are
// c = counts[layer] old ones plus the token's own at index c, cut into
// SPLITS chunks of ceil((c+1)/SPLITS). Each workgroup
//   1. rotates its head of q, and its kv head's new k, at the token's
//      position (rope.comp's angle), and reads the new v, into shared
//      memory (rounded to halves with KV_F16, as the cache will hold
//      them); the chunk holding entry c uses them for it, so no workgroup
//      reads what another writes in this dispatch;
//   2. if it is its kv head's first (h % (nHead/nKVHead) = 0, s = 0),
//      appends k and v at entry c (and head 0 writes kPos[c] = pos);
//   3. runs the online softmax over its chunk (decode_attention.comp's
//      algorithm) and writes its max, sum and unnormalized output to part;
//   4. counts itself done for head h (an atomic in done[h]): the last of
//      the head's SPLITS workgroups merges their partial results into out
//      (as decode_attention_combine) and counts the head done (done[nHead]);
//      the last head's last workgroup sets counts[layer] = c + 1 and leaves
//      done at zero for the next dispatch.
// The "last workgroup" hand-off is the classic split-K pattern: part is
// coherent, each workgroup's writes are made visible (memoryBarrierBuffer)
// before its atomic, and the last one's reads come after it.
//
// In a routed block this runs indirectly, and not at all when the token
// was not selected: no entry, the count unchanged (as decode_kv).
// With KV_F16 the cache holds halves, two to a word.
//
// Specialization constants: 0 WG, 1 MAX_HD, 2 SPLITS (DecodeAttendSpec).
// Dispatch DecodeAttendGroups(nHead, splits). done must start at zero.
#include "include/common.glsl"
#define OP_DECODE_ATTEND
#include "include/push_decode.glsl"

layout(local_size_x = 32, local_size_x_id = 0) in;
layout(constant_id = 1) const uint MAX_HD = 128; // the largest headDim
layout(constant_id = 2) const uint SPLITS = 16;

layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };     // q [nHead*headDim], k at kOff, v at vOff, raw
layout(std430, binding = 1) readonly buffer Pos { uint pos[]; };      // [1] the token's original position
layout(std430, binding = 2) readonly buffer Freq { uvec2 freq[]; };   // [headDim/2] from RopeFreqs
#ifdef KV_F16
layout(std430, binding = 3) buffer K { uint k[]; };                   // [maxEntries][nKVHead*headDim/2] f16 pairs, rotated
layout(std430, binding = 4) buffer V { uint v[]; };                   // [maxEntries][nKVHead*headDim/2] f16 pairs
float kAt(uint i) { return unpackHalf2x16(k[i >> 1])[i & 1u]; }
float vAt(uint i) { return unpackHalf2x16(v[i >> 1])[i & 1u]; }
#else
layout(std430, binding = 3) buffer K { float k[]; };                  // [maxEntries][nKVHead*headDim], rotated
layout(std430, binding = 4) buffer V { float v[]; };                  // [maxEntries][nKVHead*headDim]
float kAt(uint i) { return k[i]; }
float vAt(uint i) { return v[i]; }
#endif
layout(std430, binding = 5) buffer KPos { uint kPos[]; };             // [maxEntries] original positions
layout(std430, binding = 6) buffer Counts { uint counts[]; };         // [nLayer] entries per layer
layout(std430, binding = 7) coherent buffer Part { float part[]; };   // [nHead][SPLITS][2+headDim]: m, l, acc
layout(std430, binding = 8) coherent buffer Done { uint done[]; };    // [nHead+1] workgroups done, zero between dispatches
layout(std430, binding = 9) writeonly buffer Out { float out_[]; };   // [nHead*headDim]

shared float qs[MAX_HD];  // this head's q, rotated
shared float kn[MAX_HD];  // the token's k of this kv head, rotated
shared float vn[MAX_HD];  // the token's v of this kv head
shared float accs[MAX_HD * gl_WorkGroupSize.x]; // [d][invocation] running outputs
shared float ms[gl_WorkGroupSize.x];
shared float ls[gl_WorkGroupSize.x];
shared uint at;    // counts[layer] as this workgroup read it
shared bool last;  // this workgroup merges its head
shared bool lastAll; // this workgroup sets the count

const float NO_SCORE = -1e30; // as decode_attention.comp

void main() {
	const uint WG = gl_WorkGroupSize.x;
	uint tid = gl_LocalInvocationID.x;
	uint g = groupIndex();
	uint split = g % SPLITS, h = g / SPLITS;
	if (h >= p.nHead) {
		return; // a surplus workgroup of a 2D grid
	}
	uint hd = p.headDim, half_ = hd / 2u;
	uint kvh = h / (p.nHead / p.nKVHead);
	uint kvd = p.nKVHead * hd;
	uint ps = pos[0];
	if (tid == 0u) {
		at = counts[p.layer];
	}
	barrier();
	uint c = at;
	bool room = c < p.maxEntries;
	uint entries = room ? c + 1u : c;
	uint rp = p.compact != 0u ? c : ps; // the RoPE position: compact, the entry's index

	// 1. RoPE of q (this head) and of the new k (this kv head), as decode_kv.
	for (uint i = tid; i < half_; i += WG) {
		uint carry, lo;
		umulExtended(rp, freq[i].x, carry, lo);
		uint hi = rp * freq[i].y + carry;
		float turns = float(int(hi)) * (1.0 / 4294967296.0) + float(lo) * (1.0 / 18446744073709551616.0);
		float theta = turns * 6.28318530717958647692;
		float cs = cos(theta), sn = sin(theta);
		uint e = h * hd + 2u * i;
		float a = qkv[e], b = qkv[e + 1u];
		qs[2u * i] = a * cs - b * sn;
		qs[2u * i + 1u] = a * sn + b * cs;
		e = p.kOff + kvh * hd + 2u * i;
		a = qkv[e];
		b = qkv[e + 1u];
		kn[2u * i] = a * cs - b * sn;
		kn[2u * i + 1u] = a * sn + b * cs;
#ifdef KV_F16
		// The token attends to its own key as the cache holds it, as the
		// batched prefill and decode_attention do (they read it back): a
		// token's logits then do not depend on whether it was decoded here
		// or prefilled.
		kn[2u * i] = toHalf(kn[2u * i]);
		kn[2u * i + 1u] = toHalf(kn[2u * i + 1u]);
#endif
	}
	for (uint d = tid; d < hd; d += WG) {
		vn[d] = qkv[p.vOff + kvh * hd + d];
#ifdef KV_F16
		vn[d] = toHalf(vn[d]); // its value too
#endif
	}
	for (uint d = 0u; d < hd; d++) {
		accs[d * WG + tid] = 0.0;
	}
	barrier(); // qs, kn, vn are complete

	// 2. The append, by one workgroup per kv head.
	if (room && split == 0u && h % (p.nHead / p.nKVHead) == 0u) {
		uint base = c * kvd + kvh * hd;
#ifdef KV_F16
		for (uint i = tid; i < half_; i += WG) {
			k[base / 2u + i] = packHalf2x16(vec2(kn[2u * i], kn[2u * i + 1u]));
			v[base / 2u + i] = packHalf2x16(vec2(vn[2u * i], vn[2u * i + 1u]));
		}
#else
		for (uint d = tid; d < hd; d += WG) {
			k[base + d] = kn[d];
			v[base + d] = vn[d];
		}
#endif
		if (h == 0u && tid == 0u) {
			kPos[c] = ps;
		}
	}

	// 3. The online softmax over this chunk. Entry c is the token itself:
	// from shared memory, and visible (its position is the query's).
	uint chunk = (entries + SPLITS - 1u) / SPLITS;
	uint first = min(split * chunk, entries), end = min(first + chunk, entries);
	float m = NO_SCORE, l = 0.0;
	for (uint e = first + tid; e < end; e += WG) {
		bool self = e == c;
		if (!self && kPos[e] > ps) {
			continue; // a later token: masked
		}
		uint kb = e * kvd + kvh * hd;
		float dot = 0.0;
		for (uint d = 0u; d < hd; d++) {
			dot += qs[d] * (self ? kn[d] : kAt(kb + d));
		}
		float s = dot * p.scale;
		if (!(s <= m)) { // a NaN score too: it becomes the max and spreads
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
			accs[d * WG + tid] += pe * (self ? vn[d] : vAt(kb + d));
		}
	}
	ms[tid] = m;
	barrier();
	float mx = NO_SCORE;
	for (uint t = 0u; t < WG; t++) {
		mx = maxNaN(mx, ms[t]);
	}
	float a = exp(m - mx);
	ls[tid] = l * a;
	for (uint d = 0u; d < hd; d++) {
		accs[d * WG + tid] *= a;
	}
	barrier();
	float sum = 0.0;
	for (uint t = 0u; t < WG; t++) {
		sum += ls[t];
	}
	uint stride = 2u + hd;
	uint pBase = (h * SPLITS + split) * stride;
	if (tid == 0u) {
		part[pBase] = mx;
		part[pBase + 1u] = sum;
	}
	for (uint d = tid; d < hd; d += WG) {
		float o = 0.0;
		for (uint t = 0u; t < WG; t++) {
			o += accs[d * WG + t];
		}
		part[pBase + 2u + d] = o;
	}

	// 4. The last workgroup of the head merges; the last head sets the count.
	memoryBarrierBuffer();
	barrier(); // every invocation's part writes precede the atomic
	if (tid == 0u) {
		last = atomicAdd(done[h], 1u) == SPLITS - 1u;
	}
	barrier();
	if (!last) {
		return;
	}
	memoryBarrierBuffer();
	uint base = h * SPLITS * stride;
	float gm = part[base];
	for (uint s = 1u; s < SPLITS; s++) {
		gm = maxNaN(gm, part[base + s * stride]);
	}
	float gl = 0.0;
	for (uint s = 0u; s < SPLITS; s++) {
		gl += part[base + s * stride + 1u] * exp(part[base + s * stride] - gm);
	}
	for (uint d = tid; d < hd; d += WG) {
		float o = 0.0;
		for (uint s = 0u; s < SPLITS; s++) {
			o += part[base + s * stride + 2u + d] * exp(part[base + s * stride] - gm);
		}
		out_[h * hd + d] = gl == 0.0 ? 0.0 : o / gl; // never negative; NaN stays
	}
	if (tid == 0u) {
		done[h] = 0u;
		lastAll = atomicAdd(done[p.nHead], 1u) == p.nHead - 1u;
		if (lastAll) {
			done[p.nHead] = 0u;
			counts[p.layer] = entries;
		}
	}
}
