package shaders

import "fmt"

// KV is a KV cache's element type. The zero value is no choice: the device
// profile's (Profile.KV), as an empty --kv-type is.
type KV uint8

const (
	KVDefault KV = iota // the device profile's choice
	KVF32               // float32 entries
	KVF16               // IEEE halves, two to a word: half the bytes per token of context
)

// KVTypes are the element types a KV cache can have.
var KVTypes = []KV{KVF32, KVF16}

// ParseKV reads a KV type as --kv-type spells it: "f16", "f32", or "" for
// KVDefault.
func ParseKV(name string) (KV, error) {
	switch name {
	case "":
		return KVDefault, nil
	case "f32":
		return KVF32, nil
	case "f16":
		return KVF16, nil
	}
	return KVDefault, fmt.Errorf("KV cache type %q is not f16 or f32", name)
}

// String is the type as --kv-type spells it ("f32", "f16"; "default").
func (kv KV) String() string {
	switch kv {
	case KVF32:
		return "f32"
	case KVF16:
		return "f16"
	case KVDefault:
		return "default"
	}
	return fmt.Sprintf("KV(%d)", uint8(kv))
}

// suffix ends the names of the variants that read or write a KV cache:
// none for F32 (the first variants had no other), "_f16" for F16. Only a
// chosen type has kernels: a KVDefault that reaches a kernel's name is the
// engine's bug.
func (kv KV) suffix() string {
	switch kv {
	case KVF32:
		return ""
	case KVF16:
		return "_f16"
	}
	panic(fmt.Sprintf("shaders: no kernels for KV cache type %v", kv))
}

// ElementBytes is the size of one cached key or value element.
func (kv KV) ElementBytes() uint64 {
	if kv == KVF16 {
		return 2
	}
	return 4
}

// The decode attention variants for a KV cache type (KVF32 or KVF16): the
// engine asks for them by these, never by building the names.
func DecodeKVName(kv KV) string             { return "decode_kv" + kv.suffix() }
func DecodeAttentionName(kv KV) string      { return "decode_attention" + kv.suffix() }
func DecodeAttentionSplitName(kv KV) string { return "decode_attention_split" + kv.suffix() }
func DecodeAttendName(kv KV) string         { return "decode_attend" + kv.suffix() }
func DecodeAttendKeysName(kv KV) string     { return "decode_attend_keys" + kv.suffix() }

// PrefillKVName is the batched KV append's variant for cache entries of
// type kv.
func PrefillKVName(kv KV) string {
	_ = kv.suffix() // a chosen type
	return "prefill_kv_" + kv.String()
}

// AttentionSplitName is attention_split's variant for k and v of KV type
// kv, over a cache whose entry count is on the GPU (counts[layer]: a
// generate-mode cache) or given (an eval window's rows, F32 only).
func AttentionSplitName(kv KV, counts bool) string {
	if counts {
		return "attention_split_counts" + kv.suffix()
	}
	return "attention_split" + kv.suffix()
}

// AttentionSplitLanesName is AttentionSplitName's variant with several
// invocations a query row (ATTN_LANES: Profile.AttentionSplit).
func AttentionSplitLanesName(kv KV, counts bool) string {
	if counts {
		return "attention_split_counts_lanes" + kv.suffix()
	}
	return "attention_split_lanes" + kv.suffix()
}
