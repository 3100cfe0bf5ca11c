package shaders

import (
	"fmt"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// splitKernel is one matmul configuration the split-K tests run: a variant
// of either matmul with its constants (BM at 1, BN at 2, BK at 3).
type splitKernel struct {
	name    string
	variant func(typ string) string
	spec    []uint32
	bound   func(cols int) float64 // tolerance relative to sum |W*x|
}

// splitKernels: matmul.comp with W staged by rows and along them (a
// 4-column step, so short columns still make several slices, and the GPU
// preset's 16), its prefetching variant along them, and matmul_coop's
// emulated product.
func splitKernels(typ gguf.TensorType) []splitKernel {
	tol := func(int) float64 { return matmulTolerance[typ] }
	small := MatmulSpec{BM: 16, BN: 24, BK: 4, TM: 2, TN: 3}
	along := small
	along.Along = true
	gpuAlong := MatmulSpecGPU
	gpuAlong.Along = true
	return []splitKernel{
		{"tiled-rows-16x24-k4", MatmulName, small.Constants(), tol},
		{"tiled-along-16x24-k4", MatmulName, along.Constants(), tol},
		{"tiled-along-gpu", MatmulName, gpuAlong.Constants(), tol},
		{"prefetch-along-16x24-k4", MatmulPrefetchName, along.Constants(), tol},
		{"coop-emu-16x32", func(t string) string { return MatmulCoopName(t, true) },
			MatmulCoopSpec{BM: 16, BN: 32, BK: 16, WM: 16, WN: 16}.Constants(), matmulCoopBound},
		// The hilo kernel (the engine's on tensor cores), split as the
		// engine splits it; its bound plus 2^-22 of the scale for the low
		// halves' subnormal rounding (at these normal-distributed values
		// far less: TestMatmulCoopHiloEmulated bounds that part exactly).
		{"coop-hilo-emu-16x32", func(t string) string { return MatmulCoopHiloName(t, true) },
			MatmulCoopSpec{BM: 16, BN: 32, BK: 16, WM: 16, WN: 16}.Constants(), func(cols int) float64 { return matmulCoopHiloBound(cols) + 1.0/(1<<22) }},
	}
}

// splitSlices are the K slices a test takes for cols columns in slices of
// whole granules (BK and the type's block): 0 (no split: y written
// directly), the whole of K as one slice (the split path's two passes with
// one slice), two and three about equal slices, and slices that leave a
// short last one.
func splitSlices(cols, granule int) []int {
	up := func(v int) int { return (v + granule - 1) / granule * granule }
	out := []int{0, up(cols)}
	seen := map[int]bool{0: true, up(cols): true}
	for _, s := range []int{up((cols + 1) / 2), up((cols + 2) / 3), up(cols * 2 / 3), granule} {
		if s > 0 && s < cols && !seen[s] && (cols+s-1)/s <= MatmulMaxSplits {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// runSplit computes the case with kernel k (constants spec) cut into K
// slices of kSplit columns (0: unsplit, straight into y) and summed by
// splitk_reduce (reduce), in parts of rows at cuts as runParts does (each
// part its own split dispatch and reduce into its columns of one y).
func (c *matmulCase) runSplit(t testing.TB, dev *vk.Device, k, reduce *vk.Kernel, spec []uint32, kSplit int, cuts []int) []float32 {
	t.Helper()
	groups := func(rows, n uint32) [3]uint32 { return MatmulGroupsOf(rows, n, spec) }
	if kSplit == 0 {
		return c.runParts(t, dev, k, groups, cuts, false)
	}
	return c.runPartsSplit(t, dev, k, groups, cuts, false, &matmulSplitK{reduce: reduce, spec: spec, kSplit: kSplit})
}

// TestMatmulSplit runs the split-K matmuls (MatmulPush.KSplit, then
// splitk_reduce) against the CPU reference: every weight type, W staged
// by rows and along them, the tensor-core kernel's emulated product, token
// counts 1, 5, 16, 17 and 33, rows and columns that are not multiples of
// the tiles, and 1, 2, 3 slices and slices that leave a short last one.
// Every slice count is checked to occur, so the table cannot thin out to
// unsplit cases unseen.
func TestMatmulSplit(t *testing.T) {
	dev := openDevice(t)
	rv, err := Lookup(MatmulReduceName)
	require.NoError(t, err)
	reduce := newKernel(t, dev, rv)
	nList := []int{1, 5, 16, 17, 33}
	rowsList := []int{13, 67}
	seen := map[string]bool{}
	for _, typ := range matmulTypes {
		var stats errStats
		for ki, sk := range splitKernels(typ) {
			v, err := Lookup(sk.variant(matvecTypeOf[typ]))
			require.NoError(t, err)
			k := newKernel(t, dev, v, sk.spec...)
			granule := int(lcm32(sk.spec[3], uint32(typ.BlockSize())))
			for ci, cols := range testCols(typ) {
				for si, kSplit := range splitSlices(cols, granule) {
					i := ki + ci + si
					n, rows := nList[i%len(nList)], testRows(typ, rowsList)[i%2%len(testRows(typ, rowsList))]
					splits := 0
					if kSplit > 0 {
						splits = (cols + kSplit - 1) / kSplit
						switch {
						case cols%kSplit != 0:
							seen["short last"] = true
						default:
							seen[fmt.Sprint(splits)] = true
						}
					}
					name := fmt.Sprintf("%s/%s/%dx%d/n%d/slice%d(%d)", typ, sk.name, rows, cols, n, kSplit, splits)
					c := newMatmulCase(t, typ, rows, cols, n, int64(rows*1000+cols*10+n))
					got := c.runSplit(t, dev, k, reduce, sk.spec, kSplit, nil)
					stats.add(got, c.want, c.scale)
					if err := closeness(got, c.want, c.scale, sk.bound(cols)); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			}
		}
		t.Logf("%s: %v (all kernels: the emulated tensor-core product's f16 operands set the max)", typ, stats)
	}
	for _, want := range []string{"1", "2", "3", "short last"} {
		assert.True(t, seen[want], "no case of %s slice(s)", want)
	}
}

// TestMatmulSplitParts: split dispatches of row ranges of one binding,
// each reduced into its columns of one y (LdY, YOff), equal the whole.
func TestMatmulSplitParts(t *testing.T) {
	dev := openDevice(t)
	rv, err := Lookup(MatmulReduceName)
	require.NoError(t, err)
	reduce := newKernel(t, dev, rv)
	for _, typ := range []gguf.TensorType{gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_K} {
		for _, sk := range splitKernels(typ) {
			v, err := Lookup(sk.variant(matvecTypeOf[typ]))
			require.NoError(t, err)
			k := newKernel(t, dev, v, sk.spec...)
			cols := testCols(typ)[1]
			granule := int(lcm32(sk.spec[3], uint32(typ.BlockSize())))
			kSplit := (cols/2 + granule - 1) / granule * granule
			c := newMatmulCase(t, typ, 77, cols, 9, 7796)
			got := c.runSplit(t, dev, k, reduce, sk.spec, kSplit, []int{5, 40, 41})
			if err := closeness(got, c.want, c.scale, sk.bound(cols)); err != nil {
				t.Errorf("%s/%s slice %d of %d: %v", typ, sk.name, kSplit, cols, err)
			}
		}
	}
}

// TestMatmulSplitPlan: the GPU profile splits a few tokens' grid into
// slices of whole steps and blocks, and leaves a full grid alone; the CPU
// device's profile (lavapipe) never splits.
func TestMatmulSplitPlan(t *testing.T) {
	gpu := GPUProfile(Device{CPU: true, SubgroupSize: 8, SubgroupArithmetic: true})
	cpu := NewProfile(Device{CPU: true, SubgroupSize: 8, SubgroupArithmetic: true})
	require.Equal(t, uint32(MatmulSplitTarget), gpu.MatmulSplitTarget)
	require.Zero(t, cpu.MatmulSplitTarget)
	spec := MatmulSpecGPU.Constants()
	coop := MatmulCoopSpecGPU.Constants()
	for _, tc := range []struct {
		rows, cols, n, block uint32
		spec                 []uint32
		splits               uint32
	}{
		{11008, 4096, 5, 32, spec, 6},   // 172 row tiles: 6 slices of 704, 1032 workgroups
		{11008, 4096, 16, 32, spec, 6},  // one token tile still
		{11008, 4096, 65, 32, spec, 3},  // two token tiles: 344 workgroups, 3 slices
		{11008, 4096, 512, 32, spec, 1}, // 1376 workgroups: no split
		{4096, 11008, 5, 256, spec, 8},  // 64 row tiles: 8 slices (the most) of 1536
		{2048, 2048, 5, 32, spec, 8},    // 32 row tiles: 8 slices of 256
		{2048, 256, 5, 32, spec, 4},     // slices of 4 steps at least
		{2048, 64, 5, 32, spec, 1},      // one slice's worth of columns
		{64, 172, 5, 1, spec, 3},        // a tiny model's FFN down (F32): 64, 64, 44
		{11008, 4096, 5, 32, coop, 6},
		{32000, 4096, 5, 32, spec, 3}, // an output head: 500 row tiles
	} {
		splits, slice := gpu.MatmulSplit(tc.rows, tc.cols, tc.n, tc.spec, tc.block)
		name := fmt.Sprintf("%dx%d n%d block %d spec %v", tc.rows, tc.cols, tc.n, tc.block, tc.spec)
		assert.Equal(t, tc.splits, splits, name)
		if splits > 1 {
			assert.Zero(t, slice%tc.spec[3], "%s: slice %d of whole steps", name, slice)
			assert.Zero(t, slice%tc.block, "%s: slice %d of whole blocks", name, slice)
			assert.Less(t, (splits-1)*slice, tc.cols, "%s: every slice has columns", name)
			assert.GreaterOrEqual(t, splits*slice, tc.cols, "%s: the slices cover K", name)
			grid := MatmulSplitGroups(tc.rows, tc.n, tc.spec, splits)
			assert.LessOrEqual(t, uint64(4*splits*tc.n*tc.rows), gpu.MatmulSplitScratch(tc.spec[1], tc.spec[2]), "%s: the scratch bound holds", name)
			assert.Equal(t, splits, grid[2], name)
		} else {
			assert.Equal(t, tc.cols, slice, name)
		}
		cs, cl := cpu.MatmulSplit(tc.rows, tc.cols, tc.n, tc.spec, tc.block)
		assert.Equal(t, [2]uint32{1, tc.cols}, [2]uint32{cs, cl}, "%s: lavapipe's profile never splits", name)
	}
}
