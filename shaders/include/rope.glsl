// rope.glsl: the cos and sin of RoPE's angle for position ps and a pair's
// frequency f (a 64-bit fixed-point fraction of a turn, RopeFreqs), as
// rope.comp explains: ps * f mod 1 turn exactly in integer arithmetic,
// then the angle in [-pi, pi), where float32's sin and cos are precise.
// rope.comp and paged.comp's PAGED_QKV share it, so that their rotations
// are the same bit for bit.
vec2 ropeCosSin(uint ps, uvec2 f) {
	// turns = ps * f mod 2^64, in units of 2^-64 turn.
	uint carry, lo;
	umulExtended(ps, f.x, carry, lo);
	uint hi = ps * f.y + carry;
	// As a signed fraction of a turn, in [-1/2, 1/2).
	float turns = float(int(hi)) * (1.0 / 4294967296.0) + float(lo) * (1.0 / 18446744073709551616.0);
	float theta = turns * 6.28318530717958647692;
	return vec2(cos(theta), sin(theta));
}

// ropeTurn is the pair v turned by the angle of cs (ropeCosSin).
vec2 ropeTurn(vec2 v, vec2 cs) { return vec2(v.x * cs.x - v.y * cs.y, v.x * cs.y + v.y * cs.x); }
