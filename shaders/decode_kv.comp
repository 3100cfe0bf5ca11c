#version 450
// decode_kv: RoPE and the KV cache append of one token, for a decode step
// that is recorded once and replayed (DESIGN.md §6). In one dispatch:
//   - q (qkv[0:nHead*headDim]) is rotated in place at the token's position,
//   - k (qkv[kOff:]) is rotated into cache entry c of kCache, v (qkv[vOff:])
//     copied into entry c of vCache, and kPos[c] = pos,
//   - counts[layer] becomes c + 1,
// where c = counts[layer] is read on the GPU: the entry count of a routed
// layer's compact cache depends on routing decisions the CPU never sees
// (DESIGN.md §3), so the append index cannot be a push constant or a
// binding offset. In a routed block this kernel is dispatched indirectly and
// runs (one workgroup) only when the token was selected, so an unselected
// token leaves no entry and the count unchanged.
//
// RoPE is rope.comp's, exactly (Meta's interleaved pairs, the angle from a
// 64-bit fixed-point fraction of a turn; see rope.comp for why): the pair
// (2i, 2i+1) of every head turns by pos * freq[i], or with compact
// positions (push compact = 1, mod.PositionsCompact: the public MoD Llama 2
// and Mixture-AI layouts) by c * freq[i], the token's index among the
// tokens that entered the layer; kPos keeps the original position.
//
// With KV_F16 the cache holds halves (the default on GPUs: half the bytes
// that attention reads per token), two to a word: a RoPE pair, or two
// adjacent values, is one packHalf2x16 word (headDim is even).
//
// One workgroup. Invocation 0 reads the count into shared memory and, after
// a barrier that orders every other invocation's read of it, writes c + 1.
// Dispatch (1, 1, 1).
#include "include/common.glsl"
#define OP_DECODE_KV
#include "include/push_decode.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer QKV { float qkv[]; };               // q (rotated in place), k, v
layout(std430, binding = 1) readonly buffer Pos { uint pos[]; };       // [1] the token's original position
layout(std430, binding = 2) readonly buffer Freq { uvec2 freq[]; };    // [headDim/2] from RopeFreqs
#ifdef KV_F16
layout(std430, binding = 3) writeonly buffer KCache { uint kc[]; };    // [maxEntries][nKVHead*headDim/2] f16 pairs
layout(std430, binding = 4) writeonly buffer VCache { uint vc[]; };    // [maxEntries][nKVHead*headDim/2] f16 pairs
#else
layout(std430, binding = 3) writeonly buffer KCache { float kc[]; };   // [maxEntries][nKVHead*headDim]
layout(std430, binding = 4) writeonly buffer VCache { float vc[]; };   // [maxEntries][nKVHead*headDim]
#endif
layout(std430, binding = 5) writeonly buffer KPos { uint kPos[]; };    // [maxEntries]
layout(std430, binding = 6) buffer Counts { uint counts[]; };          // [nLayer] entries per layer

shared uint at;

void main() {
	const uint WG = gl_WorkGroupSize.x;
	uint tid = gl_LocalInvocationID.x;
	if (tid == 0u) {
		at = counts[p.layer];
	}
	barrier();
	uint c = at;
	uint ps = pos[0];
	uint rp = p.compact != 0u ? c : ps; // the RoPE position: compact, the entry's index
	uint half_ = p.headDim / 2u;
	uint kvd = p.nKVHead * p.headDim;
	bool room = c < p.maxEntries;
	for (uint i = tid; i < half_; i += WG) {
		// As rope.comp: turns = ps * freq mod 2^64 in units of 2^-64 turn,
		// then a signed fraction of a turn, so the angle is in [-pi, pi).
		uint carry, lo;
		umulExtended(rp, freq[i].x, carry, lo);
		uint hi = rp * freq[i].y + carry;
		float turns = float(int(hi)) * (1.0 / 4294967296.0) + float(lo) * (1.0 / 18446744073709551616.0);
		float theta = turns * 6.28318530717958647692;
		float cs = cos(theta), sn = sin(theta);
		for (uint h = 0u, e = 2u * i; h < p.nHead; h++, e += p.headDim) {
			float a = qkv[e], b = qkv[e + 1u];
			qkv[e] = a * cs - b * sn;
			qkv[e + 1u] = a * sn + b * cs;
		}
		if (room) {
			for (uint h = 0u, e = 2u * i; h < p.nKVHead; h++, e += p.headDim) {
				float a = qkv[p.kOff + e], b = qkv[p.kOff + e + 1u];
#ifdef KV_F16
				kc[(c * kvd + e) / 2u] = packHalf2x16(vec2(a * cs - b * sn, a * sn + b * cs));
#else
				kc[c * kvd + e] = a * cs - b * sn;
				kc[c * kvd + e + 1u] = a * sn + b * cs;
#endif
			}
		}
	}
	if (room) {
#ifdef KV_F16
		for (uint e = 2u * tid; e < kvd; e += 2u * WG) {
			vc[(c * kvd + e) / 2u] = packHalf2x16(vec2(qkv[p.vOff + e], qkv[p.vOff + e + 1u]));
		}
#else
		for (uint e = tid; e < kvd; e += WG) {
			vc[c * kvd + e] = qkv[p.vOff + e];
		}
#endif
		if (tid == 0u) {
			kPos[c] = ps;
			counts[p.layer] = c + 1u;
		}
	}
}
