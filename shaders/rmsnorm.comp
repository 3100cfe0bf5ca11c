#version 450
// rmsnorm: out[r] = x[r] / sqrt(mean(x[r]²) + eps) * w for each row r of x,
// in F32, as mod.RMSNorm. out may be x (in place: each element is read and
// written by the same invocation, after the row's sum is complete).
//
// TPR invocations (constant 1) share a row and sum their strided squares in
// a tree (include/rowreduce.glsl): RowSpecGPU, or Profile.Row on a CPU device (dense.go, profile.go).
#include "include/common.glsl"
#define OP_RMSNORM
#include "include/push_dense.glsl"

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 128; // invocations per row, divides the local size

layout(std430, binding = 0) readonly buffer X { float x[]; };        // [n][cols]
layout(std430, binding = 1) readonly buffer W { float w[]; };        // [cols]
layout(std430, binding = 2) writeonly buffer Out { float out_[]; };  // [n][cols]

#include "include/rowreduce.glsl"

void main() {
	uint r = rowIndex(), lane = rowLane();
	// Invocations past the last row take an empty row, so that every
	// invocation reaches every barrier.
	uint cols = r < p.n ? p.cols : 0u;
	uint base = r * p.cols;
	float ss = 0.0;
	for (uint j = lane; j < cols; j += TPR) {
		float v = x[base + j];
		ss += v * v;
	}
	ss = rowSum(ss);
	float inv = 1.0 / sqrt(ss / float(p.cols) + p.eps);
	for (uint j = lane; j < cols; j += TPR) {
		out_[base + j] = x[base + j] * inv * w[j];
	}
}
