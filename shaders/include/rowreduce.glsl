// rowreduce.glsl: sums and maxima over the TPR invocations that share a row,
// for the row kernels (rmsnorm, nll, argmax). A workgroup of WG
// invocations (specialization constant 0, the local size) takes WG/TPR rows;
// TPR (constant 1, a divisor of WG) is declared by the kernel. The folds are
// trees in shared memory with barriers, no subgroup operations (core Vulkan
// 1.2 only). With TPR = 1 no barrier runs at all: each invocation owns a
// row. lavapipe stops an invocation's loops after 65535 iterations in all
// (LavapipeLoopIterations in dense.go), so a long row needs enough
// invocations: Profile.Row picks them.
//
// Every invocation of the workgroup must call these (they hold barriers);
// the result is the row's, in every invocation of the row.

shared float red[gl_WorkGroupSize.x];

// rowLane is this invocation's index among its row's invocations.
uint rowLane() {
	return gl_LocalInvocationID.x % TPR;
}

// rowIndex is the row this invocation works on (it may be past the last).
uint rowIndex() {
	return groupIndex() * (gl_WorkGroupSize.x / TPR) + gl_LocalInvocationID.x / TPR;
}

float rowSum(float v) {
	if (TPR == 1u) {
		return v;
	}
	uint tid = gl_LocalInvocationID.x, lane = rowLane();
	red[tid] = v;
	barrier();
	// Fold the upper part onto the lower, for any TPR (not only powers of 2).
	for (uint width = TPR; width > 1u;) {
		uint half_ = (width + 1u) / 2u;
		if (lane < width - half_) {
			red[tid] += red[tid + half_];
		}
		width = half_;
		barrier();
	}
	float s = red[tid - lane];
	barrier(); // red is reused by the next reduction
	return s;
}

float rowMax(float v) {
	if (TPR == 1u) {
		return v;
	}
	uint tid = gl_LocalInvocationID.x, lane = rowLane();
	red[tid] = v;
	barrier();
	for (uint width = TPR; width > 1u;) {
		uint half_ = (width + 1u) / 2u;
		if (lane < width - half_) {
			red[tid] = maxNaN(red[tid], red[tid + half_]);
		}
		width = half_;
		barrier();
	}
	float m = red[tid - lane];
	barrier();
	return m;
}
