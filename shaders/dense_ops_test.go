package shaders

// Tests of the elementwise dense ops (dense.go) against the CPU reference,
// package mod: RoPE, SwiGLU, the 2D grid of a long dispatch and the MoD
// gated residual (mod_residual), on the harness of dense_test.go.

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/require"
)

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
		binds: []vk.Bind{denseBind(xb, vk.Read), denseBind(newBuffer(t, dev, u32bytes(pos)), vk.Read),
			denseBind(newBuffer(t, dev, u32bytes(RopeFreqs(freqs))), vk.Read), denseBind(out, vk.Write)},
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
	k := newKernel(t, dev, lookup(t, "rope"))
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
	k := newKernel(t, dev, lookup(t, "rope"))
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
	k := newKernel(t, dev, lookup(t, "swiglu"))
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
	r := rmsnormRun(t, dev, newKernel(t, dev, lookup(t, "rmsnorm"), spec...), 5, 65537, false, 1)
	if err := r.run(t, dev, &w); err != nil {
		t.Errorf("rmsnorm, 65537 rows: %v", err)
	}
	n := 65535*256 + 77
	require.Equal(t, uint32(2), ElementGroups(uint32(n))[1])
	if err := swigluRun(t, dev, newKernel(t, dev, lookup(t, "swiglu")), n, true, 2).run(t, dev, &w); err != nil {
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
		denseBind(newBuffer(t, dev, u32bytes(selected)), vk.Read), denseBind(newBuffer(t, dev, f32bytes(r)), vk.Read)}
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
			k := newKernel(t, dev, lookup(t, ModResidualVariant(gate, target)))
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
