// subblock.glsl: reading weights in the sub-block layout (shaders.
// RepackSubblock: Q4_1, Q5_0, Q5_1 and the K-quants Q2_K..Q6_K) from a uint[]
// binding named w. Each value is x = (d*sc) * (q - SB_ZERO) - (dmin*m):
// q is SB_BITS bits, sc and m the 8-bit scale and min of its sub-block of
// SB_SUB values, d and dmin the halves of its super-block of SB_SUPER
// (ggml's arithmetic, product by product). The layout is four planes, each
// indexed by the 32-value group g counted over the whole binding:
//   low bits   4 a value (16 bytes a group: byte k holds values k and k+16 in
//              its nibbles) or, for SB_BITS < 4, 2 (8 bytes: byte k holds
//              values k, k+8, k+16, k+24 at shifts 0, 2, 4, 6);
//   high bits  SB_BITS - low bits words a group, word h bit 8u+t = bit h
//              of the high part of value 4t+u (quad t, place u): shifted
//              by t and masked, a word gives quad t's bits a byte each;
//   scales     a u16 per sub-block: sc (int8) low, m high; padded to 4 bytes;
//   supers     a u32 per super-block: d low, dmin high.
// So a quad of values 4j..4j+3 has its low bits in one word, and every load
// is an aligned word. The caller sets the planes' places with sbInit(groups)
// for the binding's groups (rows * cols / 32) before reading.
#if SB_BITS >= 4
const uint SB_LOW = 4u;
#else
const uint SB_LOW = 2u;
#endif
const uint SB_HIGH = uint(SB_BITS) - SB_LOW;
const uint SB_SUBS = 32u / uint(SB_SUB); // sub-blocks a group: 1 or 2

uint sbHigh, sbScales, sbSupers; // word offsets of the planes after the low bits

void sbInit(uint groups) {
	sbHigh = groups * SB_LOW;
	sbScales = sbHigh + groups * SB_HIGH;
	sbSupers = sbScales + (groups * SB_SUBS + 1u) / 2u;
}

// sbGroup is group g's low-bit words (SB_LOW of them, in .xy or .xyzw) and
// high-bit words (in hi.xy).
void sbGroup(uint g, out uvec4 lo, out uvec2 hi) {
	lo = uvec4(0u);
	for (uint i = 0u; i < SB_LOW; i++) {
		lo[i] = w[g * SB_LOW + i];
	}
	hi = uvec2(0u);
	for (uint h = 0u; h < SB_HIGH; h++) {
		hi[h] = w[sbHigh + g * SB_HIGH + h];
	}
}

// sbQuad is values 4j..4j+3 of a group (lo, hi: sbGroup) as unsigned q, a
// byte each (value 4j+t in byte t).
uint sbQuad(uvec4 lo, uvec2 hi, uint j) {
#if SB_BITS >= 4
	uint q = (lo[j & 3u] >> (4u * (j >> 2))) & 0x0f0f0f0fu;
#else
	uint q = (lo[j & 1u] >> (2u * (j >> 1))) & 0x03030303u;
#endif
	for (uint h = 0u; h < SB_HIGH; h++) {
		q |= ((hi[h] >> j) & 0x01010101u) << (SB_LOW + h);
	}
	return q;
}

// sbGroupQuads is group g's 8 quads as sbQuad makes them (quad j in qa[j]
// for j < 4, qb[j-4] after), with every index known at compile time: on a
// CPU device (lavapipe) a vector indexed by a run-time value costs a
// select chain per access, more than the decoding itself.
void sbGroupQuads(uint g, out uvec4 qa, out uvec4 qb) {
#if SB_BITS >= 4
	uvec4 lo = uvec4(w[4u * g], w[4u * g + 1u], w[4u * g + 2u], w[4u * g + 3u]);
	qa = lo & 0x0f0f0f0fu;
	qb = (lo >> 4u) & 0x0f0f0f0fu;
#else
	uvec4 lo = uvec4(w[2u * g], w[2u * g + 1u], w[2u * g], w[2u * g + 1u]);
	qa = (lo >> uvec4(0u, 0u, 2u, 2u)) & 0x03030303u;
	qb = (lo >> uvec4(4u, 4u, 6u, 6u)) & 0x03030303u;
#endif
#if SB_BITS != 4 && SB_BITS != 2
	uvec4 h0 = uvec4(w[sbHigh + g * SB_HIGH]);
	qa |= ((h0 >> uvec4(0u, 1u, 2u, 3u)) & 0x01010101u) << SB_LOW;
	qb |= ((h0 >> uvec4(4u, 5u, 6u, 7u)) & 0x01010101u) << SB_LOW;
#endif
#if SB_BITS == 6
	uvec4 h1 = uvec4(w[sbHigh + g * SB_HIGH + 1u]);
	qa |= ((h1 >> uvec4(0u, 1u, 2u, 3u)) & 0x01010101u) << (SB_LOW + 1u);
	qb |= ((h1 >> uvec4(4u, 5u, 6u, 7u)) & 0x01010101u) << (SB_LOW + 1u);
#endif
}

// sbValues is a quad's q less SB_ZERO.
vec4 sbValues(uint q) {
	return vec4((uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu) - float(SB_ZERO);
}

// sbScale is sub-block s's (d*sc, dmin*m) (s counted over the binding).
vec2 sbScale(uint s) {
	uint sm = (w[sbScales + (s >> 1)] >> ((s & 1u) * 16u)) & 0xffffu;
	vec2 dd = unpackHalf2x16(w[sbSupers + s / uint(SB_SUPER / SB_SUB)]);
	return vec2(dd.x * float(bitfieldExtract(int(sm), 0, 8)), dd.y * float(sm >> 8));
}

// sbDequant is values 4j..4j+3 of group g, decoded as ggml does: precise
// keeps the compiler from fusing the product and the difference into an
// FMA (one rounding fewer than ggml's), so the embedding lookup is exact.
vec4 sbDequant(uint g, uint j) {
	uvec4 lo;
	uvec2 hi;
	sbGroup(g, lo, hi);
	vec2 s = sbScale(g * SB_SUBS + j / (8u / SB_SUBS));
	precise vec4 v = s.x * sbValues(sbQuad(lo, hi, j)) - s.y;
	return v;
}

// ---- The matvec dot product of a group (matvec.comp)
//
// A group's part of a row's dot product is, per sub-block of scale s =
// d*sc and offset o = dmin*m (the min) and SB_ZERO,
//   sum_j (s*(q_j - SB_ZERO) - o) * x_j = s * sum_j q_j*x_j - (s*SB_ZERO + o) * sum_j x_j,
// so each weight costs its decode and one multiply-add, and the sub-block's
// sum of x (sbXSums), which does not depend on the row, is made once for
// every row that shares the x (matvec's rows per invocation, RPI).
#if defined(SB_MIN) || SB_ZERO != 0
#define SB_OFFSET // the sums of x are needed
#endif

// sbQ is a quad's q (sbGroupQuads's bytes) as floats: signed conversions,
// which a CPU's SIMD has (an unsigned one it emulates).
vec4 sbQ(uint q) {
	return vec4(ivec4((uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu));
}

// sbXSums is the sums of a group's x (x0..x7: values 4i..4i+3 in xi) per
// sub-block: (all 32, 0) or (the first 16, the last 16); 0 where no type's
// offset needs them.
vec2 sbXSums(vec4 x0, vec4 x1, vec4 x2, vec4 x3, vec4 x4, vec4 x5, vec4 x6, vec4 x7) {
#ifdef SB_OFFSET
	float a = dot((x0 + x1) + (x2 + x3), vec4(1.0)), b = dot((x4 + x5) + (x6 + x7), vec4(1.0));
#if SB_SUB == 16
	return vec2(a, b);
#else
	return vec2(a + b, 0.0);
#endif
#else
	return vec2(0.0);
#endif
}

// sbGroupDot is group g's dot product with x0..x7, xs = sbXSums of them.
// Every index is a constant: on a CPU device (lavapipe) a vector indexed at
// run time costs a select chain per access, more than the decoding itself.
float sbGroupDot(uint g, vec4 x0, vec4 x1, vec4 x2, vec4 x3, vec4 x4, vec4 x5, vec4 x6, vec4 x7, vec2 xs) {
	uvec4 qa, qb;
	sbGroupQuads(g, qa, qb);
	float s0 = dot(sbQ(qa.x), x0) + dot(sbQ(qa.y), x1) + dot(sbQ(qa.z), x2) + dot(sbQ(qa.w), x3);
	float s1 = dot(sbQ(qb.x), x4) + dot(sbQ(qb.y), x5) + dot(sbQ(qb.z), x6) + dot(sbQ(qb.w), x7);
#if SB_SUB == 16
	// Both sub-blocks' scales are one word, in one super-block.
	uint sm = w[sbScales + g];
	vec2 dd = unpackHalf2x16(w[sbSupers + g / uint(SB_SUPER / 32)]);
	vec2 sc0 = vec2(dd.x * float(bitfieldExtract(int(sm), 0, 8)), dd.y * float((sm >> 8) & 0xffu));
	vec2 sc1 = vec2(dd.x * float(bitfieldExtract(int(sm), 16, 8)), dd.y * float(sm >> 24));
	float sum = sc0.x * s0 + sc1.x * s1;
#ifdef SB_OFFSET
	sum -= (sc0.x * float(SB_ZERO) + sc0.y) * xs.x + (sc1.x * float(SB_ZERO) + sc1.y) * xs.y;
#endif
#else
	vec2 sc0 = sbScale(g);
	float sum = sc0.x * (s0 + s1);
#ifdef SB_OFFSET
	sum -= (sc0.x * float(SB_ZERO) + sc0.y) * xs.x;
#endif
#endif
	return sum;
}
