#version 450
// argmax: out[r] = the index of the largest x[r][j], ties to the lower index
// (mod.TopKIndices(x[r], 1)), for each row r of x (a logits vector per row).
// A row holding a NaN or an infinity gives NONFINITE instead: its logits
// are broken, and any index would pass for an ordinary token
// (shaders.ArgmaxNonFinite; the runner turns it into an error).
//
// TPR invocations (constant 1) share a row: each scans a stride keeping its
// first maximum, then the pairs (value, index) fold in a shared-memory tree
// where a tie goes to the lower index. The whole row is one workgroup's, so
// one dispatch gives the answer: no second pass. RowSpecGPU suits GPUs,
// Profile.Row on lavapipe.
#include "include/common.glsl"
#define OP_ARGMAX
#include "include/push_dense.glsl"

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 128; // invocations per row, divides the local size

layout(std430, binding = 0) readonly buffer X { float x[]; };   // [n][cols]
layout(std430, binding = 1) writeonly buffer Out { uint out_[]; }; // [n]

const uint NONFINITE = 0xfffffffeu;

shared float bestV[gl_WorkGroupSize.x];
shared uint bestI[gl_WorkGroupSize.x];

// beats says whether (v, i) wins over (bv, bi).
// NONFINITE beats everything.
bool beats(float v, uint i, float bv, uint bi) {
	return i == NONFINITE || (bi != NONFINITE && (v > bv || (v == bv && i < bi)));
}

void main() {
	uint tid = gl_LocalInvocationID.x, lane = tid % TPR;
	uint r = groupIndex() * (gl_WorkGroupSize.x / TPR) + tid / TPR;
	uint cols = r < p.n ? p.cols : 0u; // rows past the last are empty
	uint base = r * p.cols;
	float bv = uintBitsToFloat(0xff800000u); // -inf
	uint bi = 0xffffffffu;                   // loses every tie
	// Ascending within the stride, so a strict > keeps the first maximum.
	for (uint j = lane; j < cols; j += TPR) {
		float v = x[base + j];
		if (isnan(v) || isinf(v)) {
			bi = NONFINITE;
			break;
		}
		if (v > bv || bi == 0xffffffffu) {
			bv = v;
			bi = j;
		}
	}
	if (TPR > 1u) {
		bestV[tid] = bv;
		bestI[tid] = bi;
		barrier();
		for (uint width = TPR; width > 1u;) {
			uint half_ = (width + 1u) / 2u;
			if (lane < width - half_ && beats(bestV[tid + half_], bestI[tid + half_], bestV[tid], bestI[tid])) {
				bestV[tid] = bestV[tid + half_];
				bestI[tid] = bestI[tid + half_];
			}
			width = half_;
			barrier();
		}
		bi = bestI[tid];
	}
	if (r < p.n && lane == 0u) {
		out_[r] = bi;
	}
}
