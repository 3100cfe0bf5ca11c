#version 450
// probe: how fast the device streams memory, the yardstick of `modrun
// bench` (effective bandwidth as a fraction of what the device can do).
// probe_fill writes a pattern over the buffer (never time a read of zeros:
// some memory systems compress them); probe_read reads every 16-byte
// element once, coalesced, in a grid-stride loop, and folds it into an XOR
// that is stored only if it equals a magic number, so the loads cannot be
// optimised away and nothing is written. Dispatch ProbeGroups(n).
#include "include/common.glsl"
#include "include/push_probe.glsl"

layout(local_size_x = 256) in;

#ifdef PROBE_FILL
layout(std430, binding = 0) writeonly buffer Src { uvec4 src[]; }; // [n]
#else
layout(std430, binding = 0) readonly buffer Src { uvec4 src[]; }; // [n]
layout(std430, binding = 1) writeonly buffer Sink { uint sink[]; }; // [1]
#endif

void main() {
	uint stride = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_WorkGroupSize.x;
	uint i = groupIndex() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
#ifdef PROBE_FILL
	for (; i < p.n; i += stride) {
		uint h = i * 0x9E3779B1u;
		src[i] = uvec4(h, h ^ 0x85EBCA6Bu, h * 0xC2B2AE35u, ~h);
	}
#else
	uvec4 acc = uvec4(0);
	for (; i < p.n; i += stride) {
		acc ^= src[i];
	}
	uint r = acc.x ^ acc.y ^ acc.z ^ acc.w;
	if (r == p.magic) {
		sink[0] = r;
	}
#endif
}
