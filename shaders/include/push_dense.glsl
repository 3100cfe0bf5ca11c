// push_dense.glsl: the push-constant blocks of the elementwise and row ops
// (rmsnorm, nll, rope, swiglu, mod_residual, embed, argmax), mirrored in
// Go by shaders/dense.go (same members, same order, 4-byte scalars only, so
// the std430 offsets are 0, 4, 8, ...; a test checks both against the
// SPIR-V). A kernel defines its OP_* name before including this file.

#ifdef OP_RMSNORM
layout(push_constant) uniform RMSNormPush {
	uint  cols; // elements per row (nEmbd)
	uint  n;    // rows: x and out are [n][cols]
	float eps;  // added to mean(x²) (layer_norm_rms_epsilon)
} p;
#endif

#ifdef OP_NLL
layout(push_constant) uniform NLLPush {
	uint cols;    // elements per row (nVocab)
	uint n;       // rows: x is [n][cols]
	uint rowBase; // x's row r is row rowBase + r of target and out
} p;
#endif

#ifdef OP_ROPE
layout(push_constant) uniform RopePush {
	uint headDim; // elements per head, even
	uint nHead;   // heads per row: x and out are [n][nHead*headDim]
	uint n;       // rows
} p;
#endif

#ifdef OP_SWIGLU
layout(push_constant) uniform SwiGLUPush {
	uint n; // elements
} p;
#endif

#ifdef OP_MOD_RESIDUAL
layout(push_constant) uniform ModResidualPush {
	uint cols; // elements per row (nEmbd)
	uint n;    // rows of x and entries of r
	uint k;    // entries of sel = rows of o (the capacity)
} p;
#endif

#ifdef OP_EMBED
layout(push_constant) uniform EmbedPush {
	uint cols;    // elements per row (nEmbd)
	uint n;       // tokens: tok is [n], out is [n][cols]
	uint rowBase; // first vocabulary row in the w binding
	uint rows;    // vocabulary rows in the w binding
} p;
#endif

#ifdef OP_ARGMAX
layout(push_constant) uniform ArgmaxPush {
	uint cols; // elements per row (nVocab)
	uint n;    // rows: x is [n][cols], out is [n]
#ifdef HANDOFF
	uint handWait; // HANDOFF variants (include/handoff.glsl): the slot of the dispatch to wait for, 0 none
	uint handNeed; // its workgroups
	uint handSlot; // this dispatch's slot
#endif
} p;
#endif
