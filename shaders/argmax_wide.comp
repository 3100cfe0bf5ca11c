#version 450
// argmax_wide: argmax (argmax.comp: out[r] = the index of the largest
// x[r][j], ties to the lower index; NONFINITE for a row holding a NaN or an
// infinity) with each row spread over many workgroups, for GPUs: argmax
// gives a row one workgroup of 128 invocations, each walking 250 of a
// 32,000-entry vocabulary one dependent load at a time, 59.2 us a call on
// an H200 (docs/decode-attention-cost.md), where a row's 128 KB take
// 0.03 us to read.
//
// Workgroup s of row r takes the row's columns [s*WG*PER, (s+1)*WG*PER):
// invocation t its PER columns t, t+WG, ... (ascending, loads coalesced and
// independent), keeping its first maximum; the workgroup folds the pairs
// (value, index) in a shared-memory tree where a tie goes to the lower
// index, writes its winner to part and counts itself done (done[r]); the
// row's last workgroup folds the row's partial winners the same way,
// writes out[r] and leaves done[r] at zero for the next dispatch (the
// split-K hand-off of decode_attend: each workgroup's part write is made
// visible before its atomic, the last one reads after it).
//
// Specialization constants: 0 WG, 1 PER (ArgmaxWideSpec). Dispatch
// ArgmaxWideGroups(n, cols, spec); part holds ArgmaxWidePartWords(n, cols,
// spec) words, done n words zero-filled once.
#include "include/common.glsl"
#define OP_ARGMAX
#include "include/push_dense.glsl"
#include "include/handoff.glsl"

layout(local_size_x = 256, local_size_x_id = 0) in;
layout(constant_id = 1) const uint PER = 4; // columns per invocation

layout(std430, binding = 0) HANDOFF_COHERENT readonly buffer X { float x[]; }; // [n][cols]
layout(std430, binding = 1) writeonly buffer Out { uint out_[]; }; // [n]
layout(std430, binding = 2) coherent buffer Part { uint part[]; }; // [n][groups][2]: a winner's value bits and index
layout(std430, binding = 3) coherent buffer Done { uint done[]; }; // [n] workgroups done, zero between dispatches

const uint NONFINITE = 0xfffffffeu;
const uint NONE = 0xffffffffu; // no column yet: loses every tie

shared float bestV[gl_WorkGroupSize.x];
shared uint bestI[gl_WorkGroupSize.x];
shared bool last;

// beats says whether (v, i) wins over (bv, bi): NONFINITE beats
// everything, NONE nothing; a tie goes to the lower index.
bool beats(float v, uint i, float bv, uint bi) {
	return i == NONFINITE || (bi != NONFINITE && i != NONE && (bi == NONE || v > bv || (v == bv && i < bi)));
}

// fold leaves the workgroup's winner of (bv, bi) in bestV[0], bestI[0].
void fold(uint tid, float bv, uint bi) {
	bestV[tid] = bv;
	bestI[tid] = bi;
	barrier();
	for (uint width = gl_WorkGroupSize.x; width > 1u;) {
		uint half_ = (width + 1u) / 2u;
		if (tid < width - half_ && beats(bestV[tid + half_], bestI[tid + half_], bestV[tid], bestI[tid])) {
			bestV[tid] = bestV[tid + half_];
			bestI[tid] = bestI[tid + half_];
		}
		width = half_;
		barrier();
	}
}

void main() {
	const uint WG = gl_WorkGroupSize.x;
	uint tid = gl_LocalInvocationID.x;
	uint span = WG * PER;
	uint groups = (p.cols + span - 1u) / span; // workgroups per row
	uint g = groupIndex();
	uint r = g / groups, s = g % groups;
	if (r >= p.n) {
		return; // a surplus workgroup of a 2D grid
	}
	uint base = r * p.cols;
	float bv = 0.0;
	uint bi = NONE;
	for (uint k = 0u; k < PER; k++) {
		uint j = s * span + k * WG + tid; // ascending in k: a strict > keeps the first maximum
		if (j < p.cols) {
			float v = x[base + j];
			if (isnan(v) || isinf(v)) {
				bi = NONFINITE;
			} else if (bi != NONFINITE && (bi == NONE || v > bv)) {
				bv = v;
				bi = j;
			}
		}
	}
	fold(tid, bv, bi);
	uint at = 2u * (r * groups + s);
	if (tid == 0u) {
		part[at] = floatBitsToUint(bestV[0]);
		part[at + 1u] = bestI[0];
	}
	memoryBarrierBuffer();
	barrier(); // the part write precedes the atomic
	if (tid == 0u) {
		last = atomicAdd(done[r], 1u) == groups - 1u;
	}
	barrier();
	if (!last) {
		return;
	}
	memoryBarrierBuffer();
	bv = 0.0;
	bi = NONE;
	for (uint t = tid; t < groups; t += WG) {
		float v = uintBitsToFloat(part[2u * (r * groups + t)]);
		uint i = part[2u * (r * groups + t) + 1u];
		if (beats(v, i, bv, bi)) {
			bv = v;
			bi = i;
		}
	}
	fold(tid, bv, bi);
	if (tid == 0u) {
		out_[r] = bestI[0];
		done[r] = 0u;
	}
}
#include "include/handoff_main.glsl"
