#version 450
// dot_x: a batched step's n vectors of x quantized to 8 bits once, for
// matvec_dot's PREQ variants, which would otherwise each quantize every
// vector in every workgroup (docs/matvec-cost.md, "Batched"): an
// invocation a chunk of 32 values, in the same operations as matvec_dot
// (include/dotx.glsl), blocks of XB (32; 256 for the K-quants: a chunk's
// max into shared memory, a barrier, its block's 8). With NORM, x times
// the RMSNorm weight, and each chunk's sum of squares of the raw values
// for the matvec's 1/rms.
//
// Out (DotXBytes' layout, words): [n][cols/4] q, four int8 a word; then
// [n][cols/32] each: the chunk's halves' sums of q (int16 pairs), its
// block's scale (NaN for a block holding a NaN or an infinity), the sum of
// squares of its raw values (read by the matvec under the norm only).
//
// Push: MatvecPush (cols a multiple of XB, n; rows and eps unused).
// Dispatch: (ceil(cols / 8192), n, 1), 256 chunks a workgroup.
#extension GL_EXT_control_flow_attributes : require
#include "include/common.glsl"
#define OP_MATVEC
#include "include/push.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer X4 { vec4 x4[]; }; // [n][cols]
layout(std430, binding = 1) writeonly buffer XQ { uint xg[]; };
layout(std430, binding = 1) writeonly buffer XQ4 { uvec4 xg4[]; };
#ifdef NORM
layout(std430, binding = 2) readonly buffer NormW4 { vec4 nw4[]; }; // [cols]
#endif

#include "include/dotx.glsl"

#ifdef XB_WIDE
shared float am[256]; // each chunk's max|x|; negative when it holds a NaN or an infinity
#endif

void main() {
	uint tid = gl_LocalInvocationID.x, chunks = p.cols / 32u, v = gl_WorkGroupID.y;
	uint c = gl_WorkGroupID.x * 256u + tid;
	bool live = c < chunks;
	vec4 val[8];
	float ss = 0.0, amax = 0.0;
	if (live) {
		amax = dotxLoad(v, c, val, ss);
	}
#ifdef XB_WIDE
	// A workgroup's 256 chunks are 32 whole blocks (cols a multiple of 256).
	am[tid] = amax;
	barrier();
	bool bad = false;
	float bmax = 0.0;
	[[unroll]] for (uint b = 0u; b < 8u; b++) {
		float m = am[(tid & ~7u) + b];
		bad = bad || m < 0.0;
		bmax = max(bmax, m);
	}
	amax = bad ? -1.0 : bmax;
#endif
	if (!live) {
		return;
	}
	uint q[8], s2;
	dotxQuantize(val, amax, q, s2);
	uint g = v * chunks + c, meta = p.n * (p.cols / 4u), nc = p.n * chunks;
	xg4[2u * g] = uvec4(q[0], q[1], q[2], q[3]);
	xg4[2u * g + 1u] = uvec4(q[4], q[5], q[6], q[7]);
	xg[meta + g] = s2;
	xg[meta + nc + g] = floatBitsToUint(dotxScale(amax));
	xg[meta + 2u * nc + g] = floatBitsToUint(ss);
}
