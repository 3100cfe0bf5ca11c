// push.glsl: every kernel's push-constant block, one per op family, mirrored
// in Go by shaders/push.go (same members, same order, 4-byte scalars only, so
// the std430 offsets are 0, 4, 8, ...; a test checks both against the SPIR-V).
// A kernel defines its OP_* name before including this file.

#ifdef OP_MATVEC
layout(push_constant) uniform MatvecPush {
	uint rows; // rows of W = elements of each y
	uint cols; // columns of W = elements of each x (Q8_0: a multiple of 32)
	uint n;    // vectors: x is [n][cols], y is [n][rows]
	float eps; // NORM variants: added to mean(x^2) (layer_norm_rms_epsilon)
#ifdef HANDOFF
	uint handWait; // HANDOFF variants (include/handoff.glsl): the slot of the dispatch to wait for, 0 none
	uint handNeed; // its workgroups
	uint handSlot; // this dispatch's slot
#endif
} p;
#endif

#ifdef OP_ADD
layout(push_constant) uniform AddPush {
	uint n; // elements
} p;
#endif

#ifdef OP_STAGE_CHAIN
layout(push_constant) uniform StageChainPush {
	uint n;      // elements (256 a workgroup)
	uint stage;  // this dispatch's stage
	uint stages; // the chain's stages
} p;
#endif
