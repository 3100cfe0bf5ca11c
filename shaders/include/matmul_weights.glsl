// matmul_weights.glsl: loadWeightQuad, the matmuls' reader of four
// consecutive weights of a row in any weight type (matmul.comp and
// matmul_coop.comp). The kernel declares binding 0 also as uvec2 w2[] (F16
// and BF16 quads in one load). Include after include/weights.glsl (and
// include/subblock.glsl for WEIGHT_SUBBLOCK), with the matmul push block as p.

// loadWeightQuad is W[r][c..c+3], zero past cols; c is a multiple of 4.
vec4 loadWeightQuad(uint r, uint c) {
	vec4 v = vec4(0.0);
#if defined(WEIGHT_F32)
	uint e = r * p.cols + c;
	for (uint t = 0u; t < 4u; t++) {
		if (c + t < p.cols) {
			v[t] = loadF32(e + t);
		}
	}
#elif defined(WEIGHT_F16) || defined(WEIGHT_BF16)
#ifdef WEIGHT_BF16
#define PAIR(j) loadBF16Pair(j)
#define ONE(e) loadBF16(e)
#else
#define PAIR(j) loadF16Pair(j)
#define ONE(e) loadF16(e)
#endif
	uint e = r * p.cols + c;
	if ((p.cols & 3u) == 0u) { // e is a multiple of 4: two whole words, 8-byte aligned
		if (c >= p.cols) { // a quad is all in or all out
			return v;
		}
		uvec2 u = w2[e >> 2];
#ifdef WEIGHT_BF16
		v = vec4(unpackBF16x2(u.x), unpackBF16x2(u.y));
#else
		v = vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y));
#endif
	} else if ((p.cols & 1u) == 0u && c + 4u <= p.cols) { // e is even: two whole words
		v = vec4(PAIR(e / 2u), PAIR(e / 2u + 1u));
	} else {
		for (uint t = 0u; t < 4u; t++) {
			if (c + t < p.cols) {
				v[t] = ONE(e + t);
			}
		}
	}
#elif defined(WEIGHT_Q8_0_SPLIT)
	if (c < p.cols) { // cols is a multiple of 32: a quad is all in or all out
		// Quants [wRows][cols] int8, then scales [wRows][cols/32] f16: the
		// quad is one aligned word, and its block is q / 32.
		uint q = r * p.cols + c;
		int s = int(w[q >> 2]);
		ivec4 iv = ivec4(bitfieldExtract(s, 0, 8), bitfieldExtract(s, 8, 8), bitfieldExtract(s, 16, 8), bitfieldExtract(s, 24, 8));
		v = loadHalf(p.wRows * p.cols + 2u * (q >> 5)) * vec4(iv);
	}
#elif defined(WEIGHT_Q4_0_SPLIT)
	if (c < p.cols) {
		// Nibble bytes [wRows][cols/2], then scales [wRows][cols/32] f16.
		// Block byte i holds element i in its low nibble and i+16 in its
		// high one, each stored as q+8: the quad's 4 elements are 4
		// consecutive bytes' low (i < 16) or high nibbles, one aligned word.
		uint blk = r * (p.cols / 32u) + c / 32u, i = c % 32u;
		uint word = w[(16u * blk + (i & 15u)) >> 2] >> (i >= 16u ? 4u : 0u);
		vec4 nib = vec4(float(word & 15u), float((word >> 8) & 15u), float((word >> 16) & 15u), float(word >> 24 & 15u));
		v = loadHalf(p.wRows * p.cols / 2u + 2u * blk) * (nib - 8.0);
	}
#elif defined(WEIGHT_SUBBLOCK)
	if (c < p.cols) { // cols is a multiple of 32: a quad is all in or all out
		uint q = r * p.cols + c;
		v = sbDequant(q >> 5, (q & 31u) >> 2);
	}
#else
#error "define a weight type: WEIGHT_F32, WEIGHT_F16, WEIGHT_BF16, WEIGHT_Q8_0_SPLIT, WEIGHT_Q4_0_SPLIT, WEIGHT_SUBBLOCK"
#endif
	return v;
}
