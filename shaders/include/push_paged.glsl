// push_paged.glsl: the push-constant block of the paged kernels
// (paged.comp), mirrored in Go by shaders/paged.go (same members, same
// order, 4-byte scalars only; TestVariantInterfaces checks both against the
// SPIR-V).

layout(push_constant) uniform PagedPush {
	uint n;           // rows (an upper bound of rows[0] / count[0])
	uint kvDim;       // elements of an entry: nKVHead*headDim (even)
	uint width;       // pages per block of the table (the dense table: dense layers; a routed one: 1)
	uint layer;       // the table's layer: page of entry e is tables[toff + (e/blockTokens)*width + layer]
	uint blockTokens; // entries a page
	uint nRouted;     // PAGED_GATHER, PAGED_ADVANCE: routed layers (rmeta's width)
	uint routed;      // PAGED_GATHER: this routed layer's index among them
	uint compact;     // PAGED_GATHER: 1: RoPE turns a row by its entry (mod.PositionsCompact)
	uint nHead;       // PAGED_ATTENTION: query heads, a multiple of nKVHead
	uint nKVHead;     // PAGED_ATTENTION: key/value heads
	uint headDim;     // PAGED_ATTENTION: elements per head (the spec's HD)
	float scale;      // PAGED_ATTENTION: 1/sqrt(headDim)
	uint splits;      // PAGED_ATTENTION: key tiles per (row, head)
	uint splitLen;    // PAGED_ATTENTION: entries per key tile
	uint stride;      // PAGED_SPLIT: elements of a row of qkv; PAGED_ADVANCE: the trace's rows a field; PAGED_GATHER: of a row of x
	uint kOff;        // PAGED_SPLIT: where a row's k starts in it
	uint vOff;        // PAGED_SPLIT: where its v starts
} p;
