package shaders

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/vk"
)

// lanesDevice skips t unless dev runs matvec_lanes.comp: subgroups of 8
// lanes with broadcasts and sums.
func lanesDevice(t *testing.T, dev *vk.Device) {
	d := deviceOf(dev)
	if d.SubgroupSize != 8 || !dev.Info().Features.SubgroupBallot || !d.SubgroupArithmetic {
		t.Skipf("matvec_lanes needs subgroups of 8 with ballot and arithmetic; the device has size %d", d.SubgroupSize)
	}
}

// TestProfileChoosesLanes: a CPU device with sure subgroups of 8 that
// broadcast and sum runs Q8_0's matvecs (every fusion but the add)
// as matvec_lanes; without the ballot, at another subgroup size, or on a
// GPU it does not, and no other type takes it.
func TestProfileChoosesLanes(t *testing.T) {
	for _, fuse := range MatvecFusions {
		name, spec := NewProfile(lavapipeLike).Matvec(MatvecQ8_0, fuse, 8, 288)
		if fuse == FuseAdd { // rowsPass: the lanes add was slow in a step of 8
			assert.Equal(t, MatvecFusedName(MatvecQ8_0, ReduceShared, fuse), name)
			continue
		}
		assert.Equal(t, MatvecFusedName(MatvecQ8_0, ReduceLanes, fuse), name)
		assert.Equal(t, uint32(8), spec[0], "one subgroup a workgroup")
		name, _ = NewProfile(lavapipeLike).Matvec(MatvecQ4_K, fuse, 8, 256)
		assert.NotContains(t, name, ReduceLanes)
	}
	noBallot, wide := lavapipeLike, lavapipeLike
	noBallot.SubgroupBallot, wide.SubgroupSize = false, 16
	gpu := lavapipeLike
	gpu.CPU = false
	for _, d := range []Device{noBallot, wide, gpu} {
		name, _ := NewProfile(d).Matvec(MatvecQ8_0, FuseNone, 8, 288)
		assert.NotContains(t, name, ReduceLanes, "%+v", d)
	}
}

// lanesSpecs are the specs TestMatvecLanes runs: the profile's, and rows an
// invocation and vectors a pass that fill neither the rows nor the
// vectors (5 rows, 3 vectors), or take a single one.
var lanesSpecs = [][]uint32{MatvecLanesSpecCPU, {8, 1, 8, 8}, {8, 1, 3, 5}, {8, 1, 1, 1}, {8, 1, 8, 16}}

// TestMatvecLanes checks matvec_lanes.comp (Q8_0, every fusion) against the
// reference over ragged rows, several block counts, and vector counts that
// take one pass, several, and a partial one.
func TestMatvecLanes(t *testing.T) {
	dev := openDevice(t)
	lanesDevice(t, dev)
	const typ, eps = gguf.TypeQ8_0, 1e-5
	for _, fuse := range MatvecFusions {
		v, err := Lookup(MatvecFusedName(MatvecQ8_0, ReduceLanes, fuse))
		require.NoError(t, err)
		for _, spec := range lanesSpecs {
			k := newKernel(t, dev, v, spec...)
			for _, rows := range []int{1, 7, 67, 172, 513} {
				for _, cols := range testCols(typ) {
					for _, n := range []int{1, 3, 8, 11} {
						name := fmt.Sprintf("%s%v/%dx%d/n%d", v.Name, spec, rows, cols, n)
						wRows := rows
						if fuse == FuseNormSwiGLU {
							wRows = 2 * rows
						}
						c, err := newMatvecCase(typ, wRows, cols, n, int64(rows*1000+cols*10+n))
						require.NoError(t, err, name)
						var got []float32
						want, scale := c.want, c.scale
						if fuse == FuseNone {
							got = c.run(t, dev, k)
						} else {
							got, want, scale = runFused(t, dev, k, c, fuse, rows, eps)
						}
						if err := closeness(got, want, scale, matvecTolerance[typ]); err != nil {
							t.Errorf("%s: %v", name, err)
						}
					}
				}
			}
		}
	}
}

// TestMatvecLanesVectorsApart: a vector's sums do not depend on how many
// vectors share its pass (NB), bit for bit, so that a sequence's logits in
// the Vulkan step runner's steps of 8 rows are those of its steps alone
// and of the single-sequence decode step (NB 1).
func TestMatvecLanesVectorsApart(t *testing.T) {
	dev := openDevice(t)
	lanesDevice(t, dev)
	const typ, rows, cols, n, eps = gguf.TypeQ8_0, 67, 160, 8, 1e-5
	for _, fuse := range MatvecFusions {
		v, err := Lookup(MatvecFusedName(MatvecQ8_0, ReduceLanes, fuse))
		require.NoError(t, err)
		wRows := rows
		if fuse == FuseNormSwiGLU {
			wRows = 2 * rows
		}
		c, err := newMatvecCase(typ, wRows, cols, n, 7)
		require.NoError(t, err)
		var first []float32
		for _, nb := range []uint32{1, 3, 8} {
			spec := append([]uint32(nil), MatvecLanesSpecCPU...)
			spec[2] = nb
			k := newKernel(t, dev, v, spec...)
			var got []float32
			if fuse == FuseNone {
				got = c.run(t, dev, k)
			} else {
				got, _, _ = runFused(t, dev, k, c, fuse, rows, eps)
			}
			if first == nil {
				first = got
				continue
			}
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(first[i]) {
					t.Fatalf("%s NB %d: y[%d] = %v, NB 1 gave %v", v.Name, nb, i, got[i], first[i])
				}
			}
		}
	}
}
