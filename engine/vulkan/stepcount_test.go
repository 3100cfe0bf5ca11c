package vulkan

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/mod"
)

// TestStepDispatches counts the batched step's dispatches a block (the
// frame's blockStats) for a few rows, the matvec path: on lavapipe's own
// profile a dense block is the norm, the stacked q|k|v matvec, paged_qkv
// (its split, the RoPE of q and k and the KV write, which took four
// dispatches), attention and its merge, o with the add, the norm with
// gate|up and SwiGLU, and down with the add (8); a GPU's profile folds the
// norm into the q|k|v matvec (FuseNorm) and the merge into the attention
// (FuseAttention: paged_attend), 6. A routed block adds route_rows (the
// scores, the selection, the block's indirect arguments, the gather and
// the entries, in one dispatch on the matvec path) and the gated scatter
// around the same (10, 8). Where each row is its sequence's only one
// (every sequence decoding, a chain's steps), a GPU's profile runs
// paged_qkv and paged_attend as one (AttendOwn: paged_attend_own), 5 and
// 7: as many as the decode step's blocks, and no more barriers than
// dispatches, since route_rows writes the routing trace itself (no copies
// to it). Outside the blocks: the embedding, the head's final norm and
// output matvec (one dispatch where the profile fuses norms: a GPU's), and
// the argmax (none where no row wants only its argmax: the logits are
// copied); and before them the rows wanting logits gathered, unless
// they are every row in order (all want logits, all or none only their
// argmax): 4 and 3 then, 5 and 4 with the gather. Each dispatch costs a
// GPU a launch and a barrier's drain (~5-10 us on the H200,
// docs/decode-attention-cost.md), so a block's count is its floor.
func TestStepDispatches(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../models/tinystories-mod.gguf")
	want := map[string][2][2]int{"own": {{8, 10}, {8, 10}}, "gpu": {{6, 8}, {5, 7}}} // [rows of one sequence, rows each its own][dense, routed]
	outside := map[string]int{"own": 4, "gpu": 3}                                    // every row's logits in order
	for _, pc := range deviceProfiles(dev) {
		run, err := New(dev, m, mod.RoutingRouter, Options{KVType: "f32", ContextLen: 64, DeviceProfile: pc.prof})
		require.NoError(t, err)
		st, err := run.Stepper(4)
		require.NoError(t, err)
		require.NoError(t, st.Reserve(32, 16))
		require.NoError(t, st.growTables(64))
		for _, n := range []int{1, 4} {
			for o, own := range []bool{false, true} {
				for _, kg := range [][2]int{{n, n}, {n, 0}, {1, 1}, {n, 1}} {
					k, g := kg[0], kg[1]
					f, err := st.frame(n, k, g, own)
					require.NoError(t, err)
					rec, err := run.recordFrame(f)
					require.NoError(t, err)
					rec.Close()
					dense, routed := f.blockStats[0].Dispatches, f.blockStats[1].Dispatches
					blocks := 0
					for _, b := range f.blockStats {
						blocks += b.Dispatches
					}
					t.Logf("%s, %d rows, %d with logits, %d argmax, own %v: %d dispatches, %d barriers (a dense block %d, a routed one %d); the runner's decode step: %+v",
						pc.name, n, k, g, own, rec.Stats().Dispatches, rec.Stats().Barriers, dense, routed, run.StepCounts())
					assert.Equal(t, want[pc.name][o], [2]int{dense, routed}, "%s, %d rows, own %v: a dense and a routed block's dispatches", pc.name, n, own)
					gathered := k != n || (g != 0 && g != k)
					wantOut := outside[pc.name]
					if gathered {
						wantOut++
					}
					if g == 0 { // no argmax: the logits copied to the host
						wantOut--
					}
					assert.Equal(t, wantOut, rec.Stats().Dispatches-blocks, "%s, %d rows, %d with logits, %d argmax: outside the blocks", pc.name, n, k, g)
					if pc.name == "gpu" && own && g == k && k == n {
						assert.LessOrEqual(t, rec.Stats().Barriers, rec.Stats().Dispatches, "at most a barrier a dispatch, as the decode step's: no trace copies")
					}
				}
			}
		}
		run.Close()
	}
}

// ownRows: a step's rows are each their sequence's only one unless two
// share a sequence, next to each other or not (paged_attend_own would
// then read an entry another row writes in the same dispatch).
func TestOwnRows(t *testing.T) {
	a, b, c := &sched.Seq{}, &sched.Seq{}, &sched.Seq{}
	assert.True(t, ownRows([]sched.Row{{Seq: a}}))
	assert.True(t, ownRows([]sched.Row{{Seq: a}, {Seq: b}, {Seq: c}}))
	assert.False(t, ownRows([]sched.Row{{Seq: a}, {Seq: a}, {Seq: b}}))
	assert.False(t, ownRows([]sched.Row{{Seq: a}, {Seq: b}, {Seq: a}}))
}
