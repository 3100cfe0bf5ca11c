// Macros shared by the amd64 kernels (kernels_avx2_amd64.s,
// kernels_vnni_amd64.s).

// SUM4 stores the horizontal sums of four 8-lane float accumulators a, b,
// c, d as 4 floats at dst (xa is a's low half, xt a scratch register;
// a, c and xt are clobbered): pairs, then quads, then halves.
//	VHADDPS b, a, a: [a01 a23 b01 b23 | a45 a67 b45 b67]
//	VHADDPS c, a, a after the same for c, d: [a0-3 b0-3 c0-3 d0-3 | a4-7 ...]
#define SUM4(a, b, c, d, xa, xt, dst) \
	VHADDPS b, a, a; \
	VHADDPS d, c, c; \
	VHADDPS c, a, a; \
	VEXTRACTF128 $1, a, xt; \
	VADDPS xt, xa, xa; \
	VMOVUPS xa, dst

// ZSUM4 is SUM4 of four 16-lane accumulators (z0..z3, with y0..y3 their
// low halves): each one's halves added into a..d first (yt a scratch
// register), then SUM4(a, b, c, d, xa, xt, dst).
#define ZSUM4(z0, y0, z1, y1, z2, y2, z3, y3, yt, a, b, c, d, xa, xt, dst) \
	VEXTRACTF64X4 $1, z0, yt; \
	VADDPS yt, y0, a; \
	VEXTRACTF64X4 $1, z1, yt; \
	VADDPS yt, y1, b; \
	VEXTRACTF64X4 $1, z2, yt; \
	VADDPS yt, y2, c; \
	VEXTRACTF64X4 $1, z3, yt; \
	VADDPS yt, y3, d; \
	SUM4(a, b, c, d, xa, xt, dst)
