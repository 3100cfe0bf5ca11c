// dotreduce.glsl: the sum over the TPR invocations that share a dot
// product, for router.comp and route_decode.comp. The kernel declares TPR
// (invocations per dot product, a divisor of the workgroup size) before
// including this, and defines SUBGROUP for the subgroup variant (and enables
// GL_KHR_shader_subgroup_basic and _arithmetic).
//   SUBGROUP: subgroupAdd, then, when a dot spans several subgroups, one
//             shared-memory step. TPR must be a multiple of the subgroup
//             size; a dot is owned by whole subgroups, found by
//             gl_SubgroupID, so nothing assumes how invocations map to
//             subgroups (the workgroup size must be a multiple of the
//             subgroup size, so that every subgroup is full).
//   default:  a tree in shared memory (rowreduce.glsl), core Vulkan 1.2;
//             with TPR = 1 no barrier runs.
// Every invocation of the workgroup must call dotSum (it may hold barriers).

#if defined(SUBGROUP)
shared float red[gl_WorkGroupSize.x]; // one partial per subgroup (at most WG of them)

// subsPerDot is how many subgroups share a dot product.
uint subsPerDot() {
	return TPR / gl_SubgroupSize;
}

// dotLane is this invocation's index among its dot product's TPR invocations.
uint dotLane() {
	return (gl_SubgroupID % subsPerDot()) * gl_SubgroupSize + gl_SubgroupInvocationID;
}

// dotInGroup is which of the workgroup's WG/TPR dot products this one works on.
uint dotInGroup() {
	return gl_SubgroupID / subsPerDot();
}

// dotSum is the sum of v over the dot product's invocations, in each of them.
float dotSum(float v) {
	float s = subgroupAdd(v);
	uint k = subsPerDot();
	if (k == 1u) {
		return s;
	}
	if (subgroupElect()) {
		red[gl_SubgroupID] = s;
	}
	barrier();
	uint first = dotInGroup() * k;
	float t = 0.0;
	for (uint i = 0u; i < k; i++) {
		t += red[first + i];
	}
	barrier(); // red may be reused by the next dotSum
	return t;
}
#else
#include "rowreduce.glsl"

uint dotLane() {
	return rowLane();
}

uint dotInGroup() {
	return gl_LocalInvocationID.x / TPR;
}

float dotSum(float v) {
	return rowSum(v);
}
#endif

