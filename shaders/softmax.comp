#version 450
// softmax: out[r] = softmax(x[r]) for each row r, max subtracted first, in
// F32, as mod.Softmax: e = exp(x - max), then e / sum(e). out may be x (in
// place: an element is read and written by one invocation, after the row's
// max is complete). out is read back (the exponentials are stored, then
// divided), so it is bound read-write.
//
// TPR invocations (constant 1) share a row (include/rowreduce.glsl).
#include "include/common.glsl"
#define OP_SOFTMAX
#include "include/push_dense.glsl"

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 128; // invocations per row, divides the local size

layout(std430, binding = 0) readonly buffer X { float x[]; };   // [n][cols]
layout(std430, binding = 1) buffer Out { float out_[]; };       // [n][cols]

#include "include/rowreduce.glsl"

void main() {
	uint r = rowIndex(), lane = rowLane();
	uint cols = r < p.n ? p.cols : 0u; // rows past the last are empty
	uint base = r * p.cols;
	float mx = uintBitsToFloat(0xff800000u); // -inf
	for (uint j = lane; j < cols; j += TPR) {
		mx = maxNaN(mx, x[base + j]);
	}
	mx = rowMax(mx);
	float sum = 0.0;
	for (uint j = lane; j < cols; j += TPR) {
		float e = exp(x[base + j] - mx);
		out_[base + j] = e;
		sum += e;
	}
	sum = rowSum(sum);
	for (uint j = lane; j < cols; j += TPR) {
		out_[base + j] /= sum;
	}
}
