#version 450
// embed: out[t] = row tok[t] of the embedding table w (token_embd), decoded
// to F32 as mod.Mat.Row, with w in a weight type's device layout (the one
// matvec reads, so a table that is also the output matrix is one upload):
// F32, F16, BF16 (WEIGHT_F32, WEIGHT_F16, WEIGHT_BF16), Q8_0 and Q4_0 split
// (WEIGHT_Q8_0_SPLIT, WEIGHT_Q4_0_SPLIT: RepackQ8_0, RepackQ4_0), the
// other quantized types in the sub-block layout (WEIGHT_SUBBLOCK:
// RepackSubblock). A workgroup per token, its invocations strided over the
// row: no integer division per element (lavapipe does those one lane at a
// time).
//
// A table bigger than maxStorageBufferRange (128 MiB on lavapipe: 32000 x
// 4096 F16 is 250 MiB) is bound in pieces, one dispatch per piece: the
// binding holds rows [rowBase, rowBase+rows), and tokens outside it are left
// untouched for another piece's dispatch. Token ids are not checked against
// the vocabulary here (the host does): an id in no piece leaves its row
// as it was. A split table is bound whole (its scales follow all its quants).
#include "include/common.glsl"
#define OP_EMBED
#include "include/push_dense.glsl"

layout(local_size_x = 128) in;

layout(std430, binding = 0) readonly buffer Weights { uint w[]; };   // [rows] rows in the type's device layout
layout(std430, binding = 1) readonly buffer Tok { uint tok[]; };     // [n] token ids
layout(std430, binding = 2) writeonly buffer Out { float out_[]; };  // [n][cols]

#include "include/weights.glsl"
#ifdef WEIGHT_SUBBLOCK
#include "include/subblock.glsl"
#endif

void main() {
#ifdef WEIGHT_SUBBLOCK
	sbInit(p.rows * (p.cols / 32u));
#endif
	uint t = groupIndex();
	if (t >= p.n) {
		return;
	}
	uint row = tok[t] - p.rowBase; // wraps for ids below rowBase
	if (row >= p.rows) {
		return;
	}
	for (uint e = gl_LocalInvocationID.x; e < p.cols; e += gl_WorkGroupSize.x) {
#if defined(WEIGHT_F32)
		float v = loadF32(row * p.cols + e);
#elif defined(WEIGHT_F16)
		float v = loadF16(row * p.cols + e);
#elif defined(WEIGHT_BF16)
		float v = loadBF16(row * p.cols + e);
#elif defined(WEIGHT_SUBBLOCK)
		uint q = row * p.cols + e;
		float v = sbDequant(q >> 5, (q & 31u) >> 2)[q & 3u];
#elif defined(WEIGHT_Q8_0_SPLIT)
		uint q = row * p.cols + e; // byte offset of the quant; its block is q / 32
		float v = loadHalf(p.rows * p.cols + 2u * (q >> 5)) * float(bitfieldExtract(int(w[q >> 2]), int(q & 3u) * 8, 8));
#elif defined(WEIGHT_Q4_0_SPLIT)
		// Block blk's byte i holds element i in its low nibble, i+16 in its
		// high one, each stored as q+8.
		uint blk = row * (p.cols / 32u) + e / 32u, i = e % 32u;
		uint at = 16u * blk + (i & 15u); // byte offset of the nibble pair
		uint nib = (w[at >> 2] >> ((at & 3u) * 8u + (i >= 16u ? 4u : 0u))) & 15u;
		float v = loadHalf(p.rows * p.cols / 2u + 2u * blk) * (float(nib) - 8.0);
#else
#error "define a weight type: WEIGHT_F32, WEIGHT_F16, WEIGHT_BF16, WEIGHT_Q8_0_SPLIT, WEIGHT_Q4_0_SPLIT, WEIGHT_SUBBLOCK"
#endif
		out_[t * p.cols + e] = v;
	}
}
