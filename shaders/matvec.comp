#version 450
// matvec: y[s][r] = W[r] . x[s] for decode, with W in F32, F16 or Q8_0 (one
// of WEIGHT_F32, WEIGHT_F16, WEIGHT_Q8_0) and x, y in F32.
//
// A workgroup of WG invocations (specialization constant 0) takes WG/TPR
// rows of W; TPR invocations (constant 1, a divisor of WG) share a row: they
// stride over it (a block of 32 at a time for Q8_0), then sum their partial
// dot products in shared memory (a tree, no subgroup operations: core Vulkan
// 1.2 only). A GPU wants many invocations per row (TPR = 32..64: coalesced
// loads); a CPU device (lavapipe) wants TPR = 1, where each invocation owns a
// row and no barrier runs. The row is read once for up to NB vectors at a
// time (constant 2), so a step with a few tokens costs about one pass over
// the weights. More than 65535 workgroups use a 2D grid (groupIndex).
#include "include/common.glsl"
#define OP_MATVEC
#include "include/push.glsl"

layout(local_size_x = 64, local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 64; // invocations per row, divides WG

layout(std430, binding = 0) readonly buffer Weights { uint w[]; }; // [rows] rows of ggml bytes
layout(std430, binding = 1) readonly buffer X { float x[]; };      // [n][cols]
layout(std430, binding = 2) writeonly buffer Y { float y[]; };     // [n][rows]

#include "include/weights.glsl"

// Vectors per pass over the row (constant 2). A pass costs NB loads of x per
// weight even when fewer vectors are left, so decode (n = 1) wants NB = 1.
layout(constant_id = 2) const uint NB = 1;

shared float partial[NB * gl_WorkGroupSize.x];

// accumulate adds to acc[k] the partial dot product of this invocation's
// part of row r with x[s0 + k] (k < NB; vectors past n repeat the last one
// and their sums are discarded).
void accumulate(uint r, uint s0, uint lane, inout float acc[NB]) {
	const uint WG = TPR; // the stride: invocations on this row
	uint tid = lane;
	uint xs[NB];
	for (uint k = 0u; k < NB; k++) {
		xs[k] = min(s0 + k, p.n - 1u) * p.cols;
	}
#if defined(WEIGHT_F32)
	uint base = r * p.cols;
	for (uint j = tid; j < p.cols; j += WG) {
		float wv = loadF32(base + j);
		for (uint k = 0u; k < NB; k++) {
			acc[k] += wv * x[xs[k] + j];
		}
	}
#elif defined(WEIGHT_F16)
	if ((p.cols & 1u) == 0u) { // rows start on a word: read pairs
		uint base = r * (p.cols / 2u);
		for (uint j = tid; j < p.cols / 2u; j += WG) {
			vec2 wv = loadF16Pair(base + j);
			for (uint k = 0u; k < NB; k++) {
				acc[k] += wv.x * x[xs[k] + 2u * j] + wv.y * x[xs[k] + 2u * j + 1u];
			}
		}
	} else {
		uint base = r * p.cols;
		for (uint j = tid; j < p.cols; j += WG) {
			float wv = loadF16(base + j);
			for (uint k = 0u; k < NB; k++) {
				acc[k] += wv * x[xs[k] + j];
			}
		}
	}
#elif defined(WEIGHT_Q8_0)
	uint blocks = p.cols / 32u;
	for (uint b = tid; b < blocks; b += WG) {
		uint at = (r * blocks + b) * 34u; // byte offset of the block
		float d = loadHalf(at);
		float sums[NB];
		for (uint k = 0u; k < NB; k++) {
			sums[k] = 0.0;
		}
		for (uint q = 0u; q < 8u; q++) {
			vec4 qv = vec4(loadQ8Quad(at + 2u, q));
			for (uint k = 0u; k < NB; k++) {
				uint e = xs[k] + b * 32u + 4u * q;
				sums[k] += dot(qv, vec4(x[e], x[e + 1u], x[e + 2u], x[e + 3u]));
			}
		}
		for (uint k = 0u; k < NB; k++) {
			acc[k] += d * sums[k];
		}
	}
#else
#error "define one of WEIGHT_F32, WEIGHT_F16, WEIGHT_Q8_0"
#endif
}

void main() {
	const uint WG = gl_WorkGroupSize.x;
	uint tid = gl_LocalInvocationID.x;
	uint lane = tid % TPR;
	uint r = groupIndex() * (WG / TPR) + tid / TPR;
	// Invocations past the last row compute row rows-1 again and drop it, so
	// every invocation reaches every barrier.
	bool live = r < p.rows;
	r = min(r, p.rows - 1u);
	for (uint s0 = 0u; s0 < p.n; s0 += NB) {
		float acc[NB];
		for (uint k = 0u; k < NB; k++) {
			acc[k] = 0.0;
		}
		accumulate(r, s0, lane, acc);
		if (TPR > 1u) {
			for (uint k = 0u; k < NB; k++) {
				partial[k * WG + tid] = acc[k];
			}
			barrier();
			// Tree sum over the row's invocations, any TPR: fold the upper
			// part onto the lower.
			for (uint width = TPR; width > 1u;) {
				uint half_ = (width + 1u) / 2u;
				if (lane < width - half_) {
					for (uint k = 0u; k < NB; k++) {
						partial[k * WG + tid] += partial[k * WG + tid + half_];
					}
				}
				width = half_;
				barrier();
			}
			for (uint k = 0u; k < NB; k++) {
				acc[k] = partial[k * WG + tid];
			}
			barrier(); // partial is reused by the next pass
		}
		if (live && lane == 0u) {
			for (uint k = 0u; k < NB && s0 + k < p.n; k++) {
				y[(s0 + k) * p.rows + r] = acc[k];
			}
		}
	}
}
