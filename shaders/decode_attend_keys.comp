#version 450
// decode_attend_keys: decode_attend (the same bindings, push constants,
// dispatch, part and done, and its results up to the order of the sums:
// the same tests bound both) with its keys spread over
// the workgroup's invocations and its loops of constant length, for GPUs,
// where decode_attend is latency-bound at short contexts
// (docs/decode-attention-cost.md: 25 us a call on an H200 at 70 entries).
//
// decode_attend gives each invocation whole keys, and walks a key's
// headDim elements one at a time twice (its score, then its value into a
// column of shared accumulators), a load from the cache per step in a loop
// whose length is a push constant: about 2*headDim dependent cache loads
// per key on the critical path, however few the keys. Here, per tile of WG
// entries of the workgroup's chunk:
//   1. invocation t scores entry t of the tile: its key's HD/2 pairs are
//      loaded by a loop of constant length (HD is a specialization
//      constant: the driver unrolls it, and the loads are independent), q
//      from shared memory (a broadcast), into sc[t];
//   2. after one barrier, invocation t < HD/2 owns the output pair t: it
//      takes the tile's max of sc (a loop over the tile's entries, no
//      reduction tree), rescales its running sum and pair as the online
//      softmax does, and adds exp(score - max) * v for each entry, its v
//      pair a coalesced load beside its neighbours', in batches of VBATCH
//      entries whose loads are in flight together.
// Every invocation of step 2 holds the same max and sum, so the chunk's
// result needs no reduction across invocations: invocation 0 writes the
// max and sum, each invocation its pair. The merge of the chunks by the
// last workgroup of a head, the append, RoPE and the count are
// decode_attend's (see there), but for the merge's loads, all issued at
// once (SPLITS is a constant) and merged in registers.
//
// Masked entries (kPos > the token's position) score MASKED, below
// NO_SCORE, and add nothing; a NaN score becomes the max and spreads, as in
// decode_attend. With KV_F16 the token's own key and value are used as the
// cache will hold them (toHalf, never unpackHalf2x16(packHalf2x16(x)),
// which NVIDIA's compiler folds away: include/common.glsl).
//
// Specialization constants: 0 WG (>= HD/2), 1 HD (the model's
// headDim exactly: the push constant's headDim is not read), 2 SPLITS
// (DecodeAttendKeysSpec). Dispatch DecodeAttendGroups(nHead, splits). done
// must start at zero.
#include "include/common.glsl"
#define OP_DECODE_ATTEND
#include "include/push_decode.glsl"
#include "include/handoff.glsl"

layout(local_size_x = 64, local_size_x_id = 0) in;
layout(constant_id = 1) const uint HD = 64;
layout(constant_id = 2) const uint SPLITS = 16;
const uint HALF = HD / 2u;

layout(std430, binding = 0) HANDOFF_COHERENT readonly buffer QKV { float qkv[]; }; // q [nHead*HD], k at kOff, v at vOff, raw
layout(std430, binding = 1) readonly buffer Pos { uint pos[]; };      // [1] the token's original position
layout(std430, binding = 2) readonly buffer Freq { uvec2 freq[]; };   // [HD/2] from RopeFreqs
#ifdef KV_F16
layout(std430, binding = 3) buffer K { uint k[]; };                   // [maxEntries][nKVHead*HD/2] f16 pairs, rotated
layout(std430, binding = 4) buffer V { uint v[]; };                   // [maxEntries][nKVHead*HD/2] f16 pairs
vec2 kPair(uint w) { return unpackHalf2x16(k[w]); }
vec2 vPair(uint w) { return unpackHalf2x16(v[w]); }
#else
layout(std430, binding = 3) buffer K { float k[]; };                  // [maxEntries][nKVHead*HD], rotated
layout(std430, binding = 4) buffer V { float v[]; };                  // [maxEntries][nKVHead*HD]
vec2 kPair(uint w) { return vec2(k[2u * w], k[2u * w + 1u]); }
vec2 vPair(uint w) { return vec2(v[2u * w], v[2u * w + 1u]); }
#endif
layout(std430, binding = 5) buffer KPos { uint kPos[]; };             // [maxEntries] original positions
layout(std430, binding = 6) buffer Counts { uint counts[]; };         // [nLayer] entries per layer
layout(std430, binding = 7) coherent buffer Part { float part[]; };   // [nHead][SPLITS][2+HD]: m, l, acc
layout(std430, binding = 8) coherent buffer Done { uint done[]; };    // [nHead+1] workgroups done, zero between dispatches
layout(std430, binding = 9) writeonly buffer Out { float out_[]; };   // [nHead*HD]

shared vec2 qs[HALF];  // this head's q, rotated, in pairs
shared vec2 kn[HALF];  // the token's k of this kv head, rotated (as the cache holds it)
shared vec2 vn[HALF];  // the token's v of this kv head (as the cache holds it)
shared float sc[gl_WorkGroupSize.x]; // the tile's scores
shared bool last;    // this workgroup merges its head

const float NO_SCORE = -1e30; // as decode_attend.comp
const float MASKED = -3e38;   // a masked entry's score: below NO_SCORE, adds nothing
const uint VBATCH = 8u;       // entries a batch of the value loop

void main() {
	const uint WG = gl_WorkGroupSize.x;
	uint tid = gl_LocalInvocationID.x;
	uint g = groupIndex();
	uint split = g % SPLITS, h = g / SPLITS;
	if (h >= p.nHead) {
		return; // a surplus workgroup of a 2D grid
	}
	uint group = p.nHead / p.nKVHead;
	uint kvh = h / group;
	uint kvw = p.nKVHead * HALF; // pairs per cache entry
	uint ps = pos[0];
	// Every invocation reads the count itself (no barrier for a shared
	// copy): the only write to it, at the end, follows every workgroup's
	// atomic, which follows all of its reads.
	uint c = counts[p.layer];
	bool room = c < p.maxEntries;
	uint entries = room ? c + 1u : c;
	uint rp = p.compact != 0u ? c : ps; // the RoPE position: compact, the entry's index

	// 1. RoPE of q (this head) and of the new k (this kv head), as decode_kv.
	for (uint i = tid; i < HALF; i += WG) {
		uint carry, lo;
		umulExtended(rp, freq[i].x, carry, lo);
		uint hi = rp * freq[i].y + carry;
		float turns = float(int(hi)) * (1.0 / 4294967296.0) + float(lo) * (1.0 / 18446744073709551616.0);
		float theta = turns * 6.28318530717958647692;
		float cs = cos(theta), sn = sin(theta);
		uint e = h * HD + 2u * i;
		float a = qkv[e], b = qkv[e + 1u];
		qs[i] = vec2(a * cs - b * sn, a * sn + b * cs);
		e = p.kOff + kvh * HD + 2u * i;
		a = qkv[e];
		b = qkv[e + 1u];
		vec2 kr = vec2(a * cs - b * sn, a * sn + b * cs);
		e = p.vOff + kvh * HD + 2u * i;
		vec2 vr = vec2(qkv[e], qkv[e + 1u]);
#ifdef KV_F16
		// The token attends to its own key and value as the cache holds
		// them, as decode_attend does (see there).
		kr = vec2(toHalf(kr.x), toHalf(kr.y));
		vr = vec2(toHalf(vr.x), toHalf(vr.y));
#endif
		kn[i] = kr;
		vn[i] = vr;
	}
	barrier(); // qs, kn, vn are complete

	// 2. The append, by one workgroup per kv head.
	if (room && split == 0u && h % group == 0u) {
		uint base = c * kvw + kvh * HALF;
		for (uint i = tid; i < HALF; i += WG) {
#ifdef KV_F16
			k[base + i] = packHalf2x16(kn[i]);
			v[base + i] = packHalf2x16(vn[i]);
#else
			k[2u * (base + i)] = kn[i].x;
			k[2u * (base + i) + 1u] = kn[i].y;
			v[2u * (base + i)] = vn[i].x;
			v[2u * (base + i) + 1u] = vn[i].y;
#endif
		}
		if (h == 0u && tid == 0u) {
			kPos[c] = ps;
		}
	}

	// 3. The online softmax over this chunk, a tile of WG entries at a time.
	// Entry c is the token itself: from shared memory, and visible (its
	// position is the query's).
	uint chunk = (entries + SPLITS - 1u) / SPLITS;
	uint first = min(split * chunk, entries), end = min(first + chunk, entries);
	float m = NO_SCORE, l = 0.0;
	vec2 acc = vec2(0.0);
	uint kvb = kvh * HALF; // this kv head's first pair in an entry
	for (uint t0 = first; t0 < end; t0 += WG) {
		uint e = t0 + tid;
		float s = MASKED;
		if (e < end) {
			float dot = 0.0;
			if (e == c) {
				for (uint i = 0u; i < HALF; i++) {
					dot += qs[i].x * kn[i].x;
					dot += qs[i].y * kn[i].y;
				}
				s = dot * p.scale;
			} else {
				// The key's loads do not wait for its position, one round
				// trip off the critical path: the mask is applied after (a
				// masked key is read for nothing, rare in a decode step,
				// whose cache entries precede the token).
				bool visible = kPos[e] <= ps;
				uint w = e * kvw + kvb;
				for (uint i = 0u; i < HALF; i++) {
					vec2 kk = kPair(w + i);
					dot += qs[i].x * kk.x;
					dot += qs[i].y * kk.y;
				}
				s = visible ? dot * p.scale : MASKED; // a later token: masked
			}
		}
		sc[tid] = s;
		barrier(); // the tile's scores are complete
		uint n = min(end - t0, WG);
		if (tid < HALF) { // HALF <= WG (DecodeAttendKeysSpec): a pair an invocation
			uint i = tid;
			float mt = m;
			for (uint j = 0u; j < n; j++) {
				mt = maxNaN(mt, sc[j]);
			}
			float a = exp(m - mt);
			l *= a;
			acc *= a;
			m = mt;
			// The entries in batches of VBATCH, a loop of constant length
			// the driver unrolls: a batch's value loads are independent, in
			// flight together, where a loop of n entries one at a time
			// would wait on each at a long context.
			for (uint j0 = 0u; j0 < n; j0 += VBATCH) {
				for (uint k = 0u; k < VBATCH; k++) {
					uint j = j0 + k;
					float sj = j < n ? sc[j] : MASKED;
					if (sj <= MASKED) {
						continue; // masked, or past the tile (a NaN compares false and is added)
					}
					float pe = exp(sj - m);
					l += pe;
					uint ej = t0 + j;
					acc += pe * (ej == c ? vn[i] : vPair(ej * kvw + kvb + i));
				}
			}
		}
		barrier(); // sc is free for the next tile
	}
	uint stride = 2u + HD;
	uint pBase = (h * SPLITS + split) * stride;
	if (tid == 0u) { // tid 0 < HALF: it ran step 2 and holds the chunk's max and sum
		part[pBase] = m;
		part[pBase + 1u] = l;
	}
	if (tid < HALF) {
		part[pBase + 2u + 2u * tid] = acc.x;
		part[pBase + 3u + 2u * tid] = acc.y;
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
	if (tid < HALF) {
		// Every chunk's max, sum and output pair loaded at once (SPLITS is
		// a constant: independent loads, one round trip), then merged in
		// registers: no shared weights, no barrier.
		float ms[SPLITS], ls[SPLITS];
		vec2 os[SPLITS];
		for (uint s = 0u; s < SPLITS; s++) {
			uint b = base + s * stride;
			ms[s] = part[b];
			ls[s] = part[b + 1u];
			os[s] = vec2(part[b + 2u + 2u * tid], part[b + 3u + 2u * tid]);
		}
		float gm = ms[0];
		for (uint s = 1u; s < SPLITS; s++) {
			gm = maxNaN(gm, ms[s]);
		}
		float gl = 0.0;
		vec2 o = vec2(0.0);
		for (uint s = 0u; s < SPLITS; s++) {
			float w = exp(ms[s] - gm);
			gl += ls[s] * w;
			o += os[s] * w;
		}
		vec2 r = gl == 0.0 ? vec2(0.0) : o / gl; // never negative; NaN stays
		out_[h * HD + 2u * tid] = r.x;
		out_[h * HD + 2u * tid + 1u] = r.y;
	}
	if (tid == 0u) {
		done[h] = 0u;
		if (atomicAdd(done[p.nHead], 1u) == p.nHead - 1u) {
			done[p.nHead] = 0u;
			counts[p.layer] = entries;
		}
	}
}
#include "include/handoff_main.glsl"
