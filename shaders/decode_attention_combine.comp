#version 450
// decode_attention_combine: the second pass of flash-decoding. For each
// query row i and head h, merge the SPLITS partial results of
// decode_attention's SPLIT variant (each chunk's max m_s, sum l_s and
// unnormalized output acc_s, over its own max) into the softmax output:
//   M = max_s m_s,  L = sum_s l_s exp(m_s - M),
//   out[d] = sum_s acc_s[d] exp(m_s - M) / L   (0 when L = 0: no visible entry).
// An empty chunk has m = NO_SCORE (finite, far below any score), so its
// weight exp(m_s - M) is 0 or, when every chunk is empty, its l and acc are.
// A workgroup per (row, head), its invocations over the head's dimensions.
// Dispatch Groups(n * nHead).
#include "include/common.glsl"
#define OP_DECODE_ATTENTION_COMBINE
#include "include/push_decode.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Partial { float part[]; }; // [n][nHead][splits][2+headDim]: m, l, acc
layout(std430, binding = 1) writeonly buffer Out { float out_[]; };    // [n][nHead*headDim]

void main() {
	uint g = groupIndex();
	if (g >= p.n * p.nHead) {
		return;
	}
	uint hd = p.headDim, stride = 2u + hd;
	uint base = g * p.splits * stride;
	float mx = part[base];
	for (uint s = 1u; s < p.splits; s++) {
		mx = maxNaN(mx, part[base + s * stride]);
	}
	float sum = 0.0;
	for (uint s = 0u; s < p.splits; s++) {
		sum += part[base + s * stride + 1u] * exp(part[base + s * stride] - mx);
	}
	for (uint d = gl_LocalInvocationID.x; d < hd; d += gl_WorkGroupSize.x) {
		float o = 0.0;
		for (uint s = 0u; s < p.splits; s++) {
			o += part[base + s * stride + 2u + d] * exp(part[base + s * stride] - mx);
		}
		out_[g * hd + d] = sum == 0.0 ? 0.0 : o / sum; // never negative; NaN stays
	}
}
