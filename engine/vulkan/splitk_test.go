package vulkan

import (
	"fmt"
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPrefillSplitK: under the GPU profile a prefill chunk of a few rows
// cuts the matmuls whose grid is small along K (every split dispatch
// followed by splitk_reduce of the scratch into the matmul's output) and
// takes the narrow tiles staged along W's rows; under lavapipe's own
// profile nothing is split and the tiles are its own. The prefill tests
// (TestPrefillSplits, TestPrefillProfiles) check the results under both
// profiles; this test makes sure the split path is the one they ran, on
// the test models' small matrices (the FFN down's 172 columns), with
// MODRUN_VEC_ROWS=1 (a chunk of up to vecRows rows runs as matvecs by
// default: that the default does so is checked last).
func TestPrefillSplitK(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/dense-rand.gguf")
	for _, pc := range deviceProfiles(dev) {
		t.Run(pc.name, func(t *testing.T) {
			run, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: pc.prof, Knobs: Knobs{"MODRUN_VEC_ROWS": "1"}})
			require.NoError(t, err)
			t.Cleanup(run.Close)
			prof := run.ks.prof
			for _, n := range []int{2, 5, 17, 40} {
				f, err := run.forwardFrame(pass{n: n})
				require.NoError(t, err)
				var ops []op
				for l := range f.layers {
					o, err := run.blockOps(f, l, f.rows, routedBlock{})
					require.NoError(t, err)
					ops = append(ops, o...)
				}
				reduces, along := 0, 0
				for i, o := range ops {
					name := fmt.Sprintf("n=%d op %d (%s)", n, i, o.k.v.Name)
					if o.k.v.Name == shaders.MatmulReduceName {
						reduces++
						require.Positive(t, i, name)
						prev := ops[i-1]
						assert.Equal(t, prev.binds[2].Buf, o.binds[0].Buf, "%s: reads what the split matmul before it wrote", name)
						assert.Greater(t, prev.groups[2], uint32(1), "%s: the matmul before it is split", name)
					}
					if o.k.v.Source == "matmul.comp" && len(o.k.spec) > 6 && o.k.spec[6] == 1 {
						along++
					}
				}
				if prof.CPU {
					assert.Zero(t, reduces, "n=%d: lavapipe's profile never splits", n)
					assert.Zero(t, along, "n=%d: lavapipe's profile keeps its tiles", n)
					continue
				}
				assert.Positive(t, reduces, "n=%d: the GPU profile splits the FFN down (172 columns, one row tile)", n)
				if n <= 32 {
					assert.Positive(t, along, "n=%d: narrow tiles staged along W's rows", n)
				}
			}
			vec, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: pc.prof})
			require.NoError(t, err)
			t.Cleanup(vec.Close)
			for _, n := range []int{1, 5, vec.vecRows(), vec.vecRows() + 1} {
				f, err := vec.forwardFrame(pass{n: n})
				require.NoError(t, err)
				assert.Equal(t, n <= vec.vecRows(), f.vec, "n=%d: a chunk of up to %d rows as matvecs", n, vec.vecRows())
			}
		})
	}
}
