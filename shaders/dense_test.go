package shaders

// Tests of the dense ops (dense.go) against the CPU reference, package mod,
// on ragged shapes: the harness (denseRun) and the row kernels (rmsnorm,
// nll, argmax). The elementwise ops are in dense_ops_test.go, the embedding
// lookup in embed_test.go, the benchmarks in dense_bench_test.go.

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tolerances, each relative to the scale its run states. The references are
// mod's float32 functions; the kernels differ from them only in summation
// order and in the float32 transcendental functions that replace mod's
// float64 ones (Vulkan bounds exp by 3 + 2|x| ulp, sin and cos by 2^-11 on
// [-pi, pi]; lavapipe does far better). "lavapipe:" is the largest error
// measured there over the test's cases (go test -v logs it): the margin is
// for other devices' exp, sin and cos.
const (
	// rmsnorm, relative to |want|: the GPU sums the squares in another order
	// (strided partial sums, then a tree) and takes 1/sqrt in float32 where
	// mod goes through float64, so the row's factor differs by a few ulps.
	rmsnormTol = 1e-5 // lavapipe: 7.5e-7
	// nll, relative to |log sum| + |max| + |x[target]|: exp in float32 at
	// arguments down to -70, summed in another order and in float32 where
	// the reference sums in float64, then log in float32.
	nllTol = 1e-5
	// rope, relative to the norm of each rotated pair: the kernel's angle is
	// exact mod 1 turn until its conversion to float32 (< 2e-7 rad, at any
	// position, see rope.comp), then float32 cos and sin, two products and a
	// sum. Computing pos * freq in float32 instead fails this from
	// positions near 10^4 (2e-5 there, measured; 2e-3 near 10^6).
	ropeTol = 2e-6 // lavapipe: 3.3e-7
	// swiglu, relative to |want|: float32 exp at |gate| up to ~20.
	swigluTol = 5e-6 // lavapipe: 8.8e-7
	// mod_residual, relative to |x| + |g (o - x)|: identity is the same three
	// float32 operations as mod (the margin allows a fused multiply-add);
	// sigmoid adds a float32 exp.
	modResidualTol = 2e-6 // lavapipe: 2.6e-7
	// embed and argmax are exact: decoding F16 and Q8_0 is d * q in float32
	// on both sides, and an index is an index.
)

// denseRowSpecs are the row kernels' specializations under test for rows
// of cols: both defaults, an invocation per row (no barrier), a number of
// invocations per row that is not a power of two, a workgroup of one, and
// lavapipe's (Profile.Row).
// Those whose invocations would loop more than lavapipe allows are left out:
// no device is given them (Profile.Row exists to avoid them).
func denseRowSpecs(name string, cols int) [][]uint32 {
	var specs [][]uint32
	for _, s := range [][]uint32{RowSpecGPU, RowSpecCPU, {64, 1}, {96, 3}, {1, 1}, lavapipeProfile.Row(name, uint32(cols))} {
		if RowLoopIterations(name, uint32(cols), s) <= LavapipeLoopIterations {
			specs = append(specs, s)
		}
	}
	return specs
}

// denseKernels makes v's kernel once for each specialization asked.
type denseKernels struct {
	dev *vk.Device
	v   Variant
	k   map[string]*vk.Kernel
}

func (d *denseKernels) get(t testing.TB, spec []uint32) *vk.Kernel {
	key := fmt.Sprint(spec)
	if d.k == nil {
		d.k = map[string]*vk.Kernel{}
	}
	if d.k[key] == nil {
		d.k[key] = newKernel(t, d.dev, d.v, spec...)
	}
	return d.k[key]
}

// TestRowOnLavapipe: a row kernel's spec on a CPU device (Profile.Row) is
// RowSpecCPU while its loops stay under the device's cap, and the fewest
// invocations per row that do beyond.
func TestRowOnLavapipe(t *testing.T) {
	assert.Equal(t, RowSpecCPU, lavapipeProfile.Row("nll", 32000))
	assert.Greater(t, RowLoopIterations("nll", 40000, []uint32{64, 1}), uint32(LavapipeLoopIterations), "an invocation alone on 40000: 80000 iterations")
	assert.Equal(t, []uint32{16, 16}, lavapipeProfile.Row("nll", 300000))
	for _, name := range []string{"rmsnorm", "nll", "argmax"} {
		for _, cols := range []uint32{1, 21000, 32000, 65535, 200000, 1 << 20} {
			assert.LessOrEqual(t, RowLoopIterations(name, cols, lavapipeProfile.Row(name, cols)), uint32(LavapipeLoopIterations), "%s cols %d", name, cols)
		}
	}
}

// denseRun is one dispatch of a dense kernel on uploaded inputs, with what
// its output should be.
type denseRun struct {
	k      *vk.Kernel
	push   any
	groups [3]uint32
	binds  []vk.Bind
	bytes  int // the least the op must read and write: for GB/s
	tol    float64
	// result downloads the output and gives the reference and scale.
	result func() (got []float32, want, scale []float64)
	exact  func() error // further checks, when some outputs must be untouched
}

func (r *denseRun) record(rec *vk.Recorder) {
	push, ok := r.push.([]byte) // packed already (withHandoff)
	if !ok {
		push = vk.MustPackPush(r.push)
	}
	rec.Dispatch(r.k, push, r.groups, r.binds...)
}

// run dispatches r once and compares its output with the reference,
// recording the errors in w.
func (r *denseRun) run(t testing.TB, dev *vk.Device, w *denseWorst) error {
	t.Helper()
	rec := dev.NewRecorder()
	defer rec.Close()
	r.record(rec)
	require.NoError(t, dev.Run(rec))
	got, want, scale := r.result()
	w.see(got, want, scale)
	if err := closeness(got, want, scale, r.tol); err != nil {
		return err
	}
	if r.exact != nil {
		return r.exact()
	}
	return nil
}

// denseWorst is the largest error a test saw over its cases, logged (go test -v)
// to show how far each kernel is from its tolerance.
type denseWorst struct{ abs, ofScale float64 }

func (w *denseWorst) see(got []float32, want, scale []float64) {
	for i := range got {
		d := math.Abs(float64(got[i]) - want[i])
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		w.abs = max(w.abs, d)
		if scale[i] > 0 {
			w.ofScale = max(w.ofScale, d/scale[i])
		}
	}
}

func (w *denseWorst) log(t *testing.T, tol float64) {
	t.Logf("max abs err %.3g; max err/scale %.3g (tolerance %g)", w.abs, w.ofScale, tol)
}

// denseNaNBuffer is an output of n floats, NaN before the kernel runs, so an
// element it skips shows.
func denseNaNBuffer(t testing.TB, dev *vk.Device, n int) *vk.Buffer {
	t.Helper()
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(math.NaN())
	}
	return newBuffer(t, dev, f32bytes(x))
}

func denseNormals(rng *rand.Rand, n int, sigma float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(sigma * rng.NormFloat64())
	}
	return x
}

// relative is want in float64, and |want| as its scale.
func denseRelative(want []float32) (w, scale []float64) {
	w, scale = make([]float64, len(want)), make([]float64, len(want))
	for i, v := range want {
		w[i], scale[i] = float64(v), math.Abs(float64(v))
	}
	return w, scale
}

func denseBind(b *vk.Buffer, a vk.Access) vk.Bind { return vk.Bind{Buf: b, Access: a} }

// ---- RMSNorm

// rmsnormRun normalizes n rows of cols; row 1 is tiny (mean(x²) ~ 1e-8,
// below eps), so eps matters.
func rmsnormRun(t testing.TB, dev *vk.Device, k *vk.Kernel, cols, n int, inPlace bool, seed int64) *denseRun {
	const eps = 1e-5
	rng := rand.New(rand.NewSource(seed))
	x := make([]float32, 0, n*cols)
	for r := 0; r < n; r++ {
		sigma := math.Pow(10, 4*rng.Float64()-2) // rows of very different sizes
		if r == 1 {
			sigma = 1e-4
		}
		x = append(x, denseNormals(rng, cols, sigma)...)
	}
	w := denseNormals(rng, cols, 1)
	want := make([]float32, n*cols)
	for r := 0; r < n; r++ {
		mod.RMSNorm(want[r*cols:(r+1)*cols], x[r*cols:(r+1)*cols], w, eps)
	}
	xb, wb := newBuffer(t, dev, f32bytes(x)), newBuffer(t, dev, f32bytes(w))
	out := xb
	if !inPlace {
		out = denseNaNBuffer(t, dev, n*cols)
	}
	return &denseRun{
		k: k, push: RMSNormPush{Cols: uint32(cols), N: uint32(n), Eps: eps},
		groups: RowGroups(uint32(n), k.Spec().Specialization),
		binds:  []vk.Bind{denseBind(xb, vk.Read), denseBind(wb, vk.Read), denseBind(out, vk.Write)},
		bytes:  4 * (2*n*cols + cols), tol: rmsnormTol,
		result: func() ([]float32, []float64, []float64) {
			w, s := denseRelative(want)
			return download(t, out, n*cols), w, s
		},
	}
}

func TestRMSNorm(t *testing.T) {
	dev := openDevice(t)
	ks := denseKernels{dev: dev, v: lookup(t, "rmsnorm")}
	var w denseWorst
	for _, sh := range [][2]int{{1, 1}, {7, 3}, {64, 5}, {257, 2}, {576, 9}, {4096, 2}, {40000, 1}} {
		for _, spec := range denseRowSpecs("rmsnorm", sh[0]) {
			for _, inPlace := range []bool{false, true} {
				name := fmt.Sprintf("spec%v/%dx%d/inPlace=%v", spec, sh[1], sh[0], inPlace)
				r := rmsnormRun(t, dev, ks.get(t, spec), sh[0], sh[1], inPlace, int64(sh[0]*10+sh[1]))
				if err := r.run(t, dev, &w); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		}
	}
	w.log(t, rmsnormTol)
}

// ---- NLL

// nllRun takes n rows of cols logits of alternating spread (1, 8: down to
// exp(-70)); row 2 is masked as attention masks, every third entry -inf
// (its target finite), and each row's target is random. The reference sums
// in float64, as engine.Perplexity's nll; the scale is the sizes of the
// terms, |log sum| + |max| + |x[target]|.
func nllRun(t testing.TB, dev *vk.Device, k *vk.Kernel, cols, n int, seed int64) *denseRun {
	rng := rand.New(rand.NewSource(seed))
	x := make([]float32, 0, n*cols)
	target := make([]uint32, n)
	for r := 0; r < n; r++ {
		row := denseNormals(rng, cols, []float64{1, 8}[r%2])
		target[r] = uint32(rng.Intn(cols))
		if r == 2 {
			for j := 1; j < cols; j += 3 {
				row[j] = float32(math.Inf(-1))
			}
			target[r] -= target[r] % 3 // j % 3 == 0: finite
		}
		x = append(x, row...)
	}
	want, scale := make([]float64, n), make([]float64, n)
	for r := 0; r < n; r++ {
		row := x[r*cols : (r+1)*cols]
		mx := float64(row[stats.Argmax(row)])
		lse, xt := stats.LogSumExp(row), float64(row[target[r]]) // lse - mx: log sum exp(row - max)
		want[r] = lse - xt
		scale[r] = math.Abs(lse-mx) + math.Abs(mx) + math.Abs(xt)
	}
	xb := newBuffer(t, dev, f32bytes(x))
	out := denseNaNBuffer(t, dev, n)
	return &denseRun{
		k: k, push: NLLPush{Cols: uint32(cols), N: uint32(n)},
		groups: RowGroups(uint32(n), k.Spec().Specialization),
		binds:  []vk.Bind{denseBind(xb, vk.Read), denseBind(newBuffer(t, dev, u32bytes(target)), vk.Read), denseBind(out, vk.Write)},
		bytes:  4 * n * (cols + 2), tol: nllTol,
		result: func() ([]float32, []float64, []float64) { return download(t, out, n), want, scale },
	}
}

func TestNLL(t *testing.T) {
	dev := openDevice(t)
	ks := denseKernels{dev: dev, v: lookup(t, "nll")}
	var w denseWorst
	for _, sh := range [][2]int{{1, 1}, {7, 3}, {100, 4}, {513, 3}, {32000, 2}} {
		for _, spec := range denseRowSpecs("nll", sh[0]) {
			name := fmt.Sprintf("spec%v/%dx%d", spec, sh[1], sh[0])
			r := nllRun(t, dev, ks.get(t, spec), sh[0], sh[1], int64(sh[0]*10+sh[1]))
			if err := r.run(t, dev, &w); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	w.log(t, nllTol)
}

// TestNLLNonFinite: a row with a NaN or an infinity, or a target outside
// the row, gives NaN; the rows beside it are unaffected.
func TestNLLNonFinite(t *testing.T) {
	dev := openDevice(t)
	const cols, n = 100, 5
	x := make([]float32, n*cols)
	for i := range x {
		x[i] = float32(i%7) * 0.25
	}
	x[1*cols+50] = float32(math.NaN())
	x[2*cols+3] = float32(math.Inf(1))
	x[3*cols+3] = float32(math.Inf(-1)) // -inf is a masked logit: finite loss
	target := []uint32{4, 4, 4, 4, cols}
	for _, spec := range [][]uint32{RowSpecGPU, RowSpecCPU} {
		out := denseNaNBuffer(t, dev, n)
		rec := dev.NewRecorder()
		k := newKernel(t, dev, lookup(t, "nll"), spec...)
		rec.Dispatch(k, vk.MustPackPush(NLLPush{Cols: cols, N: n}), RowGroups(n, spec),
			denseBind(newBuffer(t, dev, f32bytes(x)), vk.Read), denseBind(newBuffer(t, dev, u32bytes(target)), vk.Read), denseBind(out, vk.Write))
		require.NoError(t, dev.Run(rec))
		rec.Close()
		got := download(t, out, n)
		for r, nan := range []bool{false, true, true, false, true} {
			assert.Equal(t, nan, math.IsNaN(float64(got[r])), "spec %v row %d: %g", spec, r, got[r])
		}
	}
}

// ---- Argmax

// argmaxRun takes n rows of cols logits; row r%6 is: 0 random with the
// maximum planted twice (the lower index wins), 1 constant, 2 the maximum
// last, 3 all -inf, 4 a NaN planted, 5 a +Inf planted. A row with a
// non-finite value gives ArgmaxNonFinite (-1 in the comparison).
func argmaxRun(t testing.TB, dev *vk.Device, k *vk.Kernel, cols, n int, seed int64) *denseRun {
	rng := rand.New(rand.NewSource(seed))
	x := make([]float32, 0, n*cols)
	for r := 0; r < n; r++ {
		row := denseNormals(rng, cols, 3)
		switch r % 6 {
		case 0:
			a, b := rng.Intn(cols), rng.Intn(cols)
			row[a], row[b] = 20, 20
		case 1:
			for j := range row {
				row[j] = 0.5
			}
		case 2:
			row[cols-1] = 20
		case 3:
			for j := range row {
				row[j] = float32(math.Inf(-1))
			}
		case 4:
			row[rng.Intn(cols)] = float32(math.NaN())
		case 5:
			row[rng.Intn(cols)] = float32(math.Inf(1))
		}
		x = append(x, row...)
	}
	want, scale := make([]float64, n), make([]float64, n)
	for r := 0; r < n; r++ {
		row := x[r*cols : (r+1)*cols]
		want[r], scale[r] = float64(mod.TopKIndices(row, 1)[0]), 1
		if !mod.Finite(row) {
			want[r] = -1
		}
	}
	xb := newBuffer(t, dev, f32bytes(x))
	out, err := dev.NewBuffer(uint64(4*n), vk.DeviceLocal)
	require.NoError(t, err)
	t.Cleanup(out.Close)
	return &denseRun{
		k: k, push: ArgmaxPush{Cols: uint32(cols), N: uint32(n)},
		groups: RowGroups(uint32(n), k.Spec().Specialization),
		binds:  []vk.Bind{denseBind(xb, vk.Read), denseBind(out, vk.Write)},
		bytes:  4 * n * cols, tol: 0,
		result: func() ([]float32, []float64, []float64) {
			idx := downloadU32(t, out, n)
			got := make([]float32, n)
			for i, v := range idx {
				got[i] = float32(v) // exact: indices < 2^24
				if v == ArgmaxNonFinite {
					got[i] = -1
				}
			}
			return got, want, scale
		},
	}
}

// TestArgmaxWide: argmax_wide, a row over many workgroups and the last
// merging, against mod.TopKIndices (ties to the lower index) and NONFINITE
// for rows with a NaN or an infinity (argmaxRun's rows: a tie of two
// maxima, a constant row, the last column, all -inf, a NaN, +inf), over
// rows of one workgroup's columns or less, one more, and many (100,000 at
// [64 1]: 1,563 workgroups a row, more than a workgroup's invocations, so
// the merge loops). Each case runs twice: the second finds done as the
// first left it, zero, which is checked too.
func TestArgmaxWide(t *testing.T) {
	dev := openDevice(t)
	ks := denseKernels{dev: dev, v: lookup(t, "argmax_wide")}
	kh := denseKernels{dev: dev, v: lookup(t, "argmax_wide"+HandoffSuffix)} // the GPU step's, with its hand-off
	var w denseWorst
	for _, sh := range [][2]int{{1, 1}, {6, 7}, {1024, 6}, {1025, 7}, {32000, 6}, {100000, 1}} {
		for _, spec := range [][]uint32{ArgmaxWideSpec, {64, 1}, {32, 3}} {
			for _, handoff := range []bool{false, true} {
				if handoff && (sh[0] == 100000 || spec[0] != ArgmaxWideSpec[0]) {
					continue // the hand-off wraps the same code: the step's spec
				}
				name := fmt.Sprintf("spec%v/%dx%d/handoff%t", spec, sh[1], sh[0], handoff)
				cols, n := uint32(sh[0]), uint32(sh[1])
				k := ks.get(t, spec)
				if handoff {
					k = kh.get(t, spec)
				}
				run := argmaxRun(t, dev, k, sh[0], sh[1], int64(sh[0]+sh[1]))
				run.groups = ArgmaxWideGroups(n, cols, spec)
				done := newBuffer(t, dev, u32bytes(make([]uint32, n)))
				greedy := newBuffer(t, dev, ArgmaxDrawBytes(make([]ArgmaxDraw, n))) // temperature 0: the argmax
				run.binds = append(run.binds, denseBind(denseNaNBuffer(t, dev, int(ArgmaxWidePartWords(n, cols, spec))), vk.ReadWrite), denseBind(done, vk.ReadWrite), denseBind(greedy, vk.Read))
				run.push, run.binds = withHandoff(t, dev, k, vk.MustPackPush(run.push), run.groups, run.binds)
				for i := 0; i < 2; i++ {
					if err := run.run(t, dev, &w); err != nil {
						t.Errorf("%s run %d: %v", name, i, err)
					}
					assert.Equal(t, make([]uint32, n), downloadU32(t, done, int(n)), "%s run %d: done left at zero", name, i)
				}
			}
		}
	}
	w.log(t, 0)
}

func TestArgmax(t *testing.T) {
	dev := openDevice(t)
	ks := denseKernels{dev: dev, v: lookup(t, "argmax")}
	var w denseWorst
	for _, sh := range [][2]int{{1, 6}, {7, 6}, {512, 7}, {1000, 6}, {32000, 6}, {100000, 1}} {
		for _, spec := range append(denseRowSpecs("argmax", sh[0]), []uint32{64, 64}, []uint32{256, 256}) {
			name := fmt.Sprintf("spec%v/%dx%d", spec, sh[1], sh[0])
			if err := argmaxRun(t, dev, ks.get(t, spec), sh[0], sh[1], int64(sh[0]+sh[1])).run(t, dev, &w); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	w.log(t, 0)
}
