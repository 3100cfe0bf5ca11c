package vulkan

import (
	"testing"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
	"github.com/modrun/modrun/vk/vktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPagedRegistersRDNA3: the batched step's paged kernels compile
// without a spilled register with AMD's compiler (RADV's null gfx1100
// device) at head dimensions 64 and 128, for each pool type: the
// attention (with and without its merge) keeps the query in shared memory
// and HD/16 output dims an invocation, where a query row and an output
// row of registers a invocation spilled 115 registers at 64 and 353 at
// 128.
func TestPagedRegistersRDNA3(t *testing.T) {
	if !vktest.OnNullRADV(t, "gfx1100") {
		return
	}
	dev := vktest.Open(t, vk.InstanceOptions{KernelStatistics: true})
	prof := DeviceProfile(dev.Info())
	ks := newKernels(dev, &prof, nil)
	defer ks.Close()
	for _, kv := range []shaders.KV{shaders.KVF32, shaders.KVF16} {
		for _, hd := range []uint32{64, 128} {
			for _, name := range []string{shaders.PagedAttentionName(kv), shaders.PagedAttendName(kv), shaders.PagedQKVName(kv), shaders.PagedKVName(kv)} {
				var spec []uint32
				if name == shaders.PagedAttentionName(kv) || name == shaders.PagedAttendName(kv) {
					spec = shaders.PagedAttentionSpec(hd)
				}
				k, err := ks.get(name, spec)
				require.NoError(t, err)
				n, log := spills(t, k)
				t.Logf("%s%v: %s", name, k.spec, log)
				assert.Zero(t, n, "%s%v spills", name, k.spec)
			}
		}
	}
}
