#version 450
// probe_fma: how fast the device's shader arithmetic runs, the FP32 peak
// that `modrun run --profile` and `modrun bench` put a kernel's TFLOP/s
// against. Each invocation runs CHAINS independent chains x = fma(x, a, b)
// in registers, UNROLL steps of each per trip, p.iterations trips: 2 *
// CHAINS * UNROLL * p.iterations FLOPs (ProbeFMAFLOPs), no memory traffic
// but one float written at the end. Independent chains hide the FMA's
// latency; the unrolled steps, the loop's own instructions. a and b come
// from push constants so the compiler cannot fold the chains; with a = b =
// 1 chain c ends at exactly c + UNROLL*iterations, and the sum written,
// 28 + CHAINS*UNROLL*iterations, is a count of the steps run (the probe
// checks it, and so does TestProbeFMACounts). Dispatch any number of
// workgroups (ProbeFMAGroups); out is [groups*256].
#include "include/common.glsl"
#include "include/push_probe_flops.glsl"
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = 256) in;

layout(std430, binding = 0) writeonly buffer Out { float outv[]; }; // [groups*256]

const uint CHAINS = 8u; // ProbeFMAChains
const uint UNROLL = 8u; // ProbeFMAUnroll

void main() {
	float x[CHAINS];
	[[unroll]] for (uint c = 0u; c < CHAINS; c++) {
		x[c] = float(c);
	}
	for (uint it = 0u; it < p.iterations; it++) {
		[[unroll]] for (uint u = 0u; u < UNROLL; u++) {
			[[unroll]] for (uint c = 0u; c < CHAINS; c++) {
				x[c] = fma(x[c], p.a, p.b);
			}
		}
	}
	float s = 0.0;
	[[unroll]] for (uint c = 0u; c < CHAINS; c++) {
		s += x[c];
	}
	outv[groupIndex() * gl_WorkGroupSize.x + gl_LocalInvocationID.x] = s;
}
