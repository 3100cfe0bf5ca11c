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
//              Q3_K (SB_HS) interleaves them with its high bits instead: its
//              high plane holds the group's high-bit word, then its scales;
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
#if SB_BITS == 3 && SB_SUB == 16
#define SB_HS // Q3_K: [high-bit word, scale word] a group in the high plane
const uint SB_HSTRIDE = 2u, SB_SSTRIDE = 2u;
#else
const uint SB_HSTRIDE = SB_HIGH, SB_SSTRIDE = 1u; // words a group in the high plane; between scale words
#endif

uint sbHigh, sbScales, sbSupers; // word offsets of the planes after the low bits

void sbInit(uint groups) {
	sbHigh = groups * SB_LOW;
#ifdef SB_HS
	sbScales = sbHigh + 1u;
	sbSupers = sbHigh + 2u * groups;
#else
	sbScales = sbHigh + groups * SB_HIGH;
	sbSupers = sbScales + (groups * SB_SUBS + 1u) / 2u;
#endif
}

// sbQuad is values 4j..4j+3 of a group (lo, hi: sbGroupWords) as unsigned q, a
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

// sbGroupWords is group g's raw words: its low bits (lo, .xy for SB_LOW 2)
// and high bits (hi, .x for one word, .xy for Q6_K's two), each load at a
// constant place: on a CPU device (lavapipe) a vector indexed by a
// run-time value costs a select chain per access, more than the decoding
// itself.
void sbGroupWords(uint g, out uvec4 lo, out uvec2 hi) {
#if SB_BITS >= 4
	lo = uvec4(w[4u * g], w[4u * g + 1u], w[4u * g + 2u], w[4u * g + 3u]);
#else
	lo = uvec4(w[2u * g], w[2u * g + 1u], 0u, 0u);
#endif
	hi = uvec2(0u);
#if SB_BITS != 4 && SB_BITS != 2
	hi.x = w[sbHigh + g * SB_HSTRIDE];
#endif
#if SB_BITS == 6
	hi.y = w[sbHigh + g * SB_HSTRIDE + 1u];
#endif
}

// sbQuadsOf is a group's 8 quads as sbQuad makes them (quad j in qa[j] for
// j < 4, qb[j-4] after) from its raw words (sbGroupWords).
void sbQuadsOf(uvec4 lo, uvec2 hi, out uvec4 qa, out uvec4 qb) {
#if SB_BITS >= 4
	qa = lo & 0x0f0f0f0fu;
	qb = (lo >> 4u) & 0x0f0f0f0fu;
#else
	uvec4 l2 = lo.xyxy;
	qa = (l2 >> uvec4(0u, 0u, 2u, 2u)) & 0x03030303u;
	qb = (l2 >> uvec4(4u, 4u, 6u, 6u)) & 0x03030303u;
#endif
#if SB_BITS != 4 && SB_BITS != 2
	uvec4 h0 = uvec4(hi.x);
	qa |= ((h0 >> uvec4(0u, 1u, 2u, 3u)) & 0x01010101u) << SB_LOW;
	qb |= ((h0 >> uvec4(4u, 5u, 6u, 7u)) & 0x01010101u) << SB_LOW;
#endif
#if SB_BITS == 6
	uvec4 h1 = uvec4(hi.y);
	qa |= ((h1 >> uvec4(0u, 1u, 2u, 3u)) & 0x01010101u) << (SB_LOW + 1u);
	qb |= ((h1 >> uvec4(4u, 5u, 6u, 7u)) & 0x01010101u) << (SB_LOW + 1u);
#endif
}

// sbGroupQuads is group g's 8 quads as sbQuad makes them (sbQuadsOf).
void sbGroupQuads(uint g, out uvec4 qa, out uvec4 qb) {
	uvec4 lo;
	uvec2 hi;
	sbGroupWords(g, lo, hi);
	sbQuadsOf(lo, hi, qa, qb);
}

// sbValues is a quad's q less SB_ZERO.
vec4 sbValues(uint q) {
	return vec4((uvec4(q) >> uvec4(0u, 8u, 16u, 24u)) & 0xffu) - float(SB_ZERO);
}

// sbSuper is the (d, dmin) of the super-block that holds group g.
vec2 sbSuper(uint g) {
	return unpackHalf2x16(w[sbSupers + g / uint(SB_SUPER / 32)]);
}

// sbScaleIn is sub-block s's (d*sc, dmin*m) (s counted over the binding),
// dd its super-block's (d, dmin).
vec2 sbScaleIn(uint s, vec2 dd) {
	uint sm = (w[sbScales + (s >> 1) * SB_SSTRIDE] >> ((s & 1u) * 16u)) & 0xffffu;
	return vec2(dd.x * float(bitfieldExtract(int(sm), 0, 8)), dd.y * float(sm >> 8));
}

// sbScale is sub-block s's (d*sc, dmin*m) (s counted over the binding).
vec2 sbScale(uint s) {
	return sbScaleIn(s, sbSuper(s / (32u / uint(SB_SUB))));
}

// sbDequant is values 4j..4j+3 of group g, decoded as ggml does: precise
// keeps the compiler from fusing the product and the difference into an
// FMA (one rounding fewer than ggml's), so the embedding lookup is exact.
vec4 sbDequant(uint g, uint j) {
	uvec4 lo;
	uvec2 hi;
	sbGroupWords(g, lo, hi);
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

#if SB_SUB == 16
// sbScaledBy is sbScaled with the group's scale word sm (sub-blocks of 16:
// both of the group's sub-blocks' sc, m).
float sbScaledBy(uint sm, float s0, float s1, vec2 xs, vec2 dd) {
	vec2 sc0 = vec2(dd.x * float(bitfieldExtract(int(sm), 0, 8)), dd.y * float((sm >> 8) & 0xffu));
	vec2 sc1 = vec2(dd.x * float(bitfieldExtract(int(sm), 16, 8)), dd.y * float(sm >> 24));
	float sum = sc0.x * s0 + sc1.x * s1;
#ifdef SB_OFFSET
	sum -= (sc0.x * float(SB_ZERO) + sc0.y) * xs.x + (sc1.x * float(SB_ZERO) + sc1.y) * xs.y;
#endif
	return sum;
}
#endif

// sbScaled is a group's part of the dot product from its sums s0, s1 of
// q*x per half (values 0..15 and 16..31), xs = sbXSums of its x and dd =
// sbSuper(g).
float sbScaled(uint g, float s0, float s1, vec2 xs, vec2 dd) {
#if SB_SUB == 16
	// Both sub-blocks' scales are one word, in one super-block.
	return sbScaledBy(w[sbScales + g * SB_SSTRIDE], s0, s1, xs, dd);
#else
	vec2 sc0 = sbScaleIn(g, dd);
	float sum = sc0.x * (s0 + s1);
#ifdef SB_OFFSET
	sum -= (sc0.x * float(SB_ZERO) + sc0.y) * xs.x;
#endif
	return sum;
#endif
}

// sbGroupDotIn is group g's dot product with x0..x7, xs = sbXSums of them,
// dd = sbSuper(g) (a caller that walks a super-block's groups loads it
// once). Every index is a constant: on a CPU device (lavapipe) a vector
// indexed at run time costs a select chain per access, more than the
// decoding itself.
float sbGroupDotIn(uint g, vec4 x0, vec4 x1, vec4 x2, vec4 x3, vec4 x4, vec4 x5, vec4 x6, vec4 x7, vec2 xs, vec2 dd) {
	uvec4 qa, qb;
	sbGroupQuads(g, qa, qb);
	float s0 = dot(sbQ(qa.x), x0) + dot(sbQ(qa.y), x1) + dot(sbQ(qa.z), x2) + dot(sbQ(qa.w), x3);
	float s1 = dot(sbQ(qb.x), x4) + dot(sbQ(qb.y), x5) + dot(sbQ(qb.z), x6) + dot(sbQ(qb.w), x7);
	return sbScaled(g, s0, s1, xs, dd);
}

// sbGroupDot is sbGroupDotIn with the group's super-block loaded here.
float sbGroupDot(uint g, vec4 x0, vec4 x1, vec4 x2, vec4 x3, vec4 x4, vec4 x5, vec4 x6, vec4 x7, vec2 xs) {
	return sbGroupDotIn(g, x0, x1, x2, x3, x4, x5, x6, x7, xs, sbSuper(g));
}

// ---- The CPU matvec's dot product of Q2_K and Q3_K (matvec.comp's rowsPass)
//
// On a CPU device every x an invocation holds serves the RPI rows it walks,
// so work on x is cheap and work per weight is not: sbRowsX prepares a
// group's x once, and sbRowsDot2 makes two groups' dot products for each
// row from the prepared x. A 2-bit value is not shifted down to be
// converted: its word is split into two words of eight 4-bit slots, A =
// lo & 0x33333333 and B = (lo >> 2) & 0x33333333 (Q3_K's high bit joins
// each value at slot bit 2), and slot j, masked in place, converts to
// q * 16^j; x is prepared as x * 16^-j, so that the product is q*x exactly
// and a weight costs a mask, a conversion and a multiply-add. Slot j of
// word 0's A holds value j/2 + 16(j%2), of its B value 8 + j/2 + 16(j%2),
// word 1's values 4 more: even slots are the first sub-block (x0..x3 by
// 256^-k), odd ones the second (x4..x7 by 16 * 256^-k).
#if SB_BITS < 4
const vec4 SB_EVEN = vec4(1.0, 1.0 / 256.0, 1.0 / 65536.0, 1.0 / 16777216.0);
const vec4 SB_ODD = SB_EVEN / 16.0;
const uvec4 SB_EVEN_SLOTS = uvec4(0xfu, 0xf00u, 0xf0000u, 0xf000000u);
const uvec4 SB_ODD_SLOTS = SB_EVEN_SLOTS << 4;

// sbRowsX prepares a group's x (x0..x7: values 4i..4i+3 in xi) for
// sbSlotsSums, in place.
void sbRowsX(inout vec4 x0, inout vec4 x1, inout vec4 x2, inout vec4 x3, inout vec4 x4, inout vec4 x5, inout vec4 x6, inout vec4 x7) {
	x0 *= SB_EVEN, x1 *= SB_EVEN, x2 *= SB_EVEN, x3 *= SB_EVEN;
	x4 *= SB_ODD, x5 *= SB_ODD, x6 *= SB_ODD, x7 *= SB_ODD;
}

// sbSlotsDot is acc + the dot product of slots (the masked word of each
// component, converted exactly) with y.
float sbSlotsDot(uvec4 slots, vec4 y, float acc) {
	vec4 q = vec4(ivec4(slots)); // below 2^31: a signed conversion
	return fma(q.w, y.w, fma(q.z, y.z, fma(q.y, y.y, fma(q.x, y.x, acc))));
}

// sbSlotsSums is a group's sums of q*x per sub-block (s.x: values 0..15,
// s.y: 16..31) from its low-bit words lo0, lo1, high-bit word h (Q3_K) and
// the x that sbRowsX prepared as y0..y7.
vec2 sbSlotsSums(uint lo0, uint lo1, uint h, vec4 y0, vec4 y1, vec4 y2, vec4 y3, vec4 y4, vec4 y5, vec4 y6, vec4 y7) {
	uvec4 ab = uvec4(lo0, lo0 >> 2, lo1, lo1 >> 2) & 0x33333333u; // A, B of word 0, of word 1
#if SB_BITS == 3
	// value 4t+u's bit at 8u+t: moved to bit 2 of its slot
	ab |= uvec4(h << 2, h, h << 1, h >> 1) & 0x44444444u;
#endif
	float s0 = sbSlotsDot(ab.x & SB_EVEN_SLOTS, y0, 0.0);
	s0 = sbSlotsDot(ab.z & SB_EVEN_SLOTS, y1, s0);
	s0 = sbSlotsDot(ab.y & SB_EVEN_SLOTS, y2, s0);
	s0 = sbSlotsDot(ab.w & SB_EVEN_SLOTS, y3, s0);
	float s1 = sbSlotsDot(ab.x & SB_ODD_SLOTS, y4, 0.0);
	s1 = sbSlotsDot(ab.z & SB_ODD_SLOTS, y5, s1);
	s1 = sbSlotsDot(ab.y & SB_ODD_SLOTS, y6, s1);
	s1 = sbSlotsDot(ab.w & SB_ODD_SLOTS, y7, s1);
	return vec2(s0, s1);
}

#ifdef SB_WIDE
// sbRowsDot2 is the dot product of groups g and g+1 (g even) with the x
// that sbRowsX prepared as y0..y7 and z0..z7, xs and xt the sbXSums of
// their x, dd = sbSuper(g). On a CPU device each load costs a walk over
// the SIMD lanes, so the pair's low bits are one 16-byte load (w4: the
// plane starts the binding and a group is 8 bytes), and their scale words
// one 8-byte load (w2) or, for Q3_K (SB_HS), their high-bit and scale
// words one 16-byte load: the planes start at a multiple of 4 words, as a
// matrix holds a whole number of super-blocks of 8 groups.
float sbRowsDot2(uint g, vec4 y0, vec4 y1, vec4 y2, vec4 y3, vec4 y4, vec4 y5, vec4 y6, vec4 y7,
		vec4 z0, vec4 z1, vec4 z2, vec4 z3, vec4 z4, vec4 z5, vec4 z6, vec4 z7, vec2 xs, vec2 xt, vec2 dd) {
	uvec4 lo = w4[g >> 1];
#ifdef SB_HS
	uvec4 hs = w4[(sbHigh + 2u * g) >> 2]; // both groups' high and scale words
	uvec2 h = hs.xz, sm = hs.yw;
#else
	uvec2 h = uvec2(0u), sm = w2[(sbScales + g) >> 1];
#endif
	vec2 s = sbSlotsSums(lo.x, lo.y, h.x, y0, y1, y2, y3, y4, y5, y6, y7);
	vec2 t = sbSlotsSums(lo.z, lo.w, h.y, z0, z1, z2, z3, z4, z5, z6, z7);
	return sbScaledBy(sm.x, s.x, s.y, xs, dd) + sbScaledBy(sm.y, t.x, t.y, xt, dd);
}
#endif
#endif
