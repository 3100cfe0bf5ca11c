// weights.glsl: reading ggml weight rows from a uint[] binding named w.
// Weights are bound as raw bytes (uint words) whatever their type, so no
// optional 8/16-bit storage feature is needed: halves are unpacked with
// unpackHalf2x16 and int8 with bitfieldExtract. The binding must extend to a
// multiple of 4 bytes (vk rounds buffer sizes up to 4), because the last
// value of a tensor may share a word with the padding.
//
// ggml layouts (ggml-common.h):
//   F32:  4 bytes per element.
//   F16:  2 bytes per element (IEEE half).
//   BF16: 2 bytes per element (the high half of an f32).
//   Q8_0: blocks of 32 elements, 34 bytes each: f16 scale d, then 32 int8 q;
//         x = d * q. Blocks are 2-aligned, not 4-aligned.

// half at byte offset b (even).
float loadHalf(uint b) {
	return unpackHalf2x16(w[b >> 2] >> ((b & 2u) * 8u)).x;
}

// float32 element e of an F32 tensor.
float loadF32(uint e) {
	return uintBitsToFloat(w[e]);
}

// Elements 2j and 2j+1 of an F16 tensor with an even element count before 2j.
vec2 loadF16Pair(uint j) {
	return unpackHalf2x16(w[j]);
}

// Element e of an F16 tensor.
float loadF16(uint e) {
	return loadHalf(2u * e);
}

// Quants 4k..4k+3 of the Q8_0 block whose quants start at byte q (q is even:
// when q is not 4-aligned, each quad straddles two words).
ivec4 loadQ8Quad(uint q, uint k) {
	uint a = (q >> 2) + k;
	uint word = (q & 2u) == 0u ? w[a] : (w[a] >> 16) | (w[a + 1u] << 16);
	int s = int(word);
	return ivec4(bitfieldExtract(s, 0, 8), bitfieldExtract(s, 8, 8), bitfieldExtract(s, 16, 8), bitfieldExtract(s, 24, 8));
}

// BF16: the high 16 bits of an f32 (ggml's BF16; a file's bf16 weights).
// Elements 2j and 2j+1 of a BF16 tensor, as loadF16Pair.
vec2 unpackBF16x2(uint u) {
	return vec2(uintBitsToFloat(u << 16), uintBitsToFloat(u & 0xffff0000u));
}

vec2 loadBF16Pair(uint j) {
	return unpackBF16x2(w[j]);
}

// Element e of a BF16 tensor.
float loadBF16(uint e) {
	return uintBitsToFloat(((w[e >> 1] >> ((e & 1u) * 16u)) & 0xffffu) << 16);
}
