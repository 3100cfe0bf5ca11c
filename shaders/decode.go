package shaders

// The decode-step kernels: what a one-token step needs beyond the other op
// families so that it is recorded once and replayed per token (DESIGN.md §6).
// Every value that changes from token to token (the position, each layer's
// KV cache entry count, whether a routed block runs) is read from a buffer.
// Their push-constant structs mirror include/push_decode.glsl member for
// member.
//
// A decode step's dense layer (engine/vulkan), on a GPU profile, 5 dispatches:
//
//	matvec_*_norm q|k|v           x                 -> qkv (RMSNorm folded in)
//	decode_attend(_keys)          qkv, pos, cache   -> att; k, v, pos appended at counts[layer]++
//	matvec_*_add o                att               -> x += o
//	matvec_*_norm_swiglu gate|up  x                 -> h (RMSNorm and SwiGLU folded in)
//	matvec_*_add down             h                 -> x += down
//
// On a CPU device's profile (lavapipe): rmsnorm, matvec q|k|v; decode_kv
// (q rotated; k, v, pos appended at counts[layer]++); decode_attention (or
// flash-decoding's decode_attention_split and decode_attention_combine);
// matvec_*_add o, rmsnorm, matvec gate|up, swiglu, matvec_*_add down.
//
// In a routed layer, route_decode scores the token (after router_score's
// hidden layer with the predictor) and writes the indirect arguments of
// every kernel of the block, which runs on a copy of x, and mod_residual
// adds the gated result (or applies the file's gate target).

// DecodeKVPush is decode_kv's push-constant block.
type DecodeKVPush struct {
	HeadDim    uint32 // elements per head, even
	NHead      uint32 // query heads: q is qkv[0 : NHead*HeadDim]
	NKVHead    uint32 // key/value heads: k, v and a cache entry are NKVHead*HeadDim
	KOff       uint32 // element offset of k in qkv
	VOff       uint32 // element offset of v in qkv
	Layer      uint32 // index of this layer's entry count in counts
	MaxEntries uint32 // entries the cache holds; an append past it is dropped
	Compact    uint32 // 1: RoPE at the layer's entry count (mod.PositionsCompact), not the token's position
}

// DecodeAttentionPush is decode_attention's push-constant block.
type DecodeAttentionPush struct {
	N       uint32  // query rows: q and out are [N][NHead*HeadDim], qPos is [N]
	Layer   uint32  // index of this layer's entry count in counts
	NHead   uint32  // query heads, a multiple of NKVHead
	NKVHead uint32  // key/value heads; query head h reads kv head h / (NHead/NKVHead)
	HeadDim uint32  // elements per head, at most the spec's MAX_HD
	Scale   float32 // score multiplier: float32(1/sqrt(HeadDim)), as mod.Attend
}

// DecodeAttentionCombinePush is decode_attention_combine's push-constant block.
type DecodeAttentionCombinePush struct {
	N       uint32 // query rows: out is [N][NHead*HeadDim]
	NHead   uint32 // query heads
	HeadDim uint32 // elements per head
	Splits  uint32 // chunks per (row, head): part is [N][NHead][Splits][2+HeadDim]
}

// DecodeAttentionSplitSpec is the split decode_attention's specialization
// constants for splits chunks: AttentionSpec's, then SPLITS.
func DecodeAttentionSplitSpec(splits uint32) []uint32 {
	return append(append([]uint32(nil), AttentionSpec...), splits)
}

// DecodeAttentionSplitGroups is the split decode_attention's dispatch size:
// a workgroup per (row, head, chunk).
func DecodeAttentionSplitGroups(n, nHead, splits uint32) [3]uint32 { return Groups(n * nHead * splits) }

// DecodeAttentionPartialFloats is the size of the split pass's output, in
// floats: per row, head and chunk a max, a sum and headDim outputs.
func DecodeAttentionPartialFloats(n, nHead, headDim, splits uint32) uint64 {
	return uint64(n) * uint64(nHead) * uint64(splits) * uint64(2+headDim)
}

// DecodeAttendPush is decode_attend's push-constant block.
type DecodeAttendPush struct {
	HeadDim    uint32  // elements per head, even
	NHead      uint32  // query heads: q is qkv[0 : NHead*HeadDim]
	NKVHead    uint32  // key/value heads, NHead a multiple of it
	KOff       uint32  // element offset of k in qkv
	VOff       uint32  // element offset of v in qkv
	Layer      uint32  // index of this layer's entry count in counts
	MaxEntries uint32  // entries the cache holds; an append past it is dropped
	Scale      float32 // score multiplier: float32(1/sqrt(HeadDim)), as mod.Attend
	Compact    uint32  // 1: RoPE at the layer's entry count (mod.PositionsCompact), not the token's position
}

// DecodeAttendSpec is decode_attend's specialization constants for splits
// chunks: AttentionSpec's, then SPLITS.
func DecodeAttendSpec(splits uint32) []uint32 { return DecodeAttentionSplitSpec(splits) }

// DecodeAttendKeysSpec is decode_attend_keys's specialization constants
// for heads of hd elements (the model's, exactly: its loops are of that
// constant length) and splits chunks: [WG, hd, splits], WG the larger of
// 64 and hd/2 (an invocation per output pair).
func DecodeAttendKeysSpec(hd, splits uint32) []uint32 {
	return []uint32{max(64, hd/2), hd, splits}
}

// DecodeAttendGroups is decode_attend's dispatch size: a workgroup per
// (head, chunk).
func DecodeAttendGroups(nHead, splits uint32) [3]uint32 { return Groups(nHead * splits) }

// DecodeAttendDoneWords is the size of decode_attend's done counters, in
// u32 words (zero-filled once; each dispatch leaves them zero).
func DecodeAttendDoneWords(nHead uint32) uint64 { return uint64(nHead) + 1 }

func decodeKVVariant(kv KV) Variant {
	elem := "f32"
	var defines []string
	if kv == KVF16 {
		elem, defines = "f16 (pairs in u32 words)", []string{"KV_F16"}
	}
	return Variant{
		Name: DecodeKVName(kv), Source: "decode_kv.comp", Defines: defines, Op: OpDecodeKV, Type: kv.String(),
		Bindings: []Binding{
			{"qkv", ReadWrite, "q [nHead*headDim] (rotated in place), k at kOff, v at vOff, f32"},
			{"pos", Read, "[1] u32 the token's original position"},
			{"freq", Read, "[headDim/2][2] u32: RopeFreqs of the model's table"},
			{"kCache", Write, "[maxEntries][nKVHead*headDim] " + elem + ", rotated"},
			{"vCache", Write, "[maxEntries][nKVHead*headDim] " + elem},
			{"kPos", Write, "[maxEntries] u32 original positions"},
			{"counts", ReadWrite, "[nLayer] u32 entries per layer; counts[layer] is incremented"},
		},
		Push: DecodeKVPush{}, LocalSize: [3]uint32{64, 1, 1},
		Notes: "dispatch (1, 1, 1), or indirectly in a routed block; one token",
	}
}

func decodeAttentionVariant(kv KV) Variant {
	bindings := attentionInputs()
	var defines []string
	if kv == KVF16 {
		defines = []string{"KV_F16"}
		bindings[1].Shape = "[entries][nKVHead*headDim] f16 (pairs in u32 words), rotated"
		bindings[2].Shape = "[entries][nKVHead*headDim] f16 (pairs in u32 words)"
	}
	return Variant{
		Name: DecodeAttentionName(kv), Source: "decode_attention.comp", Defines: defines, Op: OpDecodeAttention, Type: kv.String(),
		Bindings: append(bindings,
			Binding{"counts", Read, "[nLayer] u32: entries = counts[layer]"},
			Binding{"out", Write, "[n][nHead*headDim] f32"}),
		Push: DecodeAttentionPush{}, LocalSize: [3]uint32{32, 1, 1}, LocalSizeSpec: true, Spec: AttentionSpec,
		Notes: "attention with the entry count from a buffer; Spec: [workgroup size, MAX_HD >= headDim]; " +
			"dispatch AttentionGroups(n, nHead)",
	}
}

// decodeAttendVariant is a decode step's whole attention in one dispatch:
// RoPE, the KV append, flash-decoding's chunks and their merge.
func decodeAttendVariant(kv KV) Variant {
	elem := "f32"
	var defines []string
	if kv == KVF16 {
		elem, defines = "f16 (pairs in u32 words)", []string{"KV_F16"}
	}
	return Variant{
		Name: DecodeAttendName(kv), Source: "decode_attend.comp", Defines: defines, Op: OpDecodeAttend, Type: kv.String(),
		Bindings: []Binding{
			{"qkv", Read, "q [nHead*headDim], k at kOff, v at vOff, f32, not rotated"},
			{"pos", Read, "[1] u32 the token's original position"},
			{"freq", Read, "[headDim/2][2] u32: RopeFreqs of the model's table"},
			{"kCache", ReadWrite, "[maxEntries][nKVHead*headDim] " + elem + ", rotated; entry counts[layer] appended"},
			{"vCache", ReadWrite, "[maxEntries][nKVHead*headDim] " + elem},
			{"kPos", ReadWrite, "[maxEntries] u32 original positions"},
			{"counts", ReadWrite, "[nLayer] u32 entries per layer; counts[layer] is incremented"},
			{"part", ReadWrite, "[nHead][splits][2+headDim] f32 scratch: each chunk's max, sum, unnormalized output"},
			{"done", ReadWrite, "[nHead+1] u32 scratch, zero before and after"},
			{"out", Write, "[nHead*headDim] f32 attention output"},
		},
		Push: DecodeAttendPush{}, LocalSize: [3]uint32{32, 1, 1}, LocalSizeSpec: true, Spec: DecodeAttendSpec(16),
		Notes: "one token; Spec [workgroup size, MAX_HD, splits] (DecodeAttendSpec); dispatch DecodeAttendGroups(nHead, splits), " +
			"or indirectly in a routed block; done zero-filled once (DecodeAttendDoneWords)",
	}
}

// decodeAttentionSplitVariant is flash-decoding's first pass: the entries
// in chunks, a workgroup each, partial results out.
func decodeAttendKeysVariant(kv KV) Variant {
	v := decodeAttendVariant(kv)
	v.Name, v.Source = DecodeAttendKeysName(kv), "decode_attend_keys.comp"
	v.LocalSize, v.Spec = [3]uint32{64, 1, 1}, DecodeAttendKeysSpec(64, 16)
	v.Notes = "decode_attend with the keys across invocations and loops of constant length (GPUs); one token; " +
		"Spec [workgroup size, headDim exactly, splits] (DecodeAttendKeysSpec); dispatch DecodeAttendGroups(nHead, splits), " +
		"or indirectly in a routed block; done zero-filled once (DecodeAttendDoneWords)"
	return v
}

func decodeAttentionSplitVariant(kv KV) Variant {
	v := decodeAttentionVariant(kv)
	v.Name, v.Op = DecodeAttentionSplitName(kv), OpDecodeAttentionSplit
	v.Defines = append(v.Defines, "SPLIT")
	v.Bindings[len(v.Bindings)-1] = Binding{"part", Write, "[n][nHead][splits][2+headDim] f32: each chunk's max, sum, unnormalized output"}
	v.Spec = DecodeAttentionSplitSpec(16)
	v.Notes = "flash-decoding's first pass: Spec [workgroup size, MAX_HD, splits] (DecodeAttentionSplitSpec); " +
		"dispatch DecodeAttentionSplitGroups(n, nHead, splits); then decode_attention_combine"
	return v
}

func init() {
	Variants = append(Variants,
		decodeKVVariant(KVF32), decodeKVVariant(KVF16),
		decodeAttentionVariant(KVF32), decodeAttentionVariant(KVF16),
		decodeAttentionSplitVariant(KVF32), decodeAttentionSplitVariant(KVF16),
		decodeAttendVariant(KVF32), decodeAttendVariant(KVF16),
		decodeAttendKeysVariant(KVF32), decodeAttendKeysVariant(KVF16),
		handoffVariant(decodeAttendKeysVariant(KVF32)), handoffVariant(decodeAttendKeysVariant(KVF16)),
		Variant{
			Name: "decode_attention_combine", Source: "decode_attention_combine.comp",
			Bindings: []Binding{
				{"part", Read, "[n][nHead][splits][2+headDim] f32: each chunk's max, sum, unnormalized output"},
				{"out", Write, "[n][nHead*headDim] f32"},
			},
			Push: DecodeAttentionCombinePush{}, LocalSize: [3]uint32{64, 1, 1},
			Notes: "the second pass of flash-decoding; dispatch Groups(n * nHead)",
		},
	)
}
