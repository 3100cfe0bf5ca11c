package shaders

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// matmulCoopBound bounds matmul_coop's emulated product against the CPU
// reference (mod.MatMul, f32) over cols columns, relative to
// sum_j |W[r][j] * x[s][j]| (closeness's scale), derived, not measured:
//   - each operand is rounded to the nearest half (toHalf, which TestToHalf
//     checks value for value): a = A(1+d1), b = B(1+d2), |d1|, |d2| <= u =
//     2^-11, so |ab - AB| <= (2u + u²)|AB|. A sub-block type's weight may
//     be an f32 ulp (2^-24) off the reference's before that (a GPU
//     compiler may fuse its multiply and subtraction: matmulTolerance):
//     (1 + 2^-24)(1 + u)² - 1 in all;
//   - the product of two halves (11 significant bits each) is exact in
//     f32, and the kernel's sum of cols of them (in its tile order) is off
//     by at most gamma_cols = cols·2^-24 / (1 - cols·2^-24) of their
//     absolute sum, which is at most (1 + that first error) of the scale;
//   - the reference's own f32 dot product (in its order, per-block sums
//     scaled for Q8_0 and Q4_0: at most two more roundings on a path) is
//     off by at most gamma_(cols+2) of the scale.
//
// An indexing or edge error is off by a whole term or more. The tensor
// cores' own conversion (float16_t(x)) may round otherwise (Vulkan leaves
// it to the driver): that, and coopMatMulAddNV, is the device's
// self-check's to judge, not this emulation's.
func matmulCoopBound(cols int) float64 {
	gamma := func(n int) float64 { return float64(n) * ulp32 / (1 - float64(n)*ulp32) }
	operands := coopOperands(1.0 / 2048)
	return operands + gamma(cols)*(1+operands) + gamma(cols+2)
}

// ulp32 is float32's unit roundoff, 2^-24.
const ulp32 = 1.0 / (1 << 24)

// coopOperands is the operands' share of matmulCoopBound when each is
// rounded to within u of itself (2^-11 to nearest; 2^-10 toward zero,
// which Vulkan allows the tensor cores' float16_t(x)), a weight an f32 ulp
// off the reference's before that.
func coopOperands(u float64) float64 { return (1+ulp32)*(1+u)*(1+u) - 1 }

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
					if err := closeness(got, c.want, c.scale, matmulCoopBound(cols)); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			}
		}
		t.Logf("%s: %v (bound %.4g at %d columns)", typ, stats, matmulCoopBound(slices.Max(testCols(typ))), slices.Max(testCols(typ)))
	}
}

// matmulCoopHiloBound bounds matmul_coop_hilo's emulated product against
// the CPU reference over cols columns, relative to sum_j |W[r][j] * x[s][j]|
// (closeness's scale), derived as matmulCoopBound; hiloAbs adds the part
// that is absolute:
//   - each operand v is staged as hi = v rounded to a half (exact) and lo,
//     v - hi (exact in f32, within u = 2^-11 of v) rounded to a half: hi +
//     lo is within u² of v, or 2^-25 where lo is a subnormal half (steps of
//     2^-24); a sub-block weight may be an f32 ulp off the reference's first;
//   - a term is hi_a·hi_b + hi_a·lo_b + lo_a·hi_b: the left-out lo_a·lo_b is
//     within u²(1+u)² of |ab|, so the term is within about 3u²(1+u)² of
//     |ab| (times the weight's ulp) and 2^-25·(|a|+|b|) (hiloAbs);
//   - the three products are exact in f32 (11 significant bits each), and
//     the kernel's sums (two a term, cols terms) are off by at most
//     gamma_(3·cols) of the products' absolute sum, at most (1 + 3u) of the
//     scale; the reference's own sum by gamma_(cols+2) of the scale.
func matmulCoopHiloBound(cols int) float64 {
	return matmulCoopHiloBoundSplit(cols, 1.0/2048)
}

// matmulCoopHiloBoundSplit is matmulCoopHiloBound with lo within uh of v
// (2^-11 where hi is v rounded, 2^-10 where it is truncated: COOP_PACKED's
// mask), lo itself rounded to within u = 2^-11: hi + lo within uh·u of v,
// the left-out lo_a·lo_b within uh² of |ab|, so a term within
// (2·uh·u + uh²)(1+uh)² of |ab| (3u²(1+u)² where uh = u).
func matmulCoopHiloBoundSplit(cols int, uh float64) float64 {
	gamma := func(n int) float64 { return float64(n) * ulp32 / (1 - float64(n)*ulp32) }
	const u = 1.0 / 2048
	operands := (1+ulp32)*(1+(2*uh*u+uh*uh)*(1+uh)*(1+uh)) - 1
	return operands + gamma(3*cols)*(1+3*u) + gamma(cols+2)
}

// hiloAbs is the absolute part of matmul_coop_hilo's bound for output (s,
// r) of c: 2^-25·(1 + 2^-10) per |a| + |b| of its terms, the low halves'
// subnormal rounding (matmulCoopHiloBound).
func (c *matmulCase) hiloAbs(t testing.TB) []float64 {
	wf := make([]float32, c.rows*c.cols)
	require.NoError(t, gguf.Dequantize(c.typ, c.w, wf))
	rowAbs := make([]float64, c.rows)
	for r := range rowAbs {
		for _, v := range wf[r*c.cols : (r+1)*c.cols] {
			rowAbs[r] += math.Abs(float64(v))
		}
	}
	out := make([]float64, c.n*c.rows)
	for s := 0; s < c.n; s++ {
		var xAbs float64
		for _, v := range c.x[s*c.cols : (s+1)*c.cols] {
			xAbs += math.Abs(float64(v))
		}
		for r := range rowAbs {
			out[s*c.rows+r] = (1.0 / (1 << 25)) * (1 + 1.0/1024) * (xAbs + rowAbs[r])
		}
	}
	return out
}

// hiloClose is closeness for matmul_coop_hilo: within rel of the scale plus
// the absolute part, for every output; "" when so.
func hiloClose(got []float32, want, scale, abs []float64, rel float64) error {
	for i := range got {
		d := math.Abs(float64(got[i]) - want[i])
		if math.IsNaN(d) || d > rel*scale[i]+abs[i] {
			return fmt.Errorf("output %d: %g, want %g (off %.3g; bound %.3g)", i, got[i], want[i], d, rel*scale[i]+abs[i])
		}
	}
	return nil
}

// TestMatmulCoopHiloEmulated is TestMatmulCoopEmulated for the hilo
// kernel, the engine's tensor-core matmul: f32's precision (the derived
// bound, some 3000x tighter than the f16 kernel's), every weight type,
// ragged shapes, at the GPU and few-row tiles and the index-exercising ones;
// and for the packed types the packed kernel and the one that reads X split
// by split_halves (COOP_XSPLIT).
func TestMatmulCoopHiloEmulated(t *testing.T) {
	dev := openDevice(t)
	rowsList := []int{1, 13, 67, 130}
	nList := []int{1, 5, 33, 70}
	type kernel struct {
		name   string
		uh     float64 // lo within uh of v: hi rounded (toHalf) or truncated (COOP_PACKED's mask)
		xsplit bool    // x split into halves first (split_halves; COOP_XSPLIT)
	}
	xprep := newKernel(t, dev, lookup(t, SplitHalvesName))
	for _, typ := range matmulTypes {
		kernels := []kernel{{MatmulCoopHiloName(matvecTypeOf[typ], true), 1.0 / 2048, false}}
		if slices.Contains(MatmulCoopPackedTypes, matvecTypeOf[typ]) {
			// X split to nearest in the xsplit kernel: within the
			// truncated split's bound.
			kernels = append(kernels, kernel{MatmulCoopPackedName(matvecTypeOf[typ], true, true), 1.0 / 1024, false},
				kernel{MatmulCoopXSplitName(matvecTypeOf[typ], true), 1.0 / 1024, true})
		}
		for _, kk := range kernels {
			v, err := Lookup(kk.name)
			require.NoError(t, err)
			var stats errStats
			for si, spec := range matmulCoopSpecs {
				k := newKernel(t, dev, v, spec.Constants()...)
				for ci, cols := range testCols(typ) {
					for ri, rows := range testRows(typ, rowsList) {
						n := nList[(si+ci+ri)%len(nList)]
						c := newMatmulCase(t, typ, rows, cols, n, int64(rows*1000+cols*10+n))
						if kk.xsplit {
							c.xprep = xprep
						}
						got := c.runParts(t, dev, k, matmulCoopGroupsOf(spec), nil, false)
						stats.add(got, c.want, c.scale)
						if err := hiloClose(got, c.want, c.scale, c.hiloAbs(t), matmulCoopHiloBoundSplit(cols, kk.uh)); err != nil {
							t.Errorf("%s/%s/%+v/%dx%d/n%d: %v", kk.name, typ, spec, rows, cols, n, err)
						}
					}
				}
			}
			t.Logf("%s: %v (bound %.4g at %d columns)", kk.name, stats, matmulCoopHiloBoundSplit(slices.Max(testCols(typ)), kk.uh), slices.Max(testCols(typ)))
		}
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
			if err := closeness(got, c.want, c.scale, matmulCoopBound(c.cols)); err != nil {
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
	assert.Equal(t, "matmul_coop_hilo_q4_k", name, "f32's precision by default")
	assert.Equal(t, MatmulCoopSpecGPU.Constants(), spec)
	assert.Equal(t, [3]uint32{3, 2, 1}, MatmulGroupsOf(130, 65, spec))
	v, err := Lookup(name)
	require.NoError(t, err)
	assert.False(t, assertSafeMatmul(t, p, v, MatvecQ4_K).MatmulCoop)

	half := gpu
	half.TensorCoresHalf = true
	name, _ = NewProfile(half).MatmulKernel(MatvecQ4_K)
	assert.Equal(t, "matmul_coop_q4_k", name, "MODRUN_TENSOR_CORES=f16")
	assert.Contains(t, NewProfile(half).String(), "/matmul-coop-f16")

	for _, d := range []Device{
		{SubgroupSize: 32, Float16: true, CooperativeMatrixNV: true},                               // turned off (MODRUN_TENSOR_CORES=0)
		{SubgroupSize: 32, Float16: true, TensorCores: true},                                       // no extension
		{SubgroupSize: 64, Float16: true, CooperativeMatrixNV: true, TensorCores: true},            // a 64-wide subgroup
		{CPU: true, SubgroupSize: 32, Float16: true, CooperativeMatrixNV: true, TensorCores: true}, // a CPU device
	} {
		assert.False(t, NewProfile(d).MatmulCoop, "%+v", d)
	}
}

// VK_KHR_cooperative_matrix's kernels: taken where a device has the KHR
// extension and not NV's, or where the user asked for them
// (MODRUN_COOPMAT=khr); on a device whose subgroups are another size
// their pipelines require 32 where they may (AMD RDNA's 64); the direct
// matmul and the tensor-core attention stay NV's; the fallback is
// matmul.comp's, as NV's.
func TestMatmulCoopKHRProfile(t *testing.T) {
	both := Device{SubgroupSize: 32, RequireSubgroupSize: true, SubgroupArithmetic: true, Float16: true,
		CooperativeMatrixNV: true, CooperativeMatrixKHR: true, TensorCores: true, MatmulDirect: true, AttentionCoop: true}
	p := NewProfile(both)
	require.True(t, p.MatmulCoop)
	assert.False(t, p.MatmulCoopKHR, "NV's where the device has both")
	name, _ := p.MatmulKernel(MatvecQ8_0)
	assert.Equal(t, "matmul_coop_hilo_q8_0", name)
	probe, _ := p.CoopProbe()
	assert.Equal(t, ProbeCoop, probe)
	assert.True(t, p.MatmulDirect && p.AttentionCoop)

	asked := both
	asked.CoopMatKHR = true
	p = NewProfile(asked)
	require.True(t, p.MatmulCoop && p.MatmulCoopKHR)
	name, spec := p.MatmulKernel(MatvecQ8_0)
	assert.Equal(t, MatmulCoopKHRName(MatvecQ8_0, true), name)
	assert.Equal(t, "matmul_coop_hilo_khr_q8_0", name)
	assert.Equal(t, MatmulCoopSpecGPU.Constants(), spec)
	assert.Contains(t, p.String(), "/matmul-coop-khr")
	assert.False(t, p.MatmulDirect || p.AttentionCoop, "NV's kernels only")
	probe, _ = p.CoopProbe()
	assert.Equal(t, ProbeCoopKHR, probe)
	v, err := Lookup(name)
	require.NoError(t, err)
	assert.NoError(t, p.Allows(v, nil))
	assert.Equal(t, uint32(32), p.RequiredSubgroupSize(v))
	assert.False(t, assertSafeMatmul(t, p, v, MatvecQ8_0).MatmulCoop)
	half := asked
	half.TensorCoresHalf = true
	name, _ = NewProfile(half).MatmulKernel(MatvecQ4_K)
	assert.Equal(t, "matmul_coop_khr_q4_k", name, "MODRUN_TENSOR_CORES=f16")
	emu := NewProfile(asked)
	emu.MatmulCoopEmulate = true
	name, _ = emu.MatmulKernel(MatvecQ4_K)
	assert.Equal(t, MatmulCoopHiloName(MatvecQ4_K, true), name, "the emulation is both extensions' tiling")

	// An RDNA-like device: the KHR extension only, subgroups of 64 required
	// for the other kernels, 32 allowed.
	amd := Device{SubgroupSize: 64, RequireSubgroupSize: true, Subgroup32: true, SubgroupArithmetic: true, Float16: true,
		CooperativeMatrixKHR: true, TensorCores: true, MatmulDirect: true}
	p = NewProfile(amd)
	require.True(t, p.MatmulCoop && p.MatmulCoopKHR)
	assert.False(t, p.MatmulDirect)
	name, _ = p.MatmulKernel(MatvecQ4_K)
	v, err = Lookup(name)
	require.NoError(t, err)
	assert.NoError(t, p.Allows(v, nil))
	assert.Equal(t, uint32(32), p.RequiredSubgroupSize(v), "the KHR kernels ask for 32")
	other, err := Lookup(MatvecFusedName(MatvecQ8_0, ReduceSubgroup, FuseNone))
	require.NoError(t, err)
	assert.Equal(t, uint32(64), p.RequiredSubgroupSize(other), "the others keep the device's 64")
	nv, err := Lookup(MatmulCoopHiloName(MatvecQ4_K, false))
	require.NoError(t, err)
	assert.ErrorContains(t, p.Allows(nv, nil), "cooperative_matrix_nv")
	probe, _ = p.CoopProbe()
	assert.Equal(t, ProbeCoopKHR, probe)

	for _, d := range []Device{
		{SubgroupSize: 64, RequireSubgroupSize: true, Float16: true, CooperativeMatrixKHR: true, TensorCores: true}, // 32 not allowed
		{SubgroupSize: 64, Subgroup32: true, Float16: true, CooperativeMatrixNV: true, TensorCores: true},           // NV's need 32 as the device's size
		{SubgroupSize: 32, Float16: true, CooperativeMatrixKHR: true},                                               // MODRUN_TENSOR_CORES=0
		{CPU: true, SubgroupSize: 32, Float16: true, CooperativeMatrixKHR: true, TensorCores: true},                 // a CPU device
	} {
		assert.False(t, NewProfile(d).MatmulCoop, "%+v", d)
	}
	_, none := NewProfile(Device{SubgroupSize: 64, Float16: true, CooperativeMatrixKHR: true}).CoopProbe()
	assert.Contains(t, none, "subgroups of 64")
	_, none = NewProfile(Device{SubgroupSize: 32}).CoopProbe()
	assert.Contains(t, none, "no VK_NV_cooperative_matrix nor VK_KHR_cooperative_matrix")
}
