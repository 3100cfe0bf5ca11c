package shaders

// The batched-prefill kernels of generate mode (prefill.comp): the KV cache
// append of a chunk (F32 or F16 entries), the count update after it, and the
// positions of a routed layer's selected rows. Their push-constant struct
// mirrors include/push_prefill.glsl.

// PrefillPush is the push-constant block of every prefill variant.
type PrefillPush struct {
	N          uint32 // rows of the chunk (an upper bound of the rows appended)
	KVDim      uint32 // elements of a cache entry, even
	Layer      uint32 // index of this layer's entry count in counts
	MaxEntries uint32 // entries the cache holds; an append past it is dropped
}

func prefillKV(kv KV, defines ...string) Variant {
	typ := kv.String()
	return Variant{
		Name: PrefillKVName(kv), Source: "prefill.comp", Defines: append([]string{"PREFILL_KV"}, defines...),
		Bindings: []Binding{
			{"k", Read, "[n][kvDim] f32, rotated"},
			{"v", Read, "[n][kvDim] f32"},
			{"pos", Read, "[n] u32 original positions"},
			{"rows", Read, "[1] u32 rows to append (<= n)"},
			{"counts", Read, "[nLayer] u32: the append starts at counts[layer]"},
			{"kCache", Write, "[maxEntries][kvDim] " + typ},
			{"vCache", Write, "[maxEntries][kvDim] " + typ},
			{"kPos", Write, "[maxEntries] u32 original positions"},
		},
		Push: PrefillPush{}, LocalSize: [3]uint32{64, 1, 1},
		Notes: "dispatch Groups(n); then prefill_count",
	}
}

func init() {
	Variants = append(Variants,
		prefillKV(KVF32),
		prefillKV(KVF16, "KV_F16"),
		Variant{
			Name: "prefill_count", Source: "prefill.comp", Defines: []string{"PREFILL_COUNT"},
			Bindings: []Binding{
				{"rows", Read, "[1] u32 rows appended"},
				{"counts", ReadWrite, "[nLayer] u32: counts[layer] += rows, at most maxEntries"},
			},
			Push: PrefillPush{}, LocalSize: [3]uint32{64, 1, 1},
			Notes: "dispatch (1, 1, 1)",
		},
		Variant{
			Name: "prefill_args", Source: "prefill.comp", Defines: []string{"PREFILL_ARGS"},
			Bindings: []Binding{
				{"count", Read, "[1] u32 selected rows"},
				{"table", Read, "[maxEntries+1][n][3] u32 each dispatch's workgroups for each count"},
				{"args", Write, "[n][3] u32 VkDispatchIndirectCommand"},
			},
			Push: PrefillPush{}, LocalSize: [3]uint32{64, 1, 1},
			Notes: "push N = dispatches, MaxEntries = the largest count; dispatch Groups(ceil(n / 64))",
		},
		Variant{
			Name: "prefill_pos", Source: "prefill.comp", Defines: []string{"PREFILL_POS"},
			Bindings: []Binding{
				{"idx", Read, "[count] u32 selected rows of the chunk"},
				{"count", Read, "[1] u32"},
				{"chunkPos", Read, "[n] u32 the chunk's positions"},
				{"pos", Write, "[n] u32: the first count are the selected rows' positions"},
			},
			Push: PrefillPush{}, LocalSize: [3]uint32{64, 1, 1},
			Notes: "dispatch Groups(ceil(n / 64))",
		},
		Variant{
			Name: "prefill_pos_compact", Source: "prefill.comp", Defines: []string{"PREFILL_POS", "COMPACT"},
			Bindings: []Binding{
				{"idx", Read, "[count] u32 selected rows of the chunk"},
				{"count", Read, "[1] u32"},
				{"chunkPos", Read, "[n] u32 the chunk's positions"},
				{"pos", Write, "[n] u32: the first count are the selected rows' positions"},
				{"counts", Read, "[nLayer] u32 entries per layer, before the chunk's append"},
				{"ropePos", Write, "[n] u32: the first count are counts[layer] + j, the compact positions"},
			},
			Push: PrefillPush{}, LocalSize: [3]uint32{64, 1, 1},
			Notes: "push Layer; dispatch Groups(ceil(n / 64)) before prefill_count",
		},
	)
}
