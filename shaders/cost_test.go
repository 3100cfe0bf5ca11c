package shaders

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/modrun/modrun/vk"
)

// KernelCost against counts done by hand, one row per kernel family the
// profile reports FLOPs for, and the kernels it must not count.
func TestKernelCost(t *testing.T) {
	cases := []struct {
		name     string
		push     any
		flops    uint64 // at start 0
		perStart uint64
		path     Path
		ok       bool
	}{
		// 512 tokens of a 1.1B's gate+up-sized matmul: 2*512*5632*2048.
		{"matmul_q8_0", MatmulPush{Rows: 5632, Cols: 2048, N: 512, WRows: 5632, LdY: 5632}, 11811160064, 0, PathShader, true},
		{"matmul_pf_f16", MatmulPush{Rows: 3, Cols: 5, N: 7}, 2 * 3 * 5 * 7, 0, PathShader, true},
		{"matmul_coop_q4_k", MatmulPush{Rows: 100, Cols: 256, N: 33}, 2 * 100 * 256 * 33, 0, PathTensor, true},
		{"matmul_coop_emu_f16", MatmulPush{Rows: 100, Cols: 256, N: 33}, 2 * 100 * 256 * 33, 0, PathShader, true},
		// A decode matvec: one token, 2048x2048: 8,388,608.
		{"matvec_q8_0_sgrows_add", MatvecPush{Rows: 2048, Cols: 2048, N: 1}, 8388608, 0, PathShader, true},
		// gate and up stacked: 2 matrices of 5632x2048, 3 tokens.
		{"matvec_f16_sgrows_norm_swiglu", MatvecPush{Rows: 5632, Cols: 2048, N: 3}, 2 * 2 * 5632 * 2048 * 3, 0, PathShader, true},
		{"matvec_f32", MatvecPush{Rows: 10, Cols: 20, N: 2}, 800, 0, PathShader, true},
		// An eval window of 4 rows over 4 entries, causal: 1+2+3+4 = 10 keys,
		// each 4*hd*nHead = 4*64*2 = 512 FLOPs.
		{"attention_split", AttentionSplitPush{N: 4, Entries: 4, NHead: 2, NKVHead: 1, HeadDim: 64, Sorted: 1}, 10 * 512, 0, PathShader, true},
		// 2 rows after 3 earlier entries: 4+5 keys.
		{"attention_split", AttentionSplitPush{N: 2, Entries: 5, NHead: 2, NKVHead: 1, HeadDim: 64, Sorted: 1}, 9 * 512, 0, PathShader, true},
		// Not sorted: every row reads every entry, 2*5.
		{"attention_split", AttentionSplitPush{N: 2, Entries: 5, NHead: 2, NKVHead: 1, HeadDim: 64}, 10 * 512, 0, PathShader, true},
		// Count on the GPU: 3 rows from start s see s+1, s+2, s+3 keys: 6 + 3s.
		{"attention_split_counts_f16", AttentionSplitPush{N: 3, Entries: 2048, NHead: 32, NKVHead: 4, HeadDim: 64}, 6 * 4 * 32 * 64, 3 * 4 * 32 * 64, PathShader, true},
		{"decode_attention_f16", DecodeAttentionPush{N: 1, NHead: 32, NKVHead: 4, HeadDim: 64}, 4 * 32 * 64, 4 * 32 * 64, PathShader, true},
		{"decode_attention_split", DecodeAttentionPush{N: 2, NHead: 4, NKVHead: 4, HeadDim: 8}, 3 * 4 * 4 * 8, 2 * 4 * 4 * 8, PathShader, true},
		// The step's row sees the start old entries and its own.
		{"decode_attend_f16", DecodeAttendPush{HeadDim: 64, NHead: 32, NKVHead: 4}, 4 * 32 * 64, 4 * 32 * 64, PathShader, true},
		{"decode_attention_combine", DecodeAttentionCombinePush{N: 1, NHead: 32, HeadDim: 64, Splits: 4}, 0, 0, "", false},
		{"attention_merge", AttentionSplitPush{N: 4}, 0, 0, "", false},
		{"rmsnorm", RMSNormPush{}, 0, 0, "", false},
		{"paged_attention_f16", PagedPush{N: 4}, 0, 0, "", false},
		{"probe_read", ProbePush{}, 0, 0, "", false},
	}
	for _, c := range cases {
		got, ok := KernelCost(c.name, vk.MustPackPush(c.push))
		if !assert.Equal(t, c.ok, ok, "%s %+v: counted", c.name, c.push) || !ok {
			continue
		}
		assert.Equal(t, c.flops, got.FLOPs, "%s %+v: FLOPs", c.name, c.push)
		assert.Equal(t, c.perStart, got.PerStart, "%s %+v: FLOPs per start position", c.name, c.push)
		assert.Equal(t, c.path, got.Path, "%s: path", c.name)
	}
	// At adds the start's share: attention_split_counts_f16 above at start 10.
	c, _ := KernelCost("attention_split_counts_f16", vk.MustPackPush(AttentionSplitPush{N: 3, NHead: 32, HeadDim: 64}))
	assert.Equal(t, uint64((11+12+13)*4*32*64), c.At(10))
}

// A push block that is not the variant's is not counted (rather than read
// as garbage).
func TestKernelCostWrongPush(t *testing.T) {
	_, ok := KernelCost("matmul_q8_0", vk.MustPackPush(MatvecPush{Rows: 1, Cols: 1, N: 1}))
	assert.False(t, ok)
	_, ok = KernelCost("matvec_f16", nil)
	assert.False(t, ok)
}

// Every variant the table counts is a real one (a renamed kernel would
// silently lose its FLOPs), and every matmul, matvec and attention variant
// is counted.
func TestKernelCostCoversVariants(t *testing.T) {
	counted := map[string]bool{}
	for _, v := range Variants {
		if v.Push == nil {
			continue
		}
		_, ok := KernelCost(v.Name, vk.MustPackPush(v.Push))
		counted[v.Name] = ok
	}
	for _, r := range costRules {
		found := false
		for name := range counted {
			if len(name) >= len(r.prefix) && name[:len(r.prefix)] == r.prefix {
				found = true
			}
		}
		assert.True(t, found, "rule %q matches no variant", r.prefix)
	}
	for _, v := range Variants {
		switch v.Source {
		case "matmul.comp", "matmul_coop.comp", "matmul_direct.comp", "matvec.comp", "matvec_rows.comp", "matvec_words.comp", "matvec_dot.comp", "matvec_lanes.comp", "decode_attend.comp", "decode_attend_keys.comp", "decode_attention.comp":
			assert.True(t, counted[v.Name], "%s (%s) has no FLOP count", v.Name, v.Source)
		case "attention_split.comp": // attention_merge combines tiles: no products
			assert.Equal(t, v.Name != "attention_merge", counted[v.Name], v.Name)
		default:
			// A new kernel whose name a rule's prefix happens to match (a
			// split-K matmul's reduce kernel under "matmul_") would be
			// counted as that family: give it its own row in costRules.
			assert.False(t, counted[v.Name], "%s (%s) is counted by a rule written for another family: add its own costRules row", v.Name, v.Source)
		}
	}
}
