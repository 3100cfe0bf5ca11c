// common.glsl: helpers every modrun kernel may use. Include after #version.
#extension GL_GOOGLE_include_directive : require

// groupIndex flattens a 2D grid of workgroups: a kernel over more than
// maxComputeWorkGroupCount[0] (65535 at least) items is dispatched as
// (min(groups, 65535), ceil(groups / 65535), 1) and finds its index here.
uint groupIndex() {
	return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
}
