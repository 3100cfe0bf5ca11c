// selects.glsl: causal routing's decision (DESIGN.md §3), mod.Selects: a
// score selects its token iff it is > 0, decided on the float's bits: the
// sign bit clear and the bits neither +0 nor a NaN, i.e. in [1, 0x7f800000]
// (the smallest denormal up to +Inf). A float comparison would not do:
// NVIDIA flushes a denormal to 0 and would reject a token the CPU selects;
// -0, +0 and every NaN never select.
bool selects(uint bits) {
	return bits != 0u && bits <= 0x7f800000u;
}

// poisons is mod.Poisons: a score that is not finite (NaN or ±Inf: the
// exponent's bits all ones). The kernel that decides on it sets its token's
// residual row to NaN (mod.PoisonRows), so that a broken router or predictor
// reaches the logits instead of passing as a skip; a finite score writes
// nothing.
bool poisons(uint bits) {
	return (bits & 0x7f800000u) == 0x7f800000u;
}

// quietNaN is the NaN a poisoned row is filled with.
float quietNaN() {
	return uintBitsToFloat(0x7fc00000u);
}
