// attention_merge.glsl: attention_merge's combine of row-head ih's splits
// partials (partML [..][2] (m, l), partO [..][hd], at ih*splits + s) into
// out_[ih*hd ..): M = max m_s, L = sum l_s exp(m_s - M), out[d] = sum o_s[d]
// exp(m_s - M) / L, reading o_s only where l_s != 0; L = 0 gives 0. The
// invocation takes d = first, first+step, ... attention_split.comp's
// ATTN_MERGE and paged.comp's PAGED_MERGE (the last tile's workgroup
// merges) share it, so that the two give the same output bit for bit. The
// including shader declares partO, partML, out_, NO_SCORE and maxNaN.
void mergeSplits(uint ih, uint hd, uint splits, uint first, uint step) {
	uint pb = ih * splits;
	float mx = NO_SCORE;
	for (uint s = 0u; s < splits; s++) {
		mx = maxNaN(mx, partML[pb + s].x);
	}
	float sum = 0.0;
	for (uint s = 0u; s < splits; s++) {
		vec2 ml = partML[pb + s];
		sum += ml.y * exp(ml.x - mx);
	}
	for (uint d = first; d < hd; d += step) {
		float o = 0.0;
		for (uint s = 0u; s < splits; s++) {
			vec2 ml = partML[pb + s];
			if (ml.y != 0.0) { // a tile that saw no key left its partO unwritten (its o is 0); a NaN sum is read
				o += partO[(pb + s) * hd + d] * exp(ml.x - mx);
			}
		}
		out_[ih * hd + d] = sum == 0.0 ? 0.0 : o / sum; // never negative; NaN stays
	}
}
