// push_direct.glsl: the push-constant blocks of planes.comp and
// matmul_direct.comp, mirrored in Go by shaders/direct.go (same members,
// same order, 4-byte scalars only; TestVariantInterfaces checks both
// against the SPIR-V). A kernel defines its OP_* name before including it.

#ifdef OP_PLANES
layout(push_constant) uniform PlanesPush {
	uint rows;  // rows of the matrix written (from wRow0); rows past it are zero
	uint cols;  // its columns (a weight type's block divides it); columns past it are zero
	uint wRow0; // the first row read, of the binding's
	uint wRows; // rows in the binding (where the split layouts' scales start)
	uint rowsP; // rows of each plane
	uint colsP; // halves a plane's row, a multiple of 4
	uint loOff; // 8-half units from the hi plane's start to the lo plane's (PLANES_HILO)
} p;
#endif

#ifdef OP_MATMUL_DIRECT
layout(push_constant) uniform MatmulDirectPush {
	uint rows;  // outputs per token written (rows of W past it are padding)
	uint n;     // tokens written (X's rows past it are padding)
	uint colsP; // halves a plane's row (W's and X's), a multiple of 32
	uint ldy;   // elements per y row: y is [n][ldy]
	uint yOff;  // the column of y that row 0's output goes to
	uint wLo;   // DIRECT_HILO: W's lo plane, in 8-half units from the binding's start; 0: none (F16 weights are their own hi)
	uint xLo;   // DIRECT_HILO: X's lo plane, in 8-half units from the binding's start
	uint kSplit; // halves of K a slice (a multiple of 32): workgroup z writes slice z's partial sums to y = [splits][n][rows]; 0: all of K into y
} p;
#endif
