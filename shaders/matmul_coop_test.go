package shaders

import (
	"fmt"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// matmulCoopTolerance bounds matmul_coop against the CPU reference,
// relative to sum_j |W[r][j] * x[s][j]|: both operands are rounded to f16
// before the product (a relative error of at most 2^-11 each with
// round-to-nearest, 2^-10 with truncation, which Vulkan allows for a
// conversion without a rounding mode), so each product is off by at most
// about 2 * 2^-10 of its size, and the f32 sums add a few ulps. An
// indexing or edge error is off by the size of a whole term or more.
const matmulCoopTolerance = 2e-3

// matmulCoopSpecs are the presets and tiles that exercise the index
// arithmetic: a single subgroup, subgroups across tokens and across rows,
// a BK of one 16-step, and tiles of several 16x16s per subgroup.
var matmulCoopSpecs = []MatmulCoopSpec{
	MatmulCoopSpecGPU,
	MatmulCoopSpecFew,
	{BM: 16, BN: 16, BK: 16, WM: 16, WN: 16},
	{BM: 32, BN: 48, BK: 16, WM: 16, WN: 16},
	{BM: 32, BN: 32, BK: 48, WM: 32, WN: 16},
}

// matmulCoopGroupsOf is matmul_coop's dispatch size for spec, as runParts
// takes it.
func matmulCoopGroupsOf(spec MatmulCoopSpec) func(rows, n uint32) [3]uint32 {
	return func(rows, n uint32) [3]uint32 { return MatmulCoopGroups(rows, n, spec) }
}

// TestMatmulCoopEmulated runs matmul_coop with its tile product emulated
// (EMULATE_COOPMAT: the same staging, f16 rounding, tile indexing and
// edges as the tensor-core kernel) against the CPU reference, every weight
// type, rows, columns and token counts that are not multiples of the tiles.
func TestMatmulCoopEmulated(t *testing.T) {
	dev := openDevice(t)
	rowsList := []int{1, 13, 67, 130}
	nList := []int{1, 5, 33, 70}
	for _, typ := range matmulTypes {
		v, err := Lookup(MatmulCoopName(matvecTypeOf[typ], true))
		require.NoError(t, err)
		var stats errStats
		for si, spec := range matmulCoopSpecs {
			require.NoError(t, spec.Check())
			k := newKernel(t, dev, v, spec.Constants()...)
			for ci, cols := range testCols(typ) {
				for ri, rows := range testRows(typ, rowsList) {
					n := nList[(si+ci+ri)%len(nList)]
					name := fmt.Sprintf("%s/%+v/%dx%d/n%d", typ, spec, rows, cols, n)
					c := newMatmulCase(t, typ, rows, cols, n, int64(rows*1000+cols*10+n))
					got := c.runParts(t, dev, k, matmulCoopGroupsOf(spec), nil, false)
					stats.add(got, c.want, c.scale)
					if err := closeness(got, c.want, c.scale, matmulCoopTolerance); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			}
		}
		t.Logf("%s: %v (tolerance %g)", typ, stats, matmulCoopTolerance)
	}
}

// TestMatmulCoopParts is TestMatmulParts for matmul_coop (emulated): row
// ranges of one binding (WRow0) or of buffers of their own, each writing
// its columns of one y (LdY, YOff).
func TestMatmulCoopParts(t *testing.T) {
	dev := openDevice(t)
	spec := MatmulCoopSpec{BM: 16, BN: 32, BK: 16, WM: 16, WN: 16}
	for _, typ := range []gguf.TensorType{gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_K} {
		v, err := Lookup(MatmulCoopName(matvecTypeOf[typ], true))
		require.NoError(t, err)
		k := newKernel(t, dev, v, spec.Constants()...)
		c := newMatmulCase(t, typ, 77, testCols(typ)[1], 9, 7796)
		for _, pieces := range []bool{false, true} {
			got := c.runParts(t, dev, k, matmulCoopGroupsOf(spec), []int{5, 40, 41}, pieces)
			if err := closeness(got, c.want, c.scale, matmulCoopTolerance); err != nil {
				t.Errorf("%s pieces=%v: %v", typ, pieces, err)
			}
		}
	}
}

func TestMatmulCoopSpec(t *testing.T) {
	for _, s := range []MatmulCoopSpec{MatmulCoopSpecGPU, MatmulCoopSpecWide, MatmulCoopSpecFew} {
		require.NoError(t, s.Check())
		v, err := Lookup(MatmulCoopName(MatvecF16, false))
		require.NoError(t, err)
		nd, err := v.Needs(s.Constants())
		require.NoError(t, err)
		// NVIDIA's GPUs with cooperative matrices have 48 KiB or more.
		assert.LessOrEqual(t, nd.SharedBytes, uint32(48<<10), "%+v: shared memory", s)
		assert.Equal(t, s.Invocations(), nd.Invocations)
		assert.Contains(t, nd.Features, "cooperative_matrix_nv")
	}
	assert.Equal(t, []uint32{128, 64, 64, 32, 32, 32}, MatmulCoopSpecGPU.Constants())
	assert.Error(t, MatmulCoopSpec{BM: 32, BN: 32, BK: 8, WM: 16, WN: 16}.Check(), "BK not a multiple of 16")
	assert.Error(t, MatmulCoopSpec{BM: 48, BN: 32, BK: 16, WM: 32, WN: 16}.Check(), "WM does not divide BM")
	assert.Equal(t, [3]uint32{3, 2, 1}, MatmulCoopGroups(130, 33, MatmulCoopSpec{BM: 32, BN: 64}))

	// A device without the extension refuses the tensor-core kernel by
	// name, and runs the emulation.
	p := NewProfile(Device{CPU: true, SubgroupSize: 8, Float16: true})
	v, err := Lookup(MatmulCoopName(MatvecQ8_0, false))
	require.NoError(t, err)
	assert.ErrorContains(t, p.Allows(v, nil), "cooperative_matrix_nv")
	p.CooperativeMatrixNV = true
	p.SubgroupSize = 32
	assert.NoError(t, p.Allows(v, nil))
	emu, err := Lookup(MatmulCoopName(MatvecQ8_0, true))
	require.NoError(t, err)
	assert.NoError(t, NewProfile(Device{CPU: true}).Allows(emu, nil))
}

// The profile takes the tensor-core matmul on a GPU with the NV shape and
// subgroups of 32, not elsewhere, and its fallback is matmul.comp.
func TestMatmulCoopProfile(t *testing.T) {
	gpu := Device{SubgroupSize: 32, SubgroupArithmetic: true, Float16: true, CooperativeMatrixNV: true, TensorCores: true}
	p := NewProfile(gpu)
	require.True(t, p.MatmulCoop)
	name, spec := p.MatmulKernel(MatvecQ4_K)
	assert.Equal(t, "matmul_coop_q4_k", name)
	assert.Equal(t, MatmulCoopSpecGPU.Constants(), spec)
	assert.Equal(t, [3]uint32{3, 2, 1}, MatmulGroupsOf(130, 65, spec))
	v, err := Lookup(name)
	require.NoError(t, err)
	fb, safe, ok := p.Fallback(v)
	require.True(t, ok)
	assert.Equal(t, "matmul_q4_k", safe)
	assert.False(t, fb.MatmulCoop)
	name, spec = fb.MatmulKernel(MatvecQ4_K)
	assert.Equal(t, "matmul_q4_k", name)
	assert.Equal(t, MatmulSpecGPU.Constants(), spec)
	_, _, ok = fb.Fallback(v)
	assert.False(t, ok, "nothing further to fall back to")

	for _, d := range []Device{
		{SubgroupSize: 32, Float16: true, CooperativeMatrixNV: true},                               // not asked for (MODRUN_TENSOR_CORES)
		{SubgroupSize: 32, Float16: true, TensorCores: true},                                       // no extension
		{SubgroupSize: 64, Float16: true, CooperativeMatrixNV: true, TensorCores: true},            // a 64-wide subgroup
		{CPU: true, SubgroupSize: 32, Float16: true, CooperativeMatrixNV: true, TensorCores: true}, // a CPU device
	} {
		assert.False(t, NewProfile(d).MatmulCoop, "%+v", d)
	}
}
