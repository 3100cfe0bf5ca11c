package shaders

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The plans hand out what the profile's flags choose, each step a kernel of
// the table: fused attention alone; decode_kv then one pass, or the split
// pass and its combine for a long cache; the gate/up matvec that gates
// only for one stacked matrix with norms folded; a norm of its own where
// norms do not fold.
func TestPlans(t *testing.T) {
	roles := func(steps []Step) (out []Role) {
		for _, st := range steps {
			out = append(out, st.Role)
			if st.Variant != "" {
				_, err := Lookup(st.Variant)
				assert.NoError(t, err)
			}
		}
		return out
	}
	gpu := NewProfile(smallGPU)
	assert.Equal(t, []Role{RoleAttend}, roles(gpu.DecodeAttention(KVF16, 4096, 64)))
	assert.Equal(t, DecodeAttendKeysName(KVF16), gpu.DecodeAttention(KVF16, 4096, 64)[0].Variant)
	assert.Equal(t, DecodeAttendKeysSpec(128, gpu.AttentionSplits(4096)), gpu.DecodeAttention(KVF16, 4096, 128)[0].Spec)
	old := gpu
	old.AttendKeys = false // the self-check's fallback: decode_attend
	assert.Equal(t, DecodeAttendName(KVF16), old.DecodeAttention(KVF16, 4096, 64)[0].Variant)
	assert.Equal(t, DecodeAttendSpec(gpu.AttentionSplits(4096)), old.DecodeAttention(KVF16, 4096, 64)[0].Spec)
	split := gpu
	split.FuseAttention = false
	assert.Equal(t, []Role{RoleKV, RoleAttentionSplit, RoleCombine}, roles(split.DecodeAttention(KVF16, 4096, 64)))
	assert.Equal(t, []Role{RoleKV, RoleAttention}, roles(split.DecodeAttention(KVF32, 16, 64)), "a short cache: one pass")
	assert.Equal(t, []Step{{Role: RoleMatvec, Fusion: FuseNormSwiGLU}}, gpu.GateUp(true))
	assert.Equal(t, []Role{RoleMatvec, RoleSwiGLU}, roles(gpu.GateUp(false)))
	assert.Equal(t, FuseNorm, gpu.GateUp(false)[0].Fusion)
	assert.Equal(t, []Role{RoleMatvec, RoleArgmax}, roles(gpu.Head()))
	assert.Equal(t, "argmax_wide", gpu.Head()[1].Variant, "a GPU: a row over many workgroups")

	cpu := NewProfile(Device{CPU: true, SubgroupSize: 8})
	assert.Equal(t, []Role{RoleKV, RoleAttention}, roles(cpu.DecodeAttention(KVF32, 4096, 64)))
	assert.Equal(t, []Role{RoleNorm, RoleMatvec, RoleSwiGLU}, roles(cpu.GateUp(true)), "no norm folding: no fused SwiGLU")
	assert.Equal(t, FuseNone, cpu.AttentionInput()[1].Fusion)
	assert.Equal(t, []Role{RoleNorm, RoleMatvec, RoleArgmax}, roles(cpu.Head()))
	assert.Equal(t, "argmax", cpu.Head()[2].Variant)
}
