// push_prefill.glsl: the push-constant block of the batched-prefill kernels
// (prefill.comp), mirrored in Go by shaders/prefill.go (same members, same
// order, 4-byte scalars only; TestVariantInterfaces checks both against the
// SPIR-V).

layout(push_constant) uniform PrefillPush {
	uint n;          // rows of the chunk (an upper bound of rows[0])
	uint kvDim;      // elements of a cache entry: nKVHead*headDim (even)
	uint layer;      // index of this layer's entry count in counts
	uint maxEntries; // entries the cache holds; an append past it is dropped
} p;
