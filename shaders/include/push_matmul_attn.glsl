// push_matmul_attn.glsl: the push-constant blocks of matmul.comp and
// attention_split.comp, mirrored in Go by shaders/matmul_attn.go (same members,
// same order, 4-byte scalars only, so the std430 offsets are 0, 4, 8, ...;
// TestVariantInterfaces checks both against the SPIR-V). A kernel defines
// its OP_* name before including this file.

#ifdef OP_MATMUL
layout(push_constant) uniform MatmulPush {
	uint rows;  // rows of W computed (from wRow0) = outputs per token
	uint cols;  // columns of W = elements of each x row (Q8_0, Q4_0: a multiple of 32)
	uint n;     // tokens: x is [n][cols]
	uint wRow0; // the first row computed, of the binding's
	uint wRows; // rows in W's binding (where the split layouts' scales start)
	uint ldy;   // elements per y row: y is [n][ldy]
	uint yOff;  // the column of y that row wRow0's output goes to
	uint kSplit; // columns per K slice (workgroup z walks slice z; y is [splits][n][rows] partials); 0: all of K into y
} p;
#endif

#ifdef OP_MATMUL_REDUCE
layout(push_constant) uniform MatmulReducePush {
	uint rows;   // outputs per token
	uint n;      // tokens
	uint splits; // K slices: part is [splits][n][rows]
	uint ldy;    // elements per y row
	uint yOff;   // the column of y that output 0 goes to
} p;
#endif

#ifdef OP_ATTENTION_SPLIT
layout(push_constant) uniform AttentionSplitPush {
	uint n;        // query rows: q is [n][nHead*headDim], qPos is [n]
	uint entries;  // KV cache entries (ATTN_COUNTS: the most there can be; counts[layer] is read)
	uint nHead;    // query heads, a multiple of nKVHead
	uint nKVHead;  // key/value heads; query head h reads kv head h / (nHead/nKVHead)
	uint headDim;  // elements per head, at most the kernel's MAX_HD
	float scale;   // score multiplier, 1/sqrt(headDim)
	uint layer;    // ATTN_COUNTS: index of the entry count in counts
	uint splits;   // key tiles per (row, head): partial results per (row, head)
	uint splitLen; // entries per key tile
	uint sorted;   // 1: kPos ascends (every cache here does): a row stops at its first later entry
} p;
#endif
