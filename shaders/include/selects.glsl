// selects.glsl: causal routing's decision (DESIGN.md §3), mod.Selects: a
// score selects its token iff it is > 0, decided on the float's bits: the
// sign bit clear and the bits neither +0 nor a NaN, i.e. in [1, 0x7f800000]
// (the smallest denormal up to +Inf). A float comparison would not do:
// NVIDIA flushes a denormal to 0 and would reject a token the CPU selects;
// -0, +0 and every NaN never select.
bool selects(uint bits) {
	return bits != 0u && bits <= 0x7f800000u;
}
