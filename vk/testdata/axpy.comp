#version 450
// A test kernel for package vk: y[i] = y[i] + scale * SCALE2 * x[i] for i < n.
// constant_id 0 is the workgroup size, constant_id 1 an extra factor, so a
// test sees specialization take effect.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const float SCALE2 = 1.0;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform Push {
	uint n;
	float scale;
} p;

void main() {
	uint i = gl_GlobalInvocationID.x;
	if (i < p.n) {
		y[i] += p.scale * SCALE2 * x[i];
	}
}
