package vulkan

import (
	"testing"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
	"github.com/modrun/modrun/vk/vktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPagedRegistersRDNA3: the batched step's paged kernels a GPU profile
// takes compile without a spilled register with AMD's compiler (RADV's
// null gfx1100 device) at head dimensions 64 and 128, for each pool type:
// the attention (paged_attend: the query in shared memory, HD/16 output
// dims an invocation; paged_attend_own, which also turns and writes its
// rows' own entries, alike), the split-RoPE-write and the write. paged_attention,
// lavapipe's (a query row and an output row of registers an invocation),
// spills there over an F16 pool (a GPU's): the test of the statistics'
// sense.
func TestPagedRegistersRDNA3(t *testing.T) {
	if !vktest.OnNullRADV(t, "gfx1100") {
		return
	}
	dev := vktest.Open(t, vk.InstanceOptions{KernelStatistics: true})
	prof := DeviceProfile(dev.Info())
	require.True(t, prof.FuseAttention, "the RDNA3 profile takes paged_attend")
	ks := newKernels(dev, &prof, nil)
	defer ks.Close()
	for _, kv := range []shaders.KV{shaders.KVF32, shaders.KVF16} {
		for _, hd := range []uint32{64, 128} {
			for _, c := range []struct {
				name string
				spec []uint32
			}{
				{shaders.PagedAttendName(kv), shaders.PagedAttentionSpec(hd)},
				{shaders.PagedAttendOwnName(kv), shaders.PagedAttentionSpec(hd)},
				{shaders.PagedQKVName(kv), nil},
				{shaders.PagedKVName(kv), nil},
			} {
				k, err := ks.get(c.name, c.spec)
				require.NoError(t, err)
				n, log := spills(t, k)
				t.Logf("%s%v: %s", c.name, k.spec, log)
				assert.Zero(t, n, "%s%v spills", c.name, k.spec)
			}
			if kv == shaders.KVF16 { // lavapipe's walk over a GPU's pool
				k, err := ks.get(shaders.PagedAttentionName(kv), shaders.PagedAttentionSpec(hd))
				require.NoError(t, err)
				n, log := spills(t, k)
				t.Logf("before: %s%v: %s", k.v.Name, k.spec, log)
				assert.Positive(t, n, "%s%v: a query row and an output row of registers", k.v.Name, k.spec)
			}
		}
	}
}
