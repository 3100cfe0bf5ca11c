// dotx.glsl: x's quantization to 8 bits for the integer dot products, as
// matvec_dot.comp quantizes a tile of it in shared memory and dot_x.comp
// quantizes a step's vectors once into a buffer (matvec_dot's PREQ
// variants read that), in the same float operations, so that the two give
// the same q, scales and sums: a chunk is 32 values of a row, a block XB
// of them (32; 256 for the K-quants, 8 chunks), d = max|x| / 127, q = x *
// (127 / max|x|) rounded to the nearest, ties to even, as the CPU
// backend's quantizeRow and quantizeK. The includer declares x4 ([n][cols]
// vec4) and, with NORM, nw4 (the RMSNorm weight, [cols] vec4), and
// includes push.glsl's MatvecPush (p.cols).

// dotxLoad is chunk c (values 32c..32c+31) of x's row v (times the norm's
// weight with NORM) in val, with the sum of squares of its raw values in
// ss; it returns their max magnitude, or -1 when one is not finite.
float dotxLoad(uint v, uint c, out vec4 val[8], out float ss) {
	float amax = 0.0;
	bool bad = false;
	ss = 0.0;
	uint at = v * (p.cols / 4u) + 8u * c;
	[[unroll]] for (uint i = 0u; i < 8u; i++) {
		vec4 a = x4[at + i];
		ss += dot(a, a);
#ifdef NORM
		a *= nw4[8u * c + i];
#endif
		val[i] = a;
		bad = bad || any(isnan(a)) || any(isinf(a));
		vec4 m = abs(a);
		amax = max(amax, max(max(m.x, m.y), max(m.z, m.w)));
	}
	return bad ? -1.0 : amax;
}

// dotxQuantize is a chunk's values val quantized by its block's max
// magnitude amax (negative: the block is not finite, its scale is NaN and
// its q do not matter): q, four int8 a word, and the sums of its halves'
// q (the first 16's in the low 16 bits, the last 16's in the high).
void dotxQuantize(vec4 val[8], float amax, out uint q[8], out uint s2) {
	float id = amax > 0.0 ? 127.0 / amax : 0.0;
	ivec4 s = ivec4(0);
	[[unroll]] for (uint i = 0u; i < 8u; i++) {
		ivec4 t = ivec4(roundEven(val[i] * id));
		q[i] = uint(t.x & 0xff) | uint(t.y & 0xff) << 8 | uint(t.z & 0xff) << 16 | uint(t.w & 0xff) << 24;
		if (i < 4u) {
			s.xy += t.xy + t.zw;
		} else {
			s.zw += t.xy + t.zw;
		}
	}
	s2 = uint((s.x + s.y) & 0xffff) | uint(s.z + s.w) << 16;
}

// dotxScale is x's block scale for a block of max magnitude amax.
float dotxScale(float amax) {
	return amax < 0.0 ? uintBitsToFloat(0x7fc00000u) : amax / 127.0;
}
