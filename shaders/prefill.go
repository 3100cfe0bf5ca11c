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
	)
}
