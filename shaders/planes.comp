#version 450
// planes: a matrix of any weight type (or X, as an F32 matrix of n rows)
// written as planes of halves for matmul_direct.comp: hi[r][c] =
// M[r][c] rounded to the nearest half, and under PLANES_HILO lo[r][c] =
// M[r][c] - hi[r][c] (exact in f32) rounded to the nearest half, both by
// toHalf (in integer steps: no driver's conversion, no compiler folding).
// The planes are [rowsP][colsP] halves (two a word), rowsP and colsP the
// matrix's rows and columns padded to the direct kernel's tiles, zero in
// the padding: the direct kernel loads whole 16x16 tiles with no bounds
// checks, and the zeros add nothing to its sums.
//
// An invocation writes a quad of a row (four halves, two words) of each
// plane: rows r < rowsP, columns 4q < colsP. The lo plane starts loOff
// 8-half units after the hi plane's start (the unit of matmul_direct's
// wLo and xLo: shaders.PlaneUnits; 0: no lo plane, PLANES_HILO unset).
// M's rows wRow0 .. wRow0+rows of its binding are read (loadWeightQuad:
// every weight type matmul.comp reads); rows past rows and columns past
// cols are zero.
#include "include/common.glsl"
#define OP_PLANES
#include "include/push_direct.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, binding = 0) readonly buffer Weights2 { uvec2 w2[]; };
layout(std430, binding = 1) writeonly buffer Planes { uvec2 planes[]; }; // quads of halves

#include "include/weights.glsl"
#ifdef WEIGHT_SUBBLOCK
#include "include/subblock.glsl"
#endif
#include "include/matmul_weights.glsl"

void main() {
#ifdef WEIGHT_SUBBLOCK
	sbInit(p.wRows * (p.cols / 32u));
#endif
	uint quads = p.colsP / 4u;
	uint i = groupIndex() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (i >= p.rowsP * quads) {
		return;
	}
	uint r = i / quads, c = 4u * (i % quads);
	vec4 v = vec4(0.0);
	if (r < p.rows && c < p.cols) {
		v = loadWeightQuad(p.wRow0 + r, c); // zero past cols
	}
	vec4 hi = vec4(toHalf(v.x), toHalf(v.y), toHalf(v.z), toHalf(v.w));
	// Exact halves: packHalf2x16 stores them as they are, in any rounding mode.
	planes[i] = uvec2(packHalf2x16(hi.xy), packHalf2x16(hi.zw));
#ifdef PLANES_HILO
	vec4 d = v - hi; // exact: hi is v with its low mantissa bits rounded off
	vec4 lo = vec4(toHalf(d.x), toHalf(d.y), toHalf(d.z), toHalf(d.w));
	planes[2u * p.loOff + i] = uvec2(packHalf2x16(lo.xy), packHalf2x16(lo.zw));
#endif
}
