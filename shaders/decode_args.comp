#version 450
// decode_args: the indirect-dispatch arguments of a routed block's kernels in
// a decode step (one token): args[j] = groups[j] when the token was selected
// (count[0] != 0, written by compact_positive), else (0, 1, 1), a valid
// dispatch that runs nothing. groups is the table of each kernel's workgroup
// counts for one token, uploaded once; so the whole block is recorded once
// and the GPU alone decides whether it runs (DESIGN.md §6: the CPU never
// reads a routing decision back to decide what to record).
//
// Dispatch Groups(ceil(m / 64)).
#include "include/common.glsl"
#define OP_DECODE_ARGS
#include "include/push_decode.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Count { uint count[]; };   // [1] selected tokens (0 or 1)
layout(std430, binding = 1) readonly buffer Groups { uint groups[]; }; // [m][3] workgroups when selected
layout(std430, binding = 2) writeonly buffer Args { uint args[]; };    // [m][3] VkDispatchIndirectCommand

void main() {
	uint j = groupIndex() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (j >= p.m) {
		return;
	}
	bool run = count[0] != 0u;
	args[3u * j] = run ? groups[3u * j] : 0u;
	args[3u * j + 1u] = run ? groups[3u * j + 1u] : 1u;
	args[3u * j + 2u] = run ? groups[3u * j + 2u] : 1u;
}
