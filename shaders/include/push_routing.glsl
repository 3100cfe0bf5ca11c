// push_routing.glsl: the push-constant blocks of the MoD routing kernels
// (router.comp, topk.comp, compact.comp, gather.comp, scatter.comp), mirrored
// in Go by shaders/routing.go (same members, same order, 4-byte scalars
// only; a test checks both against the SPIR-V). A kernel defines its OP_*
// name before including this file. Names follow DESIGN.md §3: n tokens,
// nEmbd, predHidden, k selected.

#ifdef OP_ROUTER
layout(push_constant) uniform RouterPush {
	uint n;       // tokens: x is [n][nEmbd], r is [n]
	uint nEmbd;   // elements of each x row and of w
	uint hasBias; // 1: add bias[0] (mod_router.bias); 0: the bias binding is not read
} p;
#endif

#ifdef OP_PREDICTOR
layout(push_constant) uniform PredictorPush {
	uint n;          // tokens: x is [n][nEmbd], p is [n]
	uint nEmbd;      // columns of W1, elements of each x row
	uint predHidden; // rows of W1, elements of w2
} p;
#endif

#ifdef OP_TOPK
layout(push_constant) uniform TopkPush {
	uint n;      // scores
	uint k;      // how many to select (clamped to n)
	uint block;  // bitonic merge passes: size of the sequences being merged
	uint stride; // bitonic merge passes: compare-exchange distance
} p;
#endif

#ifdef OP_COMPACT
layout(push_constant) uniform CompactPush {
	uint n;            // mask (or score) entries
	uint rowsPerGroup; // rows one workgroup of the next kernel covers
} p;
#endif

#ifdef OP_GATHER
layout(push_constant) uniform GatherPush {
	uint nEmbd; // elements of each row
} p;
#endif

#ifdef OP_SCATTER
layout(push_constant) uniform ScatterPush {
	uint nEmbd; // elements of each row
} p;
#endif
