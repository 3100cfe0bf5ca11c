package shaders

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of the routing kernels against mod's CPU reference (the oracle):
// mod.TopKIndices, mod.TopK, mod.Gate, mod.SiLU and the dot products of
// mod.Mat, on ragged sizes. Integer outputs (masks, indices, counts,
// indirect arguments) must be exact.

// routingSizes are token counts: not powers of two, up to a context length.
var routingSizes = []int{1, 2, 7, 37, 100, 513, 2048}

// routingCapacities give k = mod.TopK(c, n).
var routingCapacities = []float32{0.125, 0.3, 1}

// Tolerances, relative to the sum of the absolute terms (see closeness):
//   - router and predictor scores: see dotTolerance (score_test.go); the
//     end-to-end predictor at d = 256 adds GLSL's exp, off by up to 3+2|a|
//     ulp (GLSL 4.50 §4.7.1) where Go's is exact-ish, and the division by
//     1+exp another 2.5 ulp: |a| stays under ~10 here: 1e-5 holds it all.
//   - the gated residual, sigmoid gate: g carries exp's error (r under ~8 here: < 20
//     ulp, 2.4e-6); identity gate: the same two roundings as Go.
var (
	predictorTolerance = 1e-5
	residualTolerance  = map[string]float64{
		mod.GateSigmoid:  1e-5,
		mod.GateIdentity: map[bool]float64{true: 0, false: 1e-6}[runtime.GOARCH == "amd64"],
	}
)

// routingBuffer is a device-local buffer of n uint32 filled with fill by rec.
func routingBuffer(t testing.TB, dev *vk.Device, rec *vk.Recorder, n int, fill uint32) *vk.Buffer {
	t.Helper()
	b, err := dev.NewBuffer(uint64(4*max(n, 1)), vk.DeviceLocal)
	require.NoError(t, err)
	t.Cleanup(b.Close)
	if rec != nil {
		rec.Fill(b, 0, b.Size(), fill)
	}
	return b
}

// routingExact reports where got and want differ: the first bad index and a few
// pairs from there.
func routingExact(got, want []uint32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	first, bad := -1, 0
	for i := range got {
		if got[i] != want[i] {
			bad++
			if first < 0 {
				first = i
			}
		}
	}
	if bad == 0 {
		return nil
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d of %d values differ, first bad index %d\n", bad, len(got), first)
	for i := first; i < len(got) && i < first+5; i++ {
		fmt.Fprintf(&sb, "  [%d] got %d want %d\n", i, got[i], want[i])
	}
	return errors.New(sb.String())
}

func routingU32(x []int) []uint32 {
	out := make([]uint32, len(x))
	for i, v := range x {
		out[i] = uint32(v)
	}
	return out
}

// routingMask is the 0/1 mask of the selected indices sel among n.
func routingMask(sel []int, n int) []uint32 {
	m := make([]uint32, n)
	for _, i := range sel {
		m[i] = 1
	}
	return m
}

// routingPositive is causal routing's selection: i with s[i] > 0 by
// mod.Selects (DESIGN.md §3).
func routingPositive(s []float32) []int {
	sel := []int{}
	for i, v := range s {
		if mod.Selects(v) {
			sel = append(sel, i)
		}
	}
	return sel
}

// routingArgs is the VkDispatchIndirectCommand compact writes for count rows.
func routingArgs(count, rowsPerGroup int) []uint32 {
	g := Groups(uint32((count + rowsPerGroup - 1) / rowsPerGroup))
	if count == 0 {
		g = [3]uint32{0, 1, 1}
	}
	return g[:]
}

func routingMat(t testing.TB, name string, rows, cols int, v []float32) *mod.Mat {
	t.Helper()
	dims := []uint64{uint64(cols)}
	if rows > 1 {
		dims = append(dims, uint64(rows))
	}
	m, err := mod.NewMat(name, gguf.TypeF32, dims, f32bytes(v))
	require.NoError(t, err)
	return &m
}

func routingNormal(rng *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * scale)
	}
	return x
}

// routerRef is r[i] = w·x[i] + b as mod's routedBlock computes it, and the
// scale of each (sum of |terms|) for closeness.
func routerRef(t testing.TB, w, x []float32, bias *float32, n, d int) (r []float32, want, scale []float64) {
	wm := routingMat(t, "mod_router.weight", 1, d, w)
	r, want, scale = make([]float32, n), make([]float64, n), make([]float64, n)
	for i := 0; i < n; i++ {
		xi := x[i*d : (i+1)*d]
		r[i] = wm.Dot(0, xi)
		for j := range xi {
			scale[i] += math.Abs(float64(w[j] * xi[j]))
		}
		if bias != nil {
			r[i] += *bias
			scale[i] += math.Abs(float64(*bias))
		}
		want[i] = float64(r[i])
	}
	return r, want, scale
}

// predictorRef is p[i] = w2·SiLU(W1·x[i]) as mod's predict computes it.
func predictorRef(t testing.TB, w1, w2, x []float32, n, d, h int) (want, scale []float64) {
	up := routingMat(t, "mod_pred_up.weight", h, d, w1)
	down := routingMat(t, "mod_pred_down.weight", 1, h, w2)
	hidden := make([]float32, n*h)
	mod.MatMul(hidden, x, up, n)
	want, scale = make([]float64, n), make([]float64, n)
	for i := 0; i < n; i++ {
		row := hidden[i*h : (i+1)*h]
		for j := range row {
			row[j] = mod.SiLU(row[j])
			scale[i] += math.Abs(float64(w2[j] * row[j]))
		}
		want[i] = float64(down.Dot(0, row))
	}
	return want, scale
}

// topkScores are the score patterns top-k must rank as the CPU does.
func topkScores(kind string, n int, rng *rand.Rand) []float32 {
	s := make([]float32, n)
	for i := range s {
		switch kind {
		case "random":
			s[i] = float32(rng.NormFloat64())
		case "ties": // few distinct values: ties everywhere, some -0 against +0
			s[i] = float32(rng.Intn(5) - 2)
			if s[i] == 0 && rng.Intn(2) == 0 {
				s[i] = float32(math.Copysign(0, -1))
			}
		case "equal":
			s[i] = 0.5
		case "extremes": // infinities and the largest and smallest floats
			s[i] = []float32{float32(math.Inf(1)), float32(math.Inf(-1)), math.MaxFloat32, -math.MaxFloat32,
				math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, 1, -1}[rng.Intn(8)]
		}
	}
	return s
}

// topkKernels makes every top-k and compaction kernel once.
type topkKernels map[string]*vk.Kernel

func newTopkKernels(t testing.TB, dev *vk.Device) topkKernels {
	ks := topkKernels{}
	for _, name := range []string{"topk", "topk_sort", "topk_merge_global", "topk_merge_local", "topk_select", "compact_mask"} {
		v, err := Lookup(name)
		require.NoError(t, err)
		ks[name] = newKernel(t, dev, v)
	}
	return ks
}

// topkBuffers hold one top-k problem's outputs and scratch.
type topkBuffers struct {
	scores, mask, idx, keys, count, args *vk.Buffer
	x                                    *vk.Buffer // [n][cols] poisoned where a score is not finite
	cols                                 uint32     // 0: x is not touched (the scores are finite)
}

// record records top-k of n scores with TopkPasses; for the multi-pass plan
// compact_mask makes idx (and count, args).
func (ks topkKernels) record(rec *vk.Recorder, b topkBuffers, n, k uint32) {
	for _, pass := range TopkPasses(n, k) {
		pass.Push.Cols = b.cols
		push := vk.MustPackPush(pass.Push)
		x := b.x
		if x == nil {
			x = b.mask // any buffer: with cols 0 nothing is written
		}
		var binds []vk.Bind
		switch pass.Variant {
		case "topk":
			binds = []vk.Bind{{Buf: b.scores, Access: vk.Read}, {Buf: b.mask, Access: vk.Write}, {Buf: b.idx, Access: vk.Write}, {Buf: x, Access: vk.ReadWrite}}
		case "topk_sort":
			binds = []vk.Bind{{Buf: b.scores, Access: vk.Read}, {Buf: b.keys, Access: vk.Write}, {Buf: x, Access: vk.ReadWrite}}
		case "topk_merge_global", "topk_merge_local":
			binds = []vk.Bind{{Buf: b.keys, Access: vk.ReadWrite}}
		case "topk_select":
			binds = []vk.Bind{{Buf: b.keys, Access: vk.Read}, {Buf: b.mask, Access: vk.Write}}
		}
		rec.Dispatch(ks[pass.Variant], push, pass.Groups, binds...)
	}
	if n > TopkLocal {
		rec.Dispatch(ks["compact_mask"], vk.MustPackPush(CompactPush{N: n, RowsPerGroup: 1}), [3]uint32{1, 1, 1},
			vk.Bind{Buf: b.mask, Access: vk.Read}, vk.Bind{Buf: b.idx, Access: vk.Write},
			vk.Bind{Buf: b.count, Access: vk.Write}, vk.Bind{Buf: b.args, Access: vk.Write})
	}
}

func newTopkBuffers(t testing.TB, dev *vk.Device, rec *vk.Recorder, scores []float32) topkBuffers {
	n := len(scores)
	b := topkBuffers{scores: newBuffer(t, dev, f32bytes(scores))}
	b.mask = routingBuffer(t, dev, rec, n, 7) // 7: neither 0 nor 1, so an unwritten entry shows
	b.idx = routingBuffer(t, dev, rec, n, 0xdeadbeef)
	b.count, b.args = routingBuffer(t, dev, rec, 1, 0), routingBuffer(t, dev, rec, 3, 0)
	b.keys = routingBuffer(t, dev, nil, 2*int(TopkKeys(uint32(n))), 0)
	return b
}

func TestTopK(t *testing.T) {
	dev := openDevice(t)
	ks := newTopkKernels(t, dev)
	// 2049 and 7000 take the multi-pass plan (1 and 2 merges past the
	// shared-memory chunk); one capacity each keeps lavapipe's time down.
	type tc struct {
		n    int
		caps []float32
	}
	cases := []tc{}
	for _, n := range routingSizes {
		cases = append(cases, tc{n, routingCapacities})
	}
	cases = append(cases, tc{2049, []float32{0.125}}, tc{7000, []float32{0.3}})
	for _, c := range cases {
		for _, kind := range []string{"random", "ties", "equal", "extremes"} {
			if c.n > TopkLocal && kind != "ties" && kind != "random" {
				continue
			}
			for _, capacity := range c.caps {
				n, k := c.n, mod.TopK(capacity, c.n)
				name := fmt.Sprintf("n%d/%s/c%g/k%d", n, kind, capacity, k)
				scores := topkScores(kind, n, rand.New(rand.NewSource(int64(n))))
				want := mod.TopKIndices(scores, k)
				rec := dev.NewRecorder()
				b := newTopkBuffers(t, dev, rec, scores)
				ks.record(rec, b, uint32(n), uint32(k))
				require.NoError(t, dev.Run(rec), name)
				if err := routingExact(downloadU32(t, b.mask, n), routingMask(want, n)); err != nil {
					t.Errorf("%s: mask: %v", name, err)
				}
				if err := routingExact(downloadU32(t, b.idx, k), routingU32(want)); err != nil {
					t.Errorf("%s: idx: %v", name, err)
				}
				if n > TopkLocal {
					assert.Equal(t, []uint32{uint32(k)}, downloadU32(t, b.count, 1), "%s: count", name)
				}
				rec.Close()
			}
		}
	}
}

// TestTopKPasses checks the plan's shape: one dispatch up to TopkLocal, and
// a bitonic network over the next power of two beyond.
func TestTopKPasses(t *testing.T) {
	assert.Len(t, TopkPasses(1, 1), 1)
	assert.Len(t, TopkPasses(TopkLocal, 3), 1)
	var names []string
	for _, p := range TopkPasses(7000, 2100) {
		names = append(names, fmt.Sprintf("%s/%d/%d", p.Variant, p.Push.Block, p.Push.Stride))
	}
	assert.Equal(t, []string{"topk_sort/0/0",
		"topk_merge_global/4096/2048", "topk_merge_local/4096/0",
		"topk_merge_global/8192/4096", "topk_merge_global/8192/2048", "topk_merge_local/8192/0",
		"topk_select/0/0"}, names)
	assert.Equal(t, uint32(8192), TopkKeys(7000))
	assert.Equal(t, uint32(1), TopkKeys(1))
}

func TestCompact(t *testing.T) {
	dev := openDevice(t)
	kMask := newKernel(t, dev, lookup(t, "compact_mask"))
	kPos := newKernel(t, dev, lookup(t, "compact_positive"))
	// 70000 all selected: more than 65535 workgroups of one row, so the
	// arguments need a second dimension.
	sizes := append(append([]int{}, routingSizes...), 70000)
	for _, n := range sizes {
		for _, density := range []float64{0, 0.3, 1} {
			if n == 70000 && density != 1 {
				continue
			}
			for _, rpg := range []int{1, 3, 64} {
				for _, positive := range []bool{false, true} {
					name := fmt.Sprintf("n%d/density%g/rows%d/positive%v", n, density, rpg, positive)
					rng := rand.New(rand.NewSource(int64(n + rpg)))
					// Scores: selected ones > 0 (some tiny); the rest 0, -0
					// or negative, which r > 0 must all reject.
					scores := make([]float32, n)
					var sel []int
					for i := range scores {
						if rng.Float64() < density {
							sel = append(sel, i)
							scores[i] = []float32{math.SmallestNonzeroFloat32, 1, 3.5}[rng.Intn(3)]
						} else {
							scores[i] = []float32{0, float32(math.Copysign(0, -1)), -2}[rng.Intn(3)]
						}
					}
					require.Equal(t, sel, routingNilIfEmpty(routingPositive(scores)))
					rec := dev.NewRecorder()
					idx := routingBuffer(t, dev, rec, n, 0xdeadbeef)
					count, args := routingBuffer(t, dev, rec, 1, 0xdeadbeef), routingBuffer(t, dev, rec, 3, 0xdeadbeef)
					push := vk.MustPackPush(CompactPush{N: uint32(n), RowsPerGroup: uint32(rpg)})
					var mask *vk.Buffer
					if positive {
						mask = routingBuffer(t, dev, rec, n, 7)
						rec.Dispatch(kPos, push, [3]uint32{1, 1, 1}, vk.Bind{Buf: newBuffer(t, dev, f32bytes(scores)), Access: vk.Read},
							vk.Bind{Buf: idx, Access: vk.Write}, vk.Bind{Buf: count, Access: vk.Write},
							vk.Bind{Buf: args, Access: vk.Write}, vk.Bind{Buf: mask, Access: vk.Write},
							vk.Bind{Buf: routingBuffer(t, dev, rec, 1, 0), Access: vk.ReadWrite}) // no rows (Cols 0): every score is finite
					} else {
						mask = newBuffer(t, dev, u32bytes(routingMask(sel, n)))
						rec.Dispatch(kMask, push, [3]uint32{1, 1, 1}, vk.Bind{Buf: mask, Access: vk.Read},
							vk.Bind{Buf: idx, Access: vk.Write}, vk.Bind{Buf: count, Access: vk.Write}, vk.Bind{Buf: args, Access: vk.Write})
					}
					require.NoError(t, dev.Run(rec), name)
					if err := routingExact(downloadU32(t, idx, len(sel)), routingU32(sel)); err != nil {
						t.Errorf("%s: idx: %v", name, err)
					}
					assert.Equal(t, []uint32{uint32(len(sel))}, downloadU32(t, count, 1), "%s: count", name)
					assert.Equal(t, routingArgs(len(sel), rpg), downloadU32(t, args, 3), "%s: indirect arguments", name)
					if err := routingExact(downloadU32(t, mask, n), routingMask(sel, n)); err != nil {
						t.Errorf("%s: mask: %v", name, err)
					}
					rec.Close()
				}
			}
		}
	}
}

// TestTopKPoisons: the top-k kernels that read the scores (the one-workgroup
// topk, and topk_sort of the multi-pass plan) set the row of x of each
// non-finite score (NaN, ±Inf) to NaN, as mod.PoisonRows, and leave the
// other rows alone; eval mode's NaN router cannot pass as a skip either.
func TestTopKPoisons(t *testing.T) {
	dev := openDevice(t)
	ks := newTopkKernels(t, dev)
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0xffc00001)}
	for _, n := range []int{300, 2049} { // 2049: topk_sort
		rng := rand.New(rand.NewSource(int64(n)))
		scores := topkScores("random", n, rng)
		for i := range scores {
			if rng.Intn(10) == 0 {
				scores[i] = bad[rng.Intn(len(bad))]
			}
		}
		const cols = 3
		x := make([]float32, n*cols)
		for i := range x {
			x[i] = float32(i%11) - 4.5
		}
		rec := dev.NewRecorder()
		b := newTopkBuffers(t, dev, rec, scores)
		b.x, b.cols = newBuffer(t, dev, f32bytes(x)), cols
		ks.record(rec, b, uint32(n), uint32(mod.TopK(0.25, n)))
		require.NoError(t, dev.Run(rec))
		mod.PoisonRows(x, scores, cols)
		got := download(t, b.x, n*cols)
		for i, v := range got {
			if math.IsNaN(float64(x[i])) != math.IsNaN(float64(v)) || (!math.IsNaN(float64(v)) && v != x[i]) {
				t.Errorf("n%d: x[%d] (score %g) = %g, want %g", n, i, scores[i/cols], v, x[i])
			}
		}
		rec.Close()
	}
}

// TestCompactDecisionBits feeds compact_positive crafted scores, every
// class a device may produce (denormals, which NVIDIA flushes to zero in
// float arithmetic, both zeros, NaNs of both signs, infinities), and wants
// mod.Selects' decision for each: selected iff the bits are in [1,
// 0x7f800000]. lavapipe keeps denormals, so a kernel comparing floats would
// pass here too; the kernel reads the scores as uint, and this test pins the
// rule on NaN and -0, where a float comparison and the bits could disagree.
// A non-finite score (NaN, ±Inf) also sets its row of x to NaN, as
// mod.PoisonRows does, and leaves every other row as it was.
func TestCompactDecisionBits(t *testing.T) {
	dev := openDevice(t)
	k := newKernel(t, dev, lookup(t, "compact_positive"))
	bits := []uint32{
		0x00000001, 0x00000002, 0x007fffff, 0x00800000, 0x3f800000, 0x7f7fffff, 0x7f800000, // > 0: denormals to +Inf
		0x00000000, 0x80000000, 0x80000001, 0x807fffff, 0xbf800000, 0xff800000, // +0, -0, negative denormals, -1, -Inf
		0x7f800001, 0x7fc00000, 0x7fffffff, 0xff800001, 0xffc00000, 0xffffffff, // NaNs of both signs
	}
	rng := rand.New(rand.NewSource(15))
	for _, n := range []int{len(bits), 300, 1000} { // 1000: several scores per invocation's run
		scores := make([]float32, n)
		for i := range scores {
			b := bits[i%len(bits)]
			if i >= len(bits) {
				b = bits[rng.Intn(len(bits))]
			}
			scores[i] = math.Float32frombits(b)
		}
		want := routingPositive(scores)
		rec := dev.NewRecorder()
		idx := routingBuffer(t, dev, rec, n, 0xdeadbeef)
		count, args := routingBuffer(t, dev, rec, 1, 0xdeadbeef), routingBuffer(t, dev, rec, 3, 0xdeadbeef)
		mask := routingBuffer(t, dev, rec, n, 7)
		const cols = 5
		x := make([]float32, n*cols)
		for i := range x {
			x[i] = float32(i%7) - 2.5
		}
		xb := newBuffer(t, dev, f32bytes(x))
		rec.Dispatch(k, vk.MustPackPush(CompactPush{N: uint32(n), RowsPerGroup: 1, Cols: cols}), [3]uint32{1, 1, 1},
			vk.Bind{Buf: newBuffer(t, dev, f32bytes(scores)), Access: vk.Read}, vk.Bind{Buf: idx, Access: vk.Write},
			vk.Bind{Buf: count, Access: vk.Write}, vk.Bind{Buf: args, Access: vk.Write}, vk.Bind{Buf: mask, Access: vk.Write},
			vk.Bind{Buf: xb, Access: vk.ReadWrite})
		require.NoError(t, dev.Run(rec))
		mod.PoisonRows(x, scores, cols)
		gotX := download(t, xb, n*cols)
		for i := range n {
			row, wantRow := gotX[i*cols:(i+1)*cols], x[i*cols:(i+1)*cols]
			if math.IsNaN(float64(wantRow[0])) {
				for _, v := range row {
					assert.True(t, math.IsNaN(float64(v)), "n%d: score %#08x: row %d %v, want NaN", n, math.Float32bits(scores[i]), i, row)
				}
			} else {
				assert.Equal(t, wantRow, row, "n%d: score %#08x: row %d", n, math.Float32bits(scores[i]), i)
			}
		}
		got := downloadU32(t, mask, n)
		for i, s := range scores {
			if (got[i] == 1) != mod.Selects(s) || got[i] > 1 {
				t.Errorf("n%d: score %#08x: mask %d, mod.Selects %v", n, math.Float32bits(s), got[i], mod.Selects(s))
			}
		}
		assert.Equal(t, []uint32{uint32(len(want))}, downloadU32(t, count, 1), "n%d: count", n)
		assert.NoError(t, routingExact(downloadU32(t, idx, len(want)), routingU32(want)), "n%d: idx", n)
		rec.Close()
	}
}

func routingNilIfEmpty(x []int) []int {
	if len(x) == 0 {
		return nil
	}
	return x
}

// TestCompactTable: compact_positive_table writes what compact_positive
// writes (the indices, the count, the mask, x's poisoned rows: the same
// words), and for arguments the m dispatches' row of the table for the
// count; n from 1 to past the workgroup's 256 invocations, none to all
// selected, non-finite scores among them, m of 1 and 9.
func TestCompactTable(t *testing.T) {
	dev := openDevice(t)
	kPos, kTab := newKernel(t, dev, lookup(t, "compact_positive")), newKernel(t, dev, lookup(t, "compact_positive_table"))
	const cols = 3
	for _, n := range routingSizes {
		for _, density := range []float64{0, 0.3, 1} {
			for _, m := range []int{1, 9} {
				name := fmt.Sprintf("n%d/density%g/m%d", n, density, m)
				rng := rand.New(rand.NewSource(int64(n*10 + m)))
				scores := make([]float32, n)
				for i := range scores {
					switch {
					case rng.Intn(17) == 0:
						scores[i] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[rng.Intn(3)]
					case rng.Float64() < density:
						scores[i] = []float32{math.SmallestNonzeroFloat32, 1, 3.5}[rng.Intn(3)]
					default:
						scores[i] = []float32{0, float32(math.Copysign(0, -1)), -2}[rng.Intn(3)]
					}
				}
				table := make([]uint32, (n+1)*m*3)
				for i := range table {
					table[i] = rng.Uint32()
				}
				x := make([]float32, n*cols)
				for i := range x {
					x[i] = float32(i%13) - 6
				}
				rec := dev.NewRecorder()
				scoresB, tableB := newBuffer(t, dev, f32bytes(scores)), newBuffer(t, dev, u32bytes(table))
				type outs struct{ idx, count, args, mask, x *vk.Buffer }
				run := func(k *vk.Kernel, tab bool) outs {
					o := outs{routingBuffer(t, dev, rec, n, 0xdeadbeef), routingBuffer(t, dev, rec, 1, 0xdeadbeef), routingBuffer(t, dev, rec, 3*m, 0xdeadbeef),
						routingBuffer(t, dev, rec, n, 7), newBuffer(t, dev, f32bytes(x))}
					binds := []vk.Bind{{Buf: scoresB, Access: vk.Read}, {Buf: o.idx, Access: vk.Write}, {Buf: o.count, Access: vk.Write},
						{Buf: o.args, Access: vk.Write}, {Buf: o.mask, Access: vk.Write}, {Buf: o.x, Access: vk.ReadWrite}}
					push := CompactPush{N: uint32(n), RowsPerGroup: 1, Cols: cols}
					if tab {
						push.M = uint32(m)
						binds = append(binds, vk.Bind{Buf: tableB, Access: vk.Read})
					}
					rec.Dispatch(k, vk.MustPackPush(push), [3]uint32{1, 1, 1}, binds...)
					return o
				}
				plain, tab := run(kPos, false), run(kTab, true)
				require.NoError(t, dev.Run(rec), name)
				rec.Close()
				count := downloadU32(t, plain.count, 1)
				assert.Equal(t, count, downloadU32(t, tab.count, 1), "%s: count", name)
				c := int(count[0])
				assert.Equal(t, downloadU32(t, plain.idx, c), downloadU32(t, tab.idx, c), "%s: idx", name)
				assert.Equal(t, downloadU32(t, plain.mask, n), downloadU32(t, tab.mask, n), "%s: mask", name)
				assert.Equal(t, downloadU32(t, plain.x, n*cols), downloadU32(t, tab.x, n*cols), "%s: x", name)
				assert.Equal(t, table[3*m*c:3*m*(c+1)], downloadU32(t, tab.args, 3*m), "%s: the table's row for the count", name)
			}
		}
	}
}

// TestGatherPos: gather_pos copies the selected rows as gather does
// (xs[j] = x[idx[j]]) and writes pos[j] = rowPos[idx[j]] for j < count;
// gather_pos_compact also ropePos[j] = counts[layer] + j; nothing past
// count (more workgroups than rows selected, rows longer than a
// workgroup).
func TestGatherPos(t *testing.T) {
	dev := openDevice(t)
	for _, compact := range []bool{false, true} {
		name := map[bool]string{false: "gather_pos", true: "gather_pos_compact"}[compact]
		k := newKernel(t, dev, lookup(t, name))
		for _, tc := range []struct{ n, count, cols int }{{1, 0, 3}, {1, 1, 3}, {5, 3, 70}, {64, 64, 8}, {200, 131, 130}} {
			rng := rand.New(rand.NewSource(int64(tc.n)))
			rowPos := make([]uint32, tc.n)
			for i := range rowPos {
				rowPos[i] = uint32(500 + 3*i)
			}
			perm := rng.Perm(tc.n)[:tc.count]
			sort.Ints(perm)
			idx := make([]uint32, tc.n)
			for j, i := range perm {
				idx[j] = uint32(i)
			}
			x := make([]float32, tc.n*tc.cols)
			for i := range x {
				x[i] = float32(i) + 0.5
			}
			counts := []uint32{7, 40, 9}
			const layer = 1
			rec := dev.NewRecorder()
			xs, pos, rpos := routingBuffer(t, dev, rec, tc.n*tc.cols, 0xdeadbeef), routingBuffer(t, dev, rec, tc.n, 0xdeadbeef), routingBuffer(t, dev, rec, tc.n, 0xdeadbeef)
			binds := []vk.Bind{denseBind(newBuffer(t, dev, u32bytes(idx)), vk.Read), denseBind(newBuffer(t, dev, u32bytes([]uint32{uint32(tc.count)})), vk.Read),
				denseBind(newBuffer(t, dev, f32bytes(x)), vk.Read), denseBind(xs, vk.Write), denseBind(newBuffer(t, dev, u32bytes(rowPos)), vk.Read), denseBind(pos, vk.Write)}
			if compact {
				binds = append(binds, denseBind(newBuffer(t, dev, u32bytes(counts)), vk.Read), denseBind(rpos, vk.Write))
			}
			rec.Dispatch(k, vk.MustPackPush(GatherPush{NEmbd: uint32(tc.cols), Layer: layer}), Groups(uint32(tc.n)), binds...)
			require.NoError(t, dev.Run(rec))
			rec.Close()
			wantXS, wantPos, wantRPos := decodeRepeat([]uint32{0xdeadbeef}, tc.n*tc.cols), decodeRepeat([]uint32{0xdeadbeef}, tc.n), decodeRepeat([]uint32{0xdeadbeef}, tc.n)
			for j, i := range perm {
				for e := range tc.cols {
					wantXS[j*tc.cols+e] = math.Float32bits(x[i*tc.cols+e])
				}
				wantPos[j] = rowPos[i]
				if compact {
					wantRPos[j] = counts[layer] + uint32(j)
				}
			}
			what := fmt.Sprintf("%s n%d count%d cols%d", name, tc.n, tc.count, tc.cols)
			assert.Equal(t, wantXS, downloadU32(t, xs, tc.n*tc.cols), "%s: xs", what)
			assert.Equal(t, wantPos, downloadU32(t, pos, tc.n), "%s: pos", what)
			assert.Equal(t, wantRPos, downloadU32(t, rpos, tc.n), "%s: ropePos", what)
		}
	}
}
