package vulkan

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/mod"
)

// TestStepDispatches counts the batched step's dispatches a block (the
// frame's blockStats) for a few rows, the matvec path: on lavapipe's own
// profile a dense block is the norm, the stacked q|k|v matvec, paged_qkv
// (its split, the RoPE of q and k and the KV write, which took four
// dispatches), attention and its merge, o with the add, the norm with
// gate|up and SwiGLU, and down with the add (8); a GPU's profile folds the
// norm into the q|k|v matvec (FuseNorm) and the merge into the attention
// (FuseAttention: paged_attend), 6. A routed block adds its selection,
// gather and scatter around the same (14, 12). Where each row is its
// sequence's only one (every sequence decoding, a chain's steps), a GPU's
// profile runs paged_qkv and paged_attend as one (AttendOwn:
// paged_attend_own), 5 and 11: a dense block as many as the decode
// step's. Each dispatch costs a GPU a launch and a barrier's drain (~5-10
// us on the H200, docs/decode-attention-cost.md), so a block's count is
// its floor.
func TestStepDispatches(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../models/tinystories-mod.gguf")
	want := map[string][2][2]int{"own": {{8, 14}, {8, 14}}, "gpu": {{6, 12}, {5, 11}}} // [rows of one sequence, rows each its own][dense, routed]
	for _, pc := range deviceProfiles(dev) {
		run, err := New(dev, m, mod.RoutingRouter, Options{KVType: "f32", ContextLen: 64, DeviceProfile: pc.prof})
		require.NoError(t, err)
		st, err := run.Stepper(4)
		require.NoError(t, err)
		require.NoError(t, st.Reserve(32, 16))
		require.NoError(t, st.growTables(64))
		for _, n := range []int{1, 4} {
			for o, own := range []bool{false, true} {
				f, err := st.frame(n, n, n, own)
				require.NoError(t, err)
				rec, err := run.recordFrame(f)
				require.NoError(t, err)
				rec.Close()
				dense, routed := f.blockStats[0].Dispatches, f.blockStats[1].Dispatches
				t.Logf("%s, %d rows, own %v: %d dispatches (a dense block %d, a routed one %d); the runner's decode step: %+v", pc.name, n, own, rec.Stats().Dispatches, dense, routed, run.StepCounts())
				assert.Equal(t, want[pc.name][o], [2]int{dense, routed}, "%s, %d rows, own %v: a dense and a routed block's dispatches", pc.name, n, own)
			}
		}
		run.Close()
	}
}
