package shaders

// Tests of the dense ops (dense.go) against the CPU reference, package mod,
// on ragged shapes, and their benchmarks (BenchmarkDense).

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/modrun/modrun/gguf"
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
// RowSpecCPUFor.
// Those whose invocations would loop more than lavapipe allows are left out:
// no device is given them (RowSpecCPUFor exists to avoid them).
func denseRowSpecs(name string, cols int) [][]uint32 {
	var specs [][]uint32
	for _, s := range [][]uint32{RowSpecGPU, RowSpecCPU, {64, 1}, {96, 3}, {1, 1}, RowSpecCPUFor(name, uint32(cols))} {
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

func TestRowSpecCPUFor(t *testing.T) {
	assert.Equal(t, RowSpecCPU, RowSpecCPUFor("nll", 32000))
	assert.Greater(t, RowLoopIterations("nll", 40000, []uint32{64, 1}), uint32(LavapipeLoopIterations), "an invocation alone on 40000: 80000 iterations")
	assert.Equal(t, []uint32{16, 16}, RowSpecCPUFor("nll", 300000))
	for _, name := range []string{"rmsnorm", "nll", "argmax"} {
		for _, cols := range []uint32{1, 21000, 32000, 65535, 200000, 1 << 20} {
			assert.LessOrEqual(t, RowLoopIterations(name, cols, RowSpecCPUFor(name, cols)), uint32(LavapipeLoopIterations), "%s cols %d", name, cols)
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
	rec.Dispatch(r.k, vk.MustPackPush(r.push), r.groups, r.binds...)
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

func denseLookup(t testing.TB, name string) Variant {
	t.Helper()
	v, err := Lookup(name)
	require.NoError(t, err)
	return v
}

func denseU32Bytes(x []uint32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

func denseDownloadU32(t testing.TB, b *vk.Buffer, n int) []uint32 {
	t.Helper()
	raw := make([]byte, 4*n)
	require.NoError(t, b.Download(raw, 0))
	x := make([]uint32, n)
	for i := range x {
		x[i] = binary.LittleEndian.Uint32(raw[4*i:])
	}
	return x
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
	ks := denseKernels{dev: dev, v: denseLookup(t, "rmsnorm")}
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
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v) - mx)
		}
		xt := float64(row[target[r]])
		want[r] = math.Log(sum) + mx - xt
		scale[r] = math.Abs(math.Log(sum)) + math.Abs(mx) + math.Abs(xt)
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
	ks := denseKernels{dev: dev, v: denseLookup(t, "nll")}
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
		k := newKernel(t, dev, denseLookup(t, "nll"), spec...)
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
		switch r % 4 {
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
			idx := denseDownloadU32(t, out, n)
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

func TestArgmax(t *testing.T) {
	dev := openDevice(t)
	ks := denseKernels{dev: dev, v: denseLookup(t, "argmax")}
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

// ---- RoPE

// ropeRun rotates n rows of nHead heads of headDim at original positions
// that grow by about step a row (compact rows: the positions have gaps).
// out is where the rotated rows go: nil for a new buffer, or x's own buffer
// (in place) when inPlace.
func ropeRun(t testing.TB, dev *vk.Device, k *vk.Kernel, headDim, nHead, n, step int, freqs []float64, inPlace bool, seed int64) *denseRun {
	rng := rand.New(rand.NewSource(seed))
	width := nHead * headDim
	x := denseNormals(rng, n*width, 1)
	pos := make([]uint32, n)
	for r := range pos {
		pos[r] = uint32(r*step + rng.Intn(step))
	}
	want := slices.Clone(x)
	for r := 0; r < n; r++ {
		mod.RoPE(want[r*width:(r+1)*width], int32(pos[r]), freqs)
	}
	xb := newBuffer(t, dev, f32bytes(x))
	out := xb
	if !inPlace {
		out = denseNaNBuffer(t, dev, n*width)
	}
	return &denseRun{
		k: k, push: RopePush{HeadDim: uint32(headDim), NHead: uint32(nHead), N: uint32(n)},
		groups: Groups(uint32(n)),
		binds: []vk.Bind{denseBind(xb, vk.Read), denseBind(newBuffer(t, dev, denseU32Bytes(pos)), vk.Read),
			denseBind(newBuffer(t, dev, denseU32Bytes(RopeFreqs(freqs))), vk.Read), denseBind(out, vk.Write)},
		bytes: 4 * 2 * n * width, tol: ropeTol,
		result: func() ([]float32, []float64, []float64) {
			w, s := ropeScale(want)
			return download(t, out, n*width), w, s
		},
	}
}

// ropeScale is want in float64, with the norm of each element's pair as
// its scale: a rotation errs by its angle error times that norm.
func ropeScale(want []float32) (w, scale []float64) {
	w, scale = make([]float64, len(want)), make([]float64, len(want))
	for i := 0; i < len(want); i += 2 {
		a, b := float64(want[i]), float64(want[i+1])
		w[i], w[i+1] = a, b
		scale[i] = math.Hypot(a, b)
		scale[i+1] = scale[i]
	}
	return w, scale
}

// RoPE tables of the kinds a model may have (mod.RopeFrequencies, the
// one table every rope site reads): Llama 2's base 10000; Llama 3's base
// 500000 with Llama 3.2's frequency factors (rope_freqs.weight: factor 32,
// low and high frequency factors 1 and 4, original context 8192); and
// that with linear scaling by 4 (rope.scaling.factor) on top.
var ropeKinds = []string{"llama2", "llama3.2", "llama3.2+linear4"}

func ropeTable(t testing.TB, headDim int, kind string) []float64 {
	t.Helper()
	c := mod.Config{HeadDim: headDim, RopeBase: 10000}
	var factors []float32
	if kind != "llama2" {
		c.RopeBase = 500000
		var err error
		factors, err = mod.Llama3RopeFactors(headDim, 500000, 32, 1, 4, 8192)
		require.NoError(t, err)
	}
	if kind == "llama3.2+linear4" {
		c.RopeScale = 4
	}
	return mod.RopeFrequencies(c, factors)
}

func TestRoPE(t *testing.T) {
	dev := openDevice(t)
	k := newKernel(t, dev, denseLookup(t, "rope"))
	var w denseWorst
	for i, sh := range [][3]int{{2, 1, 1}, {6, 5, 4}, {8, 3, 5}, {64, 4, 7}, {128, 2, 3}, {256, 3, 2}} { // 256: more pairs than invocations
		for _, step := range []int{1, 37, 3000, 300000} { // positions up to ~2e6
			for _, kind := range ropeKinds {
				for _, inPlace := range []bool{false, true} {
					name := fmt.Sprintf("headDim%d/nHead%d/n%d/step%d/%s/inPlace=%v", sh[0], sh[1], sh[2], step, kind, inPlace)
					r := ropeRun(t, dev, k, sh[0], sh[1], sh[2], step, ropeTable(t, sh[0], kind), inPlace, int64(i*1000+step))
					if err := r.run(t, dev, &w); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			}
		}
	}
	w.log(t, ropeTol)
}

// TestRoPEIntoCache writes the rotated rows straight into a KV cache at
// entry 3 (RoPE + KV write in one dispatch): the entries before and after
// are untouched.
func TestRoPEIntoCache(t *testing.T) {
	dev := openDevice(t)
	k := newKernel(t, dev, denseLookup(t, "rope"))
	const headDim, nHead, n, entries, at = 64, 2, 3, 8, 3
	width := headDim * nHead // 512 bytes a row: any device's offset alignment divides it
	r := ropeRun(t, dev, k, headDim, nHead, n, 100, ropeTable(t, headDim, "llama2"), false, 1)
	cache := denseNaNBuffer(t, dev, entries*width)
	r.binds[3] = vk.Bind{Buf: cache, Offset: uint64(4 * at * width), Size: uint64(4 * n * width), Access: vk.Write}
	rec := dev.NewRecorder()
	defer rec.Close()
	r.record(rec)
	require.NoError(t, dev.Run(rec))
	_, want, scale := r.result() // (the unused new buffer is all NaN)
	all := download(t, cache, entries*width)
	if err := closeness(all[at*width:(at+n)*width], want, scale, ropeTol); err != nil {
		t.Errorf("entries %d..%d: %v", at, at+n-1, err)
	}
	for i, v := range slices.Concat(all[:at*width], all[(at+n)*width:]) {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("an entry outside %d..%d was written: element %d is %g", at, at+n-1, i, v)
		}
	}
}

// ---- SwiGLU

func swigluRun(t testing.TB, dev *vk.Device, k *vk.Kernel, n int, inPlace bool, seed int64) *denseRun {
	rng := rand.New(rand.NewSource(seed))
	gate, up := denseNormals(rng, n, 4), denseNormals(rng, n, 1) // gate out to ±20
	want := make([]float32, n)
	for i := range want {
		want[i] = mod.SiLU(gate[i]) * up[i]
	}
	gb, ub := newBuffer(t, dev, f32bytes(gate)), newBuffer(t, dev, f32bytes(up))
	out := gb
	if !inPlace {
		out = denseNaNBuffer(t, dev, n)
	}
	return &denseRun{
		k: k, push: SwiGLUPush{N: uint32(n)}, groups: ElementGroups(uint32(n)),
		binds: []vk.Bind{denseBind(gb, vk.Read), denseBind(ub, vk.Read), denseBind(out, vk.Write)},
		bytes: 4 * 3 * n, tol: swigluTol,
		result: func() ([]float32, []float64, []float64) {
			w, s := denseRelative(want)
			return download(t, out, n), w, s
		},
	}
}

func TestSwiGLU(t *testing.T) {
	dev := openDevice(t)
	k := newKernel(t, dev, denseLookup(t, "swiglu"))
	var w denseWorst
	for _, n := range []int{1, 255, 256, 257, 100003} {
		for _, inPlace := range []bool{false, true} {
			if err := swigluRun(t, dev, k, n, inPlace, int64(n)).run(t, dev, &w); err != nil {
				t.Errorf("n=%d inPlace=%v: %v", n, inPlace, err)
			}
		}
	}
	w.log(t, swigluTol)
}

// TestDenseGrid2D crosses 65535 workgroups, so the grid is 2D
// (groupIndex): a row kernel with a row per workgroup, and an element
// kernel. The others share that code.
func TestDenseGrid2D(t *testing.T) {
	dev := openDevice(t)
	var w denseWorst
	spec := []uint32{8, 8}
	require.Equal(t, uint32(2), RowGroups(65537, spec)[1])
	r := rmsnormRun(t, dev, newKernel(t, dev, denseLookup(t, "rmsnorm"), spec...), 5, 65537, false, 1)
	if err := r.run(t, dev, &w); err != nil {
		t.Errorf("rmsnorm, 65537 rows: %v", err)
	}
	n := 65535*256 + 77
	require.Equal(t, uint32(2), ElementGroups(uint32(n))[1])
	if err := swigluRun(t, dev, newKernel(t, dev, denseLookup(t, "swiglu")), n, true, 2).run(t, dev, &w); err != nil {
		t.Errorf("swiglu, %d elements: %v", n, err)
	}
	w.log(t, max(rmsnormTol, swigluTol))
}

// ---- MoD residual

// modResidualRun updates n rows of cols where the k with the largest r are
// selected (mod.TopKIndices), as a routed block's output does; pad more
// unused entries (>= n) follow in sel.
// modResidualRun checks mod_residual for a gate function and a gate target
// (mod.GateTarget*: "block" as mod's routedBlock for DESIGN.md §3, "output"
// g·o, "mlp" x + (h + g·m) with o holding h and a fifth binding m).
func modResidualRun(t testing.TB, dev *vk.Device, k *vk.Kernel, gate, target string, cols, n, sel, pad int, seed int64) *denseRun {
	rng := rand.New(rand.NewSource(seed))
	x, o, r := denseNormals(rng, n*cols, 1), denseNormals(rng, sel*cols, 1), denseNormals(rng, n, 2)
	m := denseNormals(rng, (sel+pad)*cols, 1) // the MLP outputs (target mlp)
	idx := mod.TopKIndices(r, sel)
	selected := make([]uint32, 0, sel+pad)
	for _, i := range idx {
		selected = append(selected, uint32(i))
	}
	for j := 0; j < pad; j++ {
		selected = append(selected, []uint32{uint32(n), math.MaxUint32}[j%2])
	}
	o = append(o, denseNormals(rng, pad*cols, 1)...) // the padded rows' outputs: ignored
	want, scale := make([]float64, n*cols), make([]float64, n*cols)
	xs := slices.Clone(x)
	for j, i := range idx { // as mod's routedBlock
		g := mod.Gate(gate, r[i])
		xi, oj := xs[i*cols:(i+1)*cols], o[j*cols:(j+1)*cols]
		for e := range xi {
			switch target {
			case mod.GateTargetOutput:
				scale[i*cols+e] = math.Abs(float64(g * oj[e]))
				xi[e] = g * oj[e]
			case mod.GateTargetMLP:
				gm := g * m[j*cols+e]
				scale[i*cols+e] = math.Abs(float64(xi[e])) + math.Abs(float64(oj[e])) + math.Abs(float64(gm))
				xi[e] += oj[e] + gm
			default:
				scale[i*cols+e] = math.Abs(float64(xi[e])) + math.Abs(float64(g*(oj[e]-xi[e])))
				xi[e] += g * (oj[e] - xi[e])
			}
		}
	}
	for i, v := range xs {
		want[i] = float64(v)
	}
	xb := newBuffer(t, dev, f32bytes(x))
	kk := sel + pad
	binds := []vk.Bind{denseBind(xb, vk.ReadWrite), denseBind(newBuffer(t, dev, f32bytes(o)), vk.Read),
		denseBind(newBuffer(t, dev, denseU32Bytes(selected)), vk.Read), denseBind(newBuffer(t, dev, f32bytes(r)), vk.Read)}
	if target == mod.GateTargetMLP {
		binds = append(binds, denseBind(newBuffer(t, dev, f32bytes(m)), vk.Read))
	}
	return &denseRun{
		k: k, push: ModResidualPush{Cols: uint32(cols), N: uint32(n), K: uint32(kk)},
		groups: Groups(uint32(kk)),
		binds:  binds,
		bytes:  4 * 3 * sel * cols, tol: modResidualTol,
		result: func() ([]float32, []float64, []float64) { return download(t, xb, n*cols), want, scale },
		exact: func() error { // rows not selected pass unchanged, bit for bit
			got := download(t, xb, n*cols)
			for i := 0; i < n; i++ {
				if slices.Contains(idx, i) {
					continue
				}
				for e := 0; e < cols; e++ {
					if math.Float32bits(got[i*cols+e]) != math.Float32bits(x[i*cols+e]) {
						return fmt.Errorf("row %d was not selected but element %d changed: %g, was %g", i, e, got[i*cols+e], x[i*cols+e])
					}
				}
			}
			return nil
		},
	}
}

func TestModResidual(t *testing.T) {
	dev := openDevice(t)
	var w denseWorst
	for _, target := range []string{mod.GateTargetBlock, mod.GateTargetOutput, mod.GateTargetMLP} {
		for _, gate := range []string{mod.GateSigmoid, mod.GateIdentity} {
			k := newKernel(t, dev, denseLookup(t, ModResidualVariant(gate, target)))
			for _, sh := range [][3]int{{1, 1, 1}, {7, 5, 2}, {64, 16, 4}, {257, 9, 9}, {576, 33, 5}} { // cols, n, k
				for _, pad := range []int{0, 3} {
					name := fmt.Sprintf("%s/%s/%dx%d/k%d/pad%d", target, gate, sh[1], sh[0], sh[2], pad)
					r := modResidualRun(t, dev, k, gate, target, sh[0], sh[1], sh[2], pad, int64(sh[0]+sh[1]*10+pad))
					if err := r.run(t, dev, &w); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			}
		}
	}
	w.log(t, modResidualTol)
}

// ---- Embedding lookup

var embedVariantOf = map[gguf.TensorType]string{
	gguf.TypeF32:  "embed_f32",
	gguf.TypeF16:  "embed_f16",
	gguf.TypeQ8_0: "embed_q8_0",
}

// embedRun looks up n tokens (the first and last ids among them, and
// repeats) in a vocab x cols table of type typ. With split > 0 the table
// is bound in two pieces, rows [0, split) and [split, vocab), one dispatch
// each, as a table over maxStorageBufferRange must be; run records the
// second. With repack the table is uploaded in matvec's split layout
// (MatvecBytes), bound whole.
func embedRun(t testing.TB, dev *vk.Device, k *vk.Kernel, typ gguf.TensorType, vocab, cols, n, split int, seed int64, repack bool) (*denseRun, *denseRun) {
	rng := rand.New(rand.NewSource(seed))
	table, err := gguf.Quantize(typ, denseNormals(rng, vocab*cols, 1))
	require.NoError(t, err)
	m, err := mod.NewMat("token_embd", typ, []uint64{uint64(cols), uint64(vocab)}, table)
	require.NoError(t, err)
	tok := []uint32{0, uint32(vocab - 1)}
	for len(tok) < n {
		tok = append(tok, uint32(rng.Intn(vocab)))
	}
	tok = tok[:n]
	if n > 3 {
		tok[3] = tok[0] // a repeat
	}
	want, scale := make([]float64, n*cols), make([]float64, n*cols)
	row := make([]float32, cols)
	for i, id := range tok {
		m.Row(int(id), row)
		for e, v := range row {
			want[i*cols+e], scale[i*cols+e] = float64(v), 1
		}
	}
	rowBytes := len(table) / vocab
	if repack {
		require.Zero(t, split, "a split-layout table is bound whole")
		table, err = MatvecBytes(matvecTypeOf[typ], table, vocab, cols)
		require.NoError(t, err)
	}
	wb, tb, out := newBuffer(t, dev, table), newBuffer(t, dev, denseU32Bytes(tok)), denseNaNBuffer(t, dev, n*cols)
	piece := func(base, rows int) *denseRun {
		return &denseRun{
			k: k, push: EmbedPush{Cols: uint32(cols), N: uint32(n), RowBase: uint32(base), Rows: uint32(rows)},
			groups: Groups(uint32(n)),
			binds: []vk.Bind{{Buf: wb, Offset: uint64(base * rowBytes), Size: uint64(rows * rowBytes), Access: vk.Read},
				denseBind(tb, vk.Read), denseBind(out, vk.Write)},
			bytes: n * (rowBytes + 4*cols), tol: 0,
			result: func() ([]float32, []float64, []float64) { return download(t, out, n*cols), want, scale },
		}
	}
	if split == 0 {
		whole := piece(0, vocab)
		whole.binds[0].Size = 0 // the rest of the buffer: its size rounded up to 4
		return nil, whole
	}
	second := piece(split, vocab-split)
	second.binds[0].Size = 0
	return piece(0, split), second
}

func TestEmbed(t *testing.T) {
	dev := openDevice(t)
	shapes := map[gguf.TensorType][][2]int{ // vocab, cols
		gguf.TypeF32:  {{5, 7}, {37, 33}, {100, 96}},
		gguf.TypeF16:  {{5, 7}, {37, 33}, {100, 96}},   // odd cols: rows do not start on a word
		gguf.TypeQ8_0: {{5, 32}, {37, 96}, {100, 160}}, // 160: 5 blocks, rows alternate 4-alignment
	}
	for _, typ := range gguf.SupportedTypes {
		switch {
		case typ == gguf.TypeBF16:
			shapes[typ] = shapes[gguf.TypeF16]
		case typ.BlockSize() == 32:
			shapes[typ] = shapes[gguf.TypeQ8_0]
		case typ.BlockSize() == 256:
			shapes[typ] = [][2]int{{5, 256}, {37, 768}} // 768: 3 super-blocks
		}
	}
	type variant struct {
		typ    gguf.TensorType
		name   string
		repack bool
	}
	var variants []variant
	for _, typ := range []gguf.TensorType{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ8_0} {
		variants = append(variants, variant{typ, embedVariantOf[typ], false})
	}
	// Every type's variant that reads its device layout, as the engine
	// uploads it (MatvecBytes); the quantized ones are repacked.
	for _, typ := range gguf.SupportedTypes {
		if typ == gguf.TypeF32 || typ == gguf.TypeF16 {
			continue // the same variant as above
		}
		variants = append(variants, variant{typ, EmbedName(matvecTypeOf[typ]), typ.BlockSize() > 1})
	}
	var w denseWorst
	for _, v := range variants {
		typ := v.typ
		k := newKernel(t, dev, denseLookup(t, v.name))
		for _, sh := range shapes[typ] {
			for _, n := range []int{1, 2, 9} {
				// Split at row 8: 8 rows of any type here are a multiple of
				// 16 bytes, lavapipe's offset alignment.
				for _, split := range []int{0, 8} {
					if split >= sh[0] || (v.repack && split > 0) {
						continue
					}
					name := fmt.Sprintf("%s/vocab%d/cols%d/n%d/split%d", v.name, sh[0], sh[1], n, split)
					first, last := embedRun(t, dev, k, typ, sh[0], sh[1], n, split, int64(sh[0]+n), v.repack)
					if first != nil {
						rec := dev.NewRecorder()
						first.record(rec)
						require.NoError(t, dev.Run(rec))
						rec.Close()
					}
					if err := last.run(t, dev, &w); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			}
		}
	}
	w.log(t, 0)
}

// ---- Benchmarks

// BenchmarkDense times each dense op at a decode or prefill size on this
// device, after checking its result against the reference, and reports the
// bytes the op must read and write per second, the time per dispatch, and
// the ratio to add's bandwidth on 4M floats measured in the same run (what
// an elementwise pass can reach here). Each Run replays perRun dispatches,
// so the submit cost is spread over them, as in a decode step.
func BenchmarkDense(b *testing.B) {
	dev := openDeviceWith(b, vk.InstanceOptions{})
	const perRun = 8
	timed := func(b *testing.B, r *denseRun, reps int) float64 { // seconds per dispatch
		rec := dev.NewRecorder()
		defer rec.Close()
		for i := 0; i < perRun; i++ {
			r.record(rec)
		}
		require.NoError(b, dev.Run(rec)) // records
		start := time.Now()
		for i := 0; i < reps; i++ {
			require.NoError(b, dev.Run(rec))
		}
		return time.Since(start).Seconds() / float64(reps*perRun)
	}
	var w denseWorst
	addK := newKernel(b, dev, denseLookup(b, "add"))
	const addN = 4 << 20
	a := newBuffer(b, dev, f32bytes(make([]float32, addN)))
	add := &denseRun{k: addK, push: AddPush{N: addN}, groups: Groups(addN / 256),
		binds: []vk.Bind{denseBind(a, vk.Read), denseBind(a, vk.Read), denseBind(a, vk.Write)}, bytes: 3 * 4 * addN}
	addGBs := float64(add.bytes) / timed(b, add, 5) / 1e9
	b.Logf("baseline: add over %d floats, %.2f GB/s", addN, addGBs)

	type benchCase struct {
		name string
		make func(b *testing.B) *denseRun
	}
	var cases []benchCase
	// The row kernels, with each default spec: decode (one row) and prefill.
	rowRun := map[string]func(b *testing.B, k *vk.Kernel, cols, n int) *denseRun{
		"rmsnorm": func(b *testing.B, k *vk.Kernel, cols, n int) *denseRun {
			return rmsnormRun(b, dev, k, cols, n, false, 1)
		},
		"nll": func(b *testing.B, k *vk.Kernel, cols, n int) *denseRun {
			return nllRun(b, dev, k, cols, n, 1)
		},
		"argmax": func(b *testing.B, k *vk.Kernel, cols, n int) *denseRun { return argmaxRun(b, dev, k, cols, n, 1) },
	}
	for _, rc := range []struct {
		name    string
		n, cols int
	}{{"rmsnorm", 1, 4096}, {"rmsnorm", 64, 4096}, {"nll", 1, 32000}, {"nll", 64, 32000}, {"argmax", 1, 32000}} {
		for _, sp := range []struct {
			name string
			spec []uint32
		}{{"gpu-spec", RowSpecGPU}, {"cpu-spec", RowSpecCPUFor(rc.name, uint32(rc.cols))}} {
			cases = append(cases, benchCase{fmt.Sprintf("%s/%dx%d/%s", rc.name, rc.n, rc.cols, sp.name), func(b *testing.B) *denseRun {
				return rowRun[rc.name](b, newKernel(b, dev, denseLookup(b, rc.name), sp.spec...), rc.cols, rc.n)
			}})
		}
	}
	cases = append(cases,
		benchCase{"rope/64x32x128", func(b *testing.B) *denseRun {
			return ropeRun(b, dev, newKernel(b, dev, denseLookup(b, "rope")), 128, 32, 64, 1, ropeTable(b, 128, "llama3.2"), false, 1)
		}},
		benchCase{"swiglu/64x11008", func(b *testing.B) *denseRun {
			return swigluRun(b, dev, newKernel(b, dev, denseLookup(b, "swiglu")), 64*11008, false, 1)
		}},
		benchCase{"mod_residual_sigmoid/512x4096/k64", func(b *testing.B) *denseRun {
			return modResidualRun(b, dev, newKernel(b, dev, denseLookup(b, "mod_residual_sigmoid")), mod.GateSigmoid, mod.GateTargetBlock, 4096, 512, 64, 0, 1)
		}},
		benchCase{"embed_f16/64/4096x4096", func(b *testing.B) *denseRun {
			_, r := embedRun(b, dev, newKernel(b, dev, denseLookup(b, "embed_f16")), gguf.TypeF16, 4096, 4096, 64, 0, 1, false)
			return r
		}},
		benchCase{"embed_q8_0/64/4096x4096", func(b *testing.B) *denseRun {
			_, r := embedRun(b, dev, newKernel(b, dev, denseLookup(b, "embed_q8_0")), gguf.TypeQ8_0, 4096, 4096, 64, 0, 1, false)
			return r
		}},
	)
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			r := c.make(b)
			if err := r.run(b, dev, &w); err != nil {
				b.Fatalf("wrong before timing: %v", err)
			}
			b.ResetTimer()
			perDispatch := timed(b, r, b.N)
			gbs := float64(r.bytes) / perDispatch / 1e9
			b.ReportMetric(gbs, "GB/s")
			b.ReportMetric(gbs/addGBs, "x-add")
			b.ReportMetric(perDispatch*1e6, "us/dispatch")
		})
	}
}
