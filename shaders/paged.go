package shaders

import "slices"

// The paged kernels (paged.comp): the KV cache of many sequences in one
// pool of pages, for the steps of engine/vulkan's Stepper (a step's rows
// belong to different sequences, each with its own block tables). Their
// push-constant struct mirrors include/push_paged.glsl.

// PagedPush is the push-constant block of every paged variant.
type PagedPush struct {
	N           uint32  // rows (an upper bound of the count read from a buffer)
	KVDim       uint32  // elements of an entry, even
	Width       uint32  // pages per block of the table
	Layer       uint32  // the table's layer (0 for a routed layer's own table)
	BlockTokens uint32  // entries a page
	NRouted     uint32  // paged_gather, paged_advance: routed layers
	Routed      uint32  // paged_gather: this one's index among them
	Compact     uint32  // paged_gather: 1: RoPE at the entry (mod.PositionsCompact)
	NHead       uint32  // paged_attention: query heads
	NKVHead     uint32  // paged_attention: key/value heads
	HeadDim     uint32  // paged_attention: elements per head, the spec's HD
	Scale       float32 // paged_attention: 1/sqrt(HeadDim)
	Splits      uint32  // paged_attention: key tiles per (row, head)
	SplitLen    uint32  // paged_attention: entries per key tile
	Stride      uint32  // paged_split: elements of a row of qkv; paged_advance: the trace's rows a field; paged_gather: of a row of x
	KOff        uint32  // paged_split: where a row's k starts in it (q at 0)
	VOff        uint32  // paged_split: where its v starts
}

// PagedKVName and PagedAttentionName are the paged write's and attention's
// variants for pool entries of type kv.
func PagedKVName(kv KV) string        { return "paged_kv" + kv.suffix() }
func PagedAttentionName(kv KV) string { return "paged_attention" + kv.suffix() }

// PagedQKVName is the fused split, RoPE and KV write's variant for pool
// entries of type kv.
func PagedQKVName(kv KV) string { return "paged_qkv" + kv.suffix() }

// PagedAttendName is paged_attention with its merge (PAGED_MERGE: the
// last tile of a row-head merges) for pool entries of type kv.
func PagedAttendName(kv KV) string { return "paged_attend" + kv.suffix() }

// PagedAttendOwnName is paged_qkv and paged_attend in one dispatch
// (PAGED_OWN: for a step whose rows are each their sequence's only one)
// for pool entries of type kv.
func PagedAttendOwnName(kv KV) string { return "paged_attend_own" + kv.suffix() }

// IsAttendOwn says whether v is a paged_attend_own variant.
func IsAttendOwn(v Variant) bool {
	return v.Op == OpPagedAttend && slices.Contains(v.Defines, "PAGED_OWN")
}

// PagedAttentionRows is paged_attention's invocations per workgroup (its
// specialization constant 0): each walks every PagedAttentionRows-th entry
// of the tile, and the workgroup's shared memory holds their partial
// outputs, PagedAttentionRows x headDim floats (8 KiB at 128).
const PagedAttentionRows = 16

// PagedAttentionSpec is paged_attention's specialization constants for
// head dimension hd.
func PagedAttentionSpec(hd uint32) []uint32 { return []uint32{PagedAttentionRows, hd} }

// PagedAttentionGroups is paged_attention's dispatch size.
func PagedAttentionGroups(n, nHead, splits uint32) [3]uint32 { return Groups(n * nHead * splits) }

func pagedKV(kv KV, defines ...string) Variant {
	typ := kv.String()
	return Variant{
		Name: PagedKVName(kv), Source: "paged.comp", Defines: append([]string{"PAGED_KV"}, defines...),
		Bindings: []Binding{
			{"k", Read, "[n][kvDim] f32, rotated"},
			{"v", Read, "[n][kvDim] f32"},
			{"rows", Read, "[1] u32 rows to write (<= n)"},
			{"ent", Read, "[n] u32 each row's entry"},
			{"toff", Read, "[n] u32 each row's table offset in tables"},
			{"tables", Read, "the step's block tables, u32 page ids"},
			{"kPool", Write, "[pages*blockTokens][kvDim] " + typ},
			{"vPool", Write, "[pages*blockTokens][kvDim] " + typ},
		},
		Push: PagedPush{}, LocalSize: [3]uint32{64, 1, 1},
		Notes: "dispatch Groups(n)",
	}
}

func pagedQKV(kv KV, defines ...string) Variant {
	typ := kv.String()
	return Variant{
		Name: PagedQKVName(kv), Source: "paged.comp", Defines: append([]string{"PAGED_QKV"}, defines...),
		Bindings: []Binding{
			{"qkv", Read, "[n][stride] f32: q [nHead*headDim] at 0, k [kvDim] at kOff, v [kvDim] at vOff"},
			{"ropePos", Read, "[n] u32 RoPE's positions"},
			{"freq", Read, "[headDim/2] RopeFreqs"},
			{"rows", Read, "[1] u32 rows to write (<= n)"},
			{"ent", Read, "[n] u32 each row's entry"},
			{"toff", Read, "[n] u32 each row's table offset in tables"},
			{"tables", Read, "the step's block tables, u32 page ids"},
			{"q", Write, "[n][nHead*headDim] f32, rotated"},
			{"kPool", Write, "[pages*blockTokens][kvDim] " + typ + ", rotated"},
			{"vPool", Write, "[pages*blockTokens][kvDim] " + typ},
		},
		Push: PagedPush{}, LocalSize: [3]uint32{64, 1, 1},
		Notes: "push N, KVDim, Width, Layer, BlockTokens, NHead, NKVHead, HeadDim, Stride, KOff, VOff; dispatch Groups(n)",
	}
}

func pagedAttention(kv KV, defines ...string) Variant {
	typ := kv.String()
	return Variant{
		Name: PagedAttentionName(kv), Source: "paged.comp", Defines: append([]string{"PAGED_ATTENTION"}, defines...),
		Bindings: []Binding{
			{"q", Read, "[n][nHead*headDim] f32, rotated"},
			{"kPool", Read, "[pages*blockTokens][kvDim] " + typ},
			{"vPool", Read, "[pages*blockTokens][kvDim] " + typ},
			{"rows", Read, "[1] u32 query rows (<= n)"},
			{"ent", Read, "[n] u32 each row's entry: it sees entries 0..ent of its table"},
			{"toff", Read, "[n] u32 each row's table offset in tables"},
			{"tables", Read, "the step's block tables, u32 page ids"},
			{"partO", Write, "[n*nHead*splits][headDim] f32"},
			{"partML", Write, "[n*nHead*splits][2] f32 (max, sum)"},
		},
		Push: PagedPush{}, LocalSize: [3]uint32{PagedAttentionRows, 1, 1}, LocalSizeSpec: true, Spec: PagedAttentionSpec(64),
		Notes: "Spec: PagedAttentionSpec(headDim); dispatch PagedAttentionGroups(n, nHead, splits); then attention_merge",
	}
}

func pagedAttend(kv KV, defines ...string) Variant {
	v := pagedAttention(kv, append([]string{"PAGED_MERGE"}, defines...)...)
	v.Name, v.Op, v.Type = PagedAttendName(kv), OpPagedAttend, kv.String()
	v.Bindings = append(v.Bindings[:7:7],
		Binding{"partO", ReadWrite, "[n*nHead*splits][headDim] f32 (coherent)"},
		Binding{"partML", ReadWrite, "[n*nHead*splits][2] f32 (max, sum) (coherent)"},
		Binding{"done", ReadWrite, "[n*nHead] u32 tiles done, zero before the dispatch and left zero"},
		Binding{"out", Write, "[n][nHead*headDim] f32"})
	v.Notes = "Spec: PagedAttentionSpec(headDim); dispatch PagedAttentionGroups(n, nHead, splits); the last tile of each row-head merges (no attention_merge)"
	return v
}

func pagedAttendOwn(kv KV, defines ...string) Variant {
	v := pagedAttend(kv, append([]string{"PAGED_OWN"}, defines...)...)
	v.Name = PagedAttendOwnName(kv)
	typ := kv.String()
	v.Bindings = slices.Clone(v.Bindings)
	v.Bindings[0] = Binding{"qkv", Read, "[n][stride] f32: q [nHead*headDim] at 0, k [kvDim] at kOff, v [kvDim] at vOff, raw"}
	v.Bindings[1] = Binding{"kPool", ReadWrite, "[pages*blockTokens][kvDim] " + typ + ", rotated: each row's own entry written"}
	v.Bindings[2] = Binding{"vPool", ReadWrite, "[pages*blockTokens][kvDim] " + typ + ": each row's own entry written"}
	v.Bindings = append(v.Bindings,
		Binding{"ropePos", Read, "[n] u32 RoPE's positions"},
		Binding{"freq", Read, "[headDim/2] RopeFreqs"})
	v.Notes = "rows each their sequence's only one; push as paged_attend's and Stride, KOff, VOff; Spec: PagedAttentionSpec(headDim); " +
		"dispatch PagedAttentionGroups(n, nHead, splits); paged_qkv's RoPE and KV write, then paged_attend's attention and merge"
	return v
}

func init() {
	Variants = append(Variants,
		pagedKV(KVF32),
		pagedKV(KVF16, "KV_F16"),
		pagedQKV(KVF32),
		pagedQKV(KVF16, "KV_F16"),
		pagedAttention(KVF32),
		pagedAttention(KVF16, "KV_F16"),
		pagedAttend(KVF32),
		pagedAttend(KVF16, "KV_F16"),
		pagedAttendOwn(KVF32),
		pagedAttendOwn(KVF16, "KV_F16"),
		Variant{
			Name: "paged_split", Source: "paged.comp", Defines: []string{"PAGED_SPLIT"},
			Bindings: []Binding{
				{"qkv", Read, "[n][stride] f32: q [nHead*headDim] at 0, k [kvDim] at kOff, v [kvDim] at vOff"},
				{"q", Write, "[n][nHead*headDim] f32"},
				{"k", Write, "[n][kvDim] f32"},
				{"v", Write, "[n][kvDim] f32"},
			},
			Push: PagedPush{}, LocalSize: [3]uint32{64, 1, 1},
			Notes: "push N, NHead, HeadDim, KVDim, Stride, KOff, VOff; dispatch Groups(n)",
		},
		Variant{
			Name: "paged_gather", Source: "paged.comp", Defines: []string{"PAGED_GATHER"},
			Bindings: []Binding{
				{"idx", Read, "[count] u32 selected rows, ascending"},
				{"count", Read, "[1] u32"},
				{"rowPos", Read, "[n] u32 every row's position"},
				{"rowSeq", Read, "[n] u32 a word per sequence"},
				{"rmeta", Read, "[n][nRouted][2] u32 (table offset, length before the step)"},
				{"pos", Write, "[n] u32 the selected rows' positions"},
				{"ropePos", Write, "[n] u32 RoPE's positions"},
				{"ent", Write, "[n] u32 the selected rows' entries"},
				{"toff", Write, "[n] u32 their tables' offsets"},
				{"x", Read, "[n][stride] f32 every row's residual"},
				{"xs", Write, "[count][stride] f32 the selected rows', gathered"},
			},
			Push: PagedPush{}, LocalSize: [3]uint32{64, 1, 1},
			Notes: "push N, NRouted, Routed, Compact, Stride (nEmbd); dispatch Groups(n): a workgroup a selected row",
		},
		Variant{
			Name: "paged_advance", Source: "paged.comp", Defines: []string{"PAGED_ADVANCE"},
			Bindings: []Binding{
				{"trace", Read, "[nRouted][3][stride] u32: r, p, selected"},
				{"rmeta", ReadWrite, "[n][nRouted][2] u32 (table offset, length): each length advanced by its row's selections"},
			},
			Push: PagedPush{}, LocalSize: [3]uint32{64, 1, 1},
			Notes: "a step whose rows are each their sequence's only one; push N, NRouted, Stride; dispatch Groups(ceil(n / 64))",
		},
	)
}
