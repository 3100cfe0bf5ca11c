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
