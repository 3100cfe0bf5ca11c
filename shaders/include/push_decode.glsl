// push_decode.glsl: the push-constant blocks of the decode-step kernels
// (decode_kv.comp, decode_attention.comp), mirrored in Go
// by shaders/decode.go (same members, same order, 4-byte scalars only, so the
// std430 offsets are 0, 4, 8, ...; TestVariantInterfaces checks both against
// the SPIR-V). A kernel defines its OP_* name before including this file.
//
// These kernels exist so that the decode step can be recorded once and
// replayed: every count that changes from one token to the next (the
// position, a layer's KV cache entries) is read from a buffer, never from a
// push constant.

#ifdef OP_DECODE_KV
layout(push_constant) uniform DecodeKVPush {
	uint headDim;    // elements per head, even
	uint nHead;      // query heads: q is qkv[0 : nHead*headDim]
	uint nKVHead;    // key/value heads: k, v and a cache entry are nKVHead*headDim
	uint kOff;       // element offset of k in qkv
	uint vOff;       // element offset of v in qkv
	uint layer;      // index of this layer's entry count in counts
	uint maxEntries; // entries the cache holds; an append past it is dropped
	uint compact;    // 1: RoPE at the layer's entry count (mod.PositionsCompact), not pos[0]
} p;
#endif

#ifdef OP_DECODE_ATTENTION
layout(push_constant) uniform DecodeAttentionPush {
	uint n;       // query rows: q and out are [n][nHead*headDim], qPos is [n]
	uint layer;   // index of this layer's entry count in counts
	uint nHead;   // query heads, a multiple of nKVHead
	uint nKVHead; // key/value heads; query head h reads kv head h / (nHead/nKVHead)
	uint headDim; // elements per head, at most the kernel's MAX_HD
	float scale;  // score multiplier, 1/sqrt(headDim)
} p;
#endif

#ifdef OP_DECODE_ATTENTION_COMBINE
layout(push_constant) uniform DecodeAttentionCombinePush {
	uint n;       // query rows: out is [n][nHead*headDim]
	uint nHead;   // query heads
	uint headDim; // elements per head
	uint splits;  // chunks per (row, head): part is [n][nHead][splits][2+headDim]
} p;
#endif

#ifdef OP_DECODE_ATTEND
layout(push_constant) uniform DecodeAttendPush {
	uint headDim;    // elements per head, even
	uint nHead;      // query heads: q is qkv[0 : nHead*headDim]
	uint nKVHead;    // key/value heads, nHead a multiple of it
	uint kOff;       // element offset of k in qkv
	uint vOff;       // element offset of v in qkv
	uint layer;      // index of this layer's entry count in counts
	uint maxEntries; // entries the cache holds; an append past it is dropped
	float scale;     // score multiplier, 1/sqrt(headDim)
	uint compact;    // 1: RoPE at the layer's entry count (mod.PositionsCompact), not pos[0]
#ifdef HANDOFF
	uint handWait; // HANDOFF variants (include/handoff.glsl): the slot of the dispatch to wait for, 0 none
	uint handNeed; // its workgroups
	uint handSlot; // this dispatch's slot
#endif
} p;
#endif
