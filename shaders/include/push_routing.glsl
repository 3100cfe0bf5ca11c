// push_routing.glsl: the push-constant blocks of the MoD routing kernels
// (router.comp, route_decode.comp, topk.comp, compact.comp, gather.comp, scatter.comp), mirrored
// in Go by shaders/routing.go (same members, same order, 4-byte scalars
// only; a test checks both against the SPIR-V). A kernel defines its OP_*
// name before including this file. Names follow DESIGN.md §3: n tokens,
// nEmbd, predHidden, k selected.

#ifdef OP_ROUTER
layout(push_constant) uniform RouterPush {
	uint n;       // tokens: x is [n][cols], y is [n][rows]
	uint rows;    // rows of W: 1 for a score, predHidden for the predictor's hidden layer
	uint cols;    // elements of each W row and x row: nEmbd, or predHidden
	uint hasBias; // 1: add bias[0] (mod_router.bias); 0: the bias binding is not read
	uint act;     // 0: y is the dot product (+ bias); 1: SiLU of it
} p;
#endif

#ifdef OP_ROUTE_DECODE
layout(push_constant) uniform RouteDecodePush {
	uint nEmbd;      // elements of x, xs and w
	uint hasBias;    // 1: add bias[0]; 0: the bias binding is not read
	uint predHidden; // predictor routing: elements of h and w2 (0 with the router)
	uint m;          // dispatches in the groups and args tables
	uint predBias;   // predictor routing: 1 adds pb[0] to p (a linear predictor's bias)
} p;
#endif

#ifdef OP_ROUTE_ROWS
layout(push_constant) uniform RouteRowsPush {
	uint n;          // rows (at most ROUTE_ROWS_MOST)
	uint nEmbd;      // elements of each row of x and xs, and of w
	uint hasBias;    // 1: add bias[0]; 0: the bias binding is not read
	uint predHidden; // PREDICTOR: elements of each row of h, and of w2
	uint m;          // dispatches in args and in each count's row of the table
	uint predBias;   // PREDICTOR: 1 adds pb[0] to p; 0: pb is not read
	uint nRouted;    // routed layers (rmeta's width)
	uint routed;     // this routed layer's index among them
	uint compact;    // 1: RoPE turns a row by its entry (mod.PositionsCompact)
	uint traceRows;  // rows a field of the trace ([nRouted][3][traceRows]); 0: no trace
} p;
#endif

#ifdef OP_TOPK
layout(push_constant) uniform TopkPush {
	uint n;      // scores
	uint k;      // how many to select (clamped to n)
	uint block;  // bitonic merge passes: size of the sequences being merged
	uint stride; // bitonic merge passes: compare-exchange distance
	uint cols;   // topk, topk_sort: elements of each row of x (nEmbd), set to NaN when its score is not finite
} p;
#endif

#ifdef OP_COMPACT
layout(push_constant) uniform CompactPush {
	uint n;            // mask (or score) entries
	uint rowsPerGroup; // rows one workgroup of the next kernel covers
	uint cols;         // FROM_POSITIVE: elements of each row of x (nEmbd), set to NaN when its score is not finite
	uint m;            // TABLE_ARGS: dispatches in args and in each count's row of the table
} p;
#endif

#ifdef OP_GATHER
layout(push_constant) uniform GatherPush {
	uint nEmbd; // elements of each row
	uint layer; // GATHER_POS with COMPACT: the layer's index in counts
} p;
#endif

