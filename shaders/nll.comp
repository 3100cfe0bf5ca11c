#version 450
// nll: the loss of teacher-forced scoring, on the device, so that scoring a
// window downloads a float per row instead of its nVocab logits:
//   out[r] = log(sum_j exp(x[r][j] - m)) + m - x[r][target[r]],  m = max_j x[r][j],
// for each row r of logits x: -log softmax(x[r])[target[r]], the negative
// log-likelihood of the token that follows row r (engine.Perplexity's nll,
// which sums in float64; here F32 sums, a tree over the row's invocations).
// A row holding a NaN or an infinity gives NaN (maxNaN keeps a NaN, and an
// infinite maximum makes inf - inf): broken logits never pass as a loss. A
// target outside [0, cols) reads nothing and gives NaN too.
//
// Logits over maxStorageBufferRange (a 2048-token window of a 32,000
// vocabulary is 262 MB) are bound in pieces of rows, a dispatch each: x
// holds the piece's rows, row r of it is row rowBase + r of target and out.
//
// TPR invocations (constant 1) share a row (include/rowreduce.glsl).
#include "include/common.glsl"
#define OP_NLL
#include "include/push_dense.glsl"

layout(local_size_x = 128, local_size_x_id = 0) in;
layout(constant_id = 1) const uint TPR = 128; // invocations per row, divides the local size

layout(std430, binding = 0) readonly buffer X { float x[]; };          // [n][cols]: rows rowBase.. of the logits
layout(std430, binding = 1) readonly buffer Target { uint target[]; }; // [rowBase+n] token ids
layout(std430, binding = 2) writeonly buffer Out { float out_[]; };    // [rowBase+n]

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
		sum += exp(x[base + j] - mx);
	}
	sum = rowSum(sum);
	if (r < p.n && lane == 0u) {
		uint t = target[p.rowBase + r];
		float xt = t < p.cols ? x[base + t] : uintBitsToFloat(0x7fc00000u);
		out_[p.rowBase + r] = (log(sum) + mx) - xt;
	}
}
