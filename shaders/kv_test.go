package shaders

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseKV: --kv-type's spellings read back as String writes them, ""
// is the profile's choice, and anything else is an error naming the value.
func TestParseKV(t *testing.T) {
	for _, tc := range []struct {
		name string
		want KV
	}{{"", KVDefault}, {"f32", KVF32}, {"f16", KVF16}} {
		kv, err := ParseKV(tc.name)
		require.NoError(t, err, "%q", tc.name)
		assert.Equal(t, tc.want, kv, "%q", tc.name)
	}
	for _, kv := range KVTypes {
		back, err := ParseKV(kv.String())
		require.NoError(t, err)
		assert.Equal(t, kv, back)
	}
	for _, bad := range []string{"q8", "F16", "f16 ", "default", "bf16"} {
		_, err := ParseKV(bad)
		assert.EqualError(t, err, `KV cache type "`+bad+`" is not f16 or f32`)
	}
}

// TestKVNames: every KV cache type's variants exist in the table (so the
// engine never asks for a name the table lacks), and KVDefault, which has
// no kernels, is refused as a broken invariant.
func TestKVNames(t *testing.T) {
	for _, kv := range KVTypes {
		for _, name := range []string{DecodeKVName(kv), DecodeAttentionName(kv), DecodeAttentionSplitName(kv),
			DecodeAttendName(kv), DecodeAttendKeysName(kv), PrefillKVName(kv), AttentionSplitName(kv, true)} {
			_, err := Lookup(name)
			assert.NoError(t, err, "%v: %s is in Variants", kv, name)
		}
	}
	_, err := Lookup(AttentionSplitName(KVF32, false))
	assert.NoError(t, err, "eval mode's attention")
	assert.Equal(t, []string{"decode_kv", "decode_kv_f16"}, []string{DecodeKVName(KVF32), DecodeKVName(KVF16)}, "the SPIR-V files' names")
	assert.Equal(t, uint64(4), KVF32.ElementBytes())
	assert.Equal(t, uint64(2), KVF16.ElementBytes())
	assert.Panics(t, func() { DecodeKVName(KVDefault) })
	assert.Panics(t, func() { PrefillKVName(KVDefault) })
}
