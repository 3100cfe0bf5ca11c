#version 450
#extension GL_KHR_shader_subgroup_basic : require
// A test kernel for package vk: each invocation i < n writes the subgroup
// size and subgroup count its dispatch got, so a test sees a required
// subgroup size take effect. constant_id 0 is the workgroup size.
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) writeonly buffer Out { uvec2 got[]; }; // [n] (size, subgroups)
layout(push_constant) uniform Push {
	uint n;
} p;

void main() {
	uint i = gl_GlobalInvocationID.x;
	if (i < p.n) {
		got[i] = uvec2(gl_SubgroupSize, gl_NumSubgroups);
	}
}
