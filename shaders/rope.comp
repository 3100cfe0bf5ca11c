#version 450
// rope: rotary position embedding, Meta's Llama convention (GGUF "norm"
// RoPE, mod.RoPE): in each head of each row, the interleaved pair
// (2i, 2i+1) is rotated by the angle pos * base^(-2i/headDim), where pos is
// the row's ORIGINAL position, read from the pos buffer: a compact row (a
// token that a routed block selected) keeps the position it had in the
// sequence. out may be x (in place), or a slice of a KV cache (RoPE + KV
// write in one dispatch). A workgroup per row; an invocation takes pair i
// of every head, so each angle's cos and sin are computed once per row,
// and no integer division runs per element.
//
// The angle. mod.RoPE computes it in float64; core Vulkan has no float64
// (shaderFloat64 is optional), and in float32 pos * freq loses about
// |angle| * 2^-24 before sin and cos, whose float32 precision the spec
// guarantees only in [-pi, pi] (measured on lavapipe: 2e-5 of the pair's
// norm at positions near 10^4, 2e-3 near 10^6). So the host
// computes each pair's frequency once, in float64 as the CPU does, as a
// 64-bit fixed-point fraction of a turn (RopeFreqs in dense.go); pos * freq
// mod 1 turn is then exact in integer arithmetic (umulExtended), and only
// its conversion to a float32 angle in [-pi, pi) rounds (< 2e-7 rad).
#include "include/common.glsl"
#define OP_ROPE
#include "include/push_dense.glsl"
#include "include/rope.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer X { vec2 x[]; };         // [n][nHead*headDim/2] pairs
layout(std430, binding = 1) readonly buffer Pos { uint pos[]; };     // [n] original positions
layout(std430, binding = 2) readonly buffer Freq { uvec2 freq[]; };  // [headDim/2] (low, high) words: turns per position * 2^64
layout(std430, binding = 3) writeonly buffer Out { vec2 out_[]; };   // [n][nHead*headDim/2] pairs

void main() {
	uint row = groupIndex();
	if (row >= p.n) {
		return;
	}
	uint half_ = p.headDim / 2u;
	uint ps = pos[row];
	for (uint i = gl_LocalInvocationID.x; i < half_; i += gl_WorkGroupSize.x) {
		vec2 cs = ropeCosSin(ps, freq[i]);
		for (uint h = 0u, k = row * p.nHead * half_ + i; h < p.nHead; h++, k += half_) {
			out_[k] = ropeTurn(x[k], cs);
		}
	}
}
