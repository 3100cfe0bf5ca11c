// common.glsl: helpers every modrun kernel may use. Include after #version.
#extension GL_GOOGLE_include_directive : require

// groupIndex flattens a 2D grid of workgroups: a kernel over more than
// maxComputeWorkGroupCount[0] (65535 at least) items is dispatched as
// (min(groups, 65535), ceil(groups / 65535), 1) and finds its index here.
uint groupIndex() {
	return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
}

// maxNaN is max that propagates a NaN, as the CPU's running max does (a
// NaN compares false, so mod keeps it once it is there, and exp of it is
// NaN). GLSL's max may return either operand when one is a NaN, and most
// devices (lavapipe, NVIDIA) return the other: a NaN score would vanish
// and a broken model would print ordinary-looking numbers.
float maxNaN(float a, float b) {
	return isnan(a) || isnan(b) ? a + b : max(a, b);
}

// toHalf is x rounded to the nearest half (IEEE binary16), ties to even,
// as packHalf2x16 stores it, returned as a float: for a kernel that uses a
// value as an F16 store will hold it (decode_attend's own key and value)
// or as f16 arithmetic would see it (matmul_coop's emulated tile product).
// It works in integer and exact float steps, never through
// unpackHalf2x16(packHalf2x16(x)): NVIDIA's compiler (driver 580.159.04,
// H200) folds that round trip to x (TestDecodeAttend's first step there
// returned its own value unrounded, 0.84199 where the half is 0.84180).
// shaders' TestToHalf checks it value for value against Go's conversion
// in every kernel that uses it. Halves' subnormals (below 2^-14) are steps
// of 2^-24; 65520 and past round to infinity (65504 is the largest half).
float toHalf(float x) {
	uint u = floatBitsToUint(x);
	uint a = u & 0x7FFFFFFFu;
	if (a >= 0x477FF000u) { // 65520 and up: rounds past the largest half (NaN stays NaN)
		return a > 0x7F800000u ? x : uintBitsToFloat((u & 0x80000000u) | 0x7F800000u);
	}
	if (a < 0x38800000u) { // below 2^-14: x * 2^24 is exact, roundEven rounds ties to even
		return uintBitsToFloat((u & 0x80000000u) | floatBitsToUint(roundEven(uintBitsToFloat(a) * 16777216.0) / 16777216.0));
	}
	a = (a + 0x0FFFu + ((a >> 13u) & 1u)) & 0xFFFFE000u; // ten bits of mantissa, ties to even
	return uintBitsToFloat((u & 0x80000000u) | a);
}
