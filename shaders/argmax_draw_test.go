package shaders

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/internal/drawref"
	"github.com/modrun/modrun/vk"
)

// drawMargin is the least margin (drawref.Draw) of a draw whose token the test
// asks of the device: its float32 sums over 100,000 logits (a tree within
// a workgroup, running sums over invocations) are off by ~30 roundings of
// 6e-8 of z at the worst, a sixth of it.
const drawMargin = 1e-5

// centerOf is a uniform number that draws a token of row at temp at the
// middle of its interval, chosen at random among those whose interval
// holds 2*drawMargin of the total or more (the largest weight is 1/cols
// of the total at least: the rows here have one).
func centerOf(rng *rand.Rand, row []float32, temp float32) float64 {
	w, z := drawref.Weights(row, temp)
	var wide []int
	for j, x := range w {
		if x/z >= 2*drawMargin {
			wide = append(wide, j)
		}
	}
	return drawref.Middle(w, z, wide[rng.Intn(len(wide))])
}

// TestArgmaxWideDraw: argmax_wide's draw (a row with a temperature above
// 0) against drawref.Draw, over rows of one workgroup's columns or less, one
// more, and many (100,000 at [64 1]: 1,563 workgroups a row, more than a
// workgroup's invocations, so each invocation sums a run of blocks); rows
// of normal logits (sigma 3 and 1), a constant row (every interval the
// same), a peaked one (nearly all the weight on one token), a NaN
// (NONFINITE at any temperature) and a temperature-0 row beside them (the
// argmax); temperatures 0.3, 1 and 2. Each dispatch's rows take u at the
// middle of a random wide interval, 0 (the first token), 1 - 2^-20 or
// float32's largest below 1 (the last token);
// draws whose margin is below drawMargin are not asked (u at the middle
// of an interval always is, and the peaked row puts its peak where u = 0
// or near 1 draws it). Each case runs twice: done stays zero.
func TestArgmaxWideDraw(t *testing.T) {
	dev := openDevice(t)
	ks := denseKernels{dev: dev, v: lookup(t, "argmax_wide")}
	kh := denseKernels{dev: dev, v: lookup(t, "argmax_wide"+HandoffSuffix)}
	rng := rand.New(rand.NewSource(7))
	temps := []float32{0.3, 1, 2}
	asked, skipped := 0, 0
	for _, cols := range []int{1, 7, 1023, 1024, 1025, 32000, 100000} {
		for _, spec := range [][]uint32{ArgmaxWideSpec, {64, 1}, {32, 3}} {
			for _, handoff := range []bool{false, true} {
				if handoff && (cols == 100000 || spec[0] != ArgmaxWideSpec[0]) {
					continue // the hand-off wraps the same code: the step's spec
				}
				if cols == 100000 && spec[0] != 64 {
					continue
				}
				for mode := range 4 {
					name := fmt.Sprintf("spec%v/%d/handoff%t/u%d", spec, cols, handoff, mode)
					k := ks.get(t, spec)
					if handoff {
						k = kh.get(t, spec)
					}
					const n = 6
					x := make([]float32, 0, n*cols)
					draws := make([]ArgmaxDraw, n)
					want := make([]uint32, n)
					ask := make([]bool, n)
					for r := range n {
						row := denseNormals(rng, cols, 3)
						temp := temps[(r+mode)%len(temps)]
						switch r {
						case 1:
							row = denseNormals(rng, cols, 1)
						case 2:
							if cols <= 32000 { // 100,000 equal intervals are narrower than 2*drawMargin
								for j := range row {
									row[j] = 0.5
								}
							}
						case 3: // peaked; at u = 0 on the first column, near 1 on the last, so that the draw's interval is wide
							at := rng.Intn(cols)
							switch mode {
							case 1:
								at = 0
							case 2, 3:
								at = cols - 1
							}
							row[at] = 20
						}
						var u float64
						switch mode {
						case 0:
							u = centerOf(rng, row, temp)
						case 1:
							u = 0
						case 2:
							u = 1 - 1.0/(1<<20)
						case 3:
							u = float64(math.Nextafter32(1, 0))
						}
						draws[r] = ArgmaxDraw{Temp: temp, U: float32(u)}
						id, margin := drawref.Draw(row, temp, float64(float32(u)))
						want[r], ask[r] = uint32(id), margin >= drawMargin
						switch r {
						case 4:
							row[rng.Intn(cols)] = float32(math.NaN())
							want[r], ask[r] = ArgmaxNonFinite, true
						case 5:
							draws[r].Temp = 0
							want[r], ask[r] = uint32(argmaxOf(row)), true
						}
						if mode == 0 || r >= 3 {
							require.True(t, ask[r], "%s row %d: u at the middle of an interval, or a wide first or last one", name, r)
						}
						x = append(x, row...)
					}
					call := newArgmaxWideCall(t, dev, x, draws, cols, spec)
					out, done, groups := call.out, call.done, call.groups
					push, binds := withHandoff(t, dev, k, vk.MustPackPush(ArgmaxPush{Cols: uint32(cols), N: n}), groups, call.binds)
					for i := range 2 {
						rec := dev.NewRecorder()
						rec.Dispatch(k, push, groups, binds...)
						require.NoError(t, dev.Run(rec))
						rec.Close()
						got := downloadU32(t, out, n)
						for r := range n {
							if !ask[r] {
								if i == 0 {
									skipped++
								}
								continue
							}
							if i == 0 {
								asked++
							}
							assert.Equal(t, want[r], got[r], "%s run %d row %d: T %g u %.9g", name, i, r, draws[r].Temp, draws[r].U)
						}
						assert.Equal(t, make([]uint32, n), downloadU32(t, done, n), "%s run %d: done left at zero", name, i)
					}
				}
			}
		}
	}
	t.Logf("%d draws asked, %d left with a margin under %g", asked, skipped, drawMargin)
}

// argmaxWideCall is a dispatch of argmax_wide over the rows x of cols
// with their draw parameters: its bindings and grid, and the buffers to
// read back (out, done).
type argmaxWideCall struct {
	binds     []vk.Bind
	out, done *vk.Buffer
	groups    [3]uint32
}

func newArgmaxWideCall(t *testing.T, dev *vk.Device, x []float32, draws []ArgmaxDraw, cols int, spec []uint32) argmaxWideCall {
	t.Helper()
	n := len(draws)
	c := argmaxWideCall{out: newBuffer(t, dev, make([]byte, 4*n)), done: newBuffer(t, dev, make([]byte, 4*n)),
		groups: ArgmaxWideGroups(uint32(n), uint32(cols), spec)}
	part := denseNaNBuffer(t, dev, int(ArgmaxWidePartWords(uint32(n), uint32(cols), spec)))
	c.binds = []vk.Bind{denseBind(newBuffer(t, dev, f32bytes(x)), vk.Read), denseBind(c.out, vk.Write), denseBind(part, vk.ReadWrite),
		denseBind(c.done, vk.ReadWrite), denseBind(newBuffer(t, dev, ArgmaxDrawBytes(draws)), vk.Read)}
	return c
}

// argmaxOf is the first index of row's largest value.
func argmaxOf(row []float32) int {
	best := 0
	for j, v := range row {
		if v > row[best] {
			best = j
		}
	}
	return best
}

// TestArgmaxWideFallback: argmax_wide failing its self-check on a GPU
// falls back to argmax (ArgmaxRow), a head that does not draw, and there
// is nothing past that; a CPU device's profile never takes argmax_wide.
func TestArgmaxWideFallback(t *testing.T) {
	gpu := GPUProfile(lavapipeProfile.Device)
	require.Equal(t, "argmax_wide", gpu.Head()[len(gpu.Head())-1].Variant)
	fb, safe, ok := gpu.Fallback(lookup(t, "argmax_wide"))
	require.True(t, ok)
	assert.Contains(t, safe, "argmax")
	assert.True(t, fb.ArgmaxRow)
	assert.Equal(t, "argmax", fb.Head()[len(fb.Head())-1].Variant)
	_, _, ok = fb.Fallback(lookup(t, "argmax_wide"))
	assert.False(t, ok, "no second fallback")
	_, _, ok = NewProfile(lavapipeProfile.Device).Fallback(lookup(t, "argmax_wide"))
	assert.False(t, ok, "a CPU device's head is argmax already")
}

// TestArgmaxWideFilters: argmax_wide's draw with top-p
// (ArgmaxDraw.WithTopP) and min-p (WithMinP), alone and together, against
// drawref.DrawFiltered: rows of normal logits (sigma 3 and 1) at top-p
// 0.9, 0.5 and 0.95 (the last with min-p 0.05), a row of ties (logits of 8
// values: the cut's equals are all kept) at top-p 0.7, a row of logits in
// [8, 16) at top-p 0.5 (the search's candidates, one exponent's, overflow
// its list before they fit in it), rows at min-p 0.05,
// 0.3 and 1 (only the best, and its twin, kept), beside a plain draw and
// an argmax row in the same dispatch, over one workgroup's columns or
// less, one more, 32,000 and 100,000; u at the middle of a random wide
// kept interval, 0 (the first kept token) and float32's largest below 1
// (the last kept token: a u*z past the kept total takes it, not the
// row's last column). Draws within float32's rounding of an interval's
// end, of top-p's crossing or of min-p's floor are not asked.
func TestArgmaxWideFilters(t *testing.T) {
	dev := openDevice(t)
	ks := denseKernels{dev: dev, v: lookup(t, "argmax_wide")}
	rng := rand.New(rand.NewSource(13))
	asked, skipped, moved := 0, 0, 0
	argmaxWideGrid(t, &ks, []int{7, 1023, 1025, 32000, 100000}, func(cols int, spec []uint32, k *vk.Kernel, mode int, name string) {
		const n = 10
		var rows argmaxWideRows
		for r := range n {
			row := denseNormals(rng, cols, 3)
			temp := []float32{0.7, 1, 1.5}[(r+mode)%3]
			topP, minP := []float32{0.9, 0.5, 0.95, 0.7, 0, 0, 0, 0.5, 0, 0}[r], []float32{0, 0, 0.05, 0, 0.05, 0.3, 1, 0, 0, 0}[r]
			switch r {
			case 1, 5:
				row = denseNormals(rng, cols, 1)
			case 3:
				for j := range row {
					row[j] = float32(rng.Intn(8)) / 2
				}
			case 6: // min-p 1 keeps the best, and its twin
				a, b := rng.Intn(cols), rng.Intn(cols)
				row[a], row[b] = 12, 12
			case 7: // one float exponent: the search's list of candidates overflows before it fits
				for j := range row {
					row[j] = 8 + 8*rng.Float32()
				}
			}
			id, u := rows.add(rng, row, temp, 0, topP, minP, mode, r == n-1)
			if plain, _ := drawref.Draw(row, temp, u); plain != id {
				moved++
			}
		}
		a, sk := checkArgmaxWideRuns(t, dev, k, name, rows.x, rows.draws, rows.want, rows.ask, cols, spec)
		asked, skipped = asked+a, skipped+sk
	})
	t.Logf("%d draws asked, %d left with a margin under %g; the filters moved %d draws", asked, skipped, drawMargin, moved)
	assert.Greater(t, asked, 2*skipped, "most draws asked")
	assert.Positive(t, moved, "the filters moved draws")
}

// TestArgmaxWideTopK: argmax_wide's draw with top-k (ArgmaxDraw.WithTopK),
// alone and before top-p and min-p, against drawref.DrawTopK: rows of
// normal logits at k 40, 2, 5 and cols-1; rows of ties (logits of 8
// values, and a constant row) where the TopK-th place falls among equal
// logits, so that only the first of them by id are kept (alone, and with
// top-p among the kept ones); k 1 with the largest logit twice (only the
// lower id kept); a row in one float exponent at k 300 (the search's list
// overflows); k at and past the columns (no top-k); beside an argmax row,
// over 7, 1,025, 32,000 and 100,000 columns; u at the middle of a random
// wide kept interval, 0 (the first kept token) and float32's largest
// below 1 (the last kept token). Draws within float32's rounding of an
// interval's end or of top-p's crossing are not asked; top-k's own cut is
// a count, exact, so every tie case is asked.
func TestArgmaxWideTopK(t *testing.T) {
	dev := openDevice(t)
	ks := denseKernels{dev: dev, v: lookup(t, "argmax_wide")}
	rng := rand.New(rand.NewSource(29))
	asked, skipped, moved, straddled := 0, 0, 0, 0
	argmaxWideGrid(t, &ks, []int{7, 1025, 32000, 100000}, func(cols int, spec []uint32, k *vk.Kernel, mode int, name string) {
		const n = 12
		var rows argmaxWideRows
		for r := range n {
			row := denseNormals(rng, cols, 3)
			temp := []float32{0.7, 1, 1.5}[(r+mode)%3]
			topK := []int{40, 40, 2, cols / 3, cols / 2, 1, cols - 1, cols, 300, 5, cols/2 + 1, 0}[r]
			topP := []float32{0, 0.9, 0.5, 0, 0.7, 0, 0.95, 0.9, 0.5, 0, 0.3, 0}[r]
			minP := []float32{0, 0, 0.05, 0, 0, 0, 0, 0, 0, 0.3, 0, 0}[r]
			switch r {
			case 1:
				row = denseNormals(rng, cols, 1)
			case 3, 4:
				for j := range row {
					row[j] = float32(rng.Intn(8)) / 2
				}
			case 5: // the best twice: k 1 keeps the lower id
				a := rng.Intn(cols)
				b := (a + 1 + rng.Intn(cols-1)) % cols
				row[a], row[b] = 12, 12
			case 7:
				topK += mode // at and past the columns: no top-k
			case 8:
				for j := range row {
					row[j] = 8 + 8*rng.Float32()
				}
			case 10:
				for j := range row {
					row[j] = 0.5
				}
			}
			if topK > 0 && topK < cols && drawref.TopKMargin(row, topK) == 0 {
				straddled++
			}
			id, u := rows.add(rng, row, temp, topK, topP, minP, mode, r == n-1)
			if plain, _ := drawref.DrawFiltered(row, temp, topP, minP, u); plain != id {
				moved++
			}
		}
		a, sk := checkArgmaxWideRuns(t, dev, k, name, rows.x, rows.draws, rows.want, rows.ask, cols, spec)
		asked, skipped = asked+a, skipped+sk
	})
	t.Logf("%d draws asked, %d left with a margin under %g; top-k moved %d draws; %d rows' TopK-th place among ties", asked, skipped, drawMargin, moved, straddled)
	assert.Greater(t, asked, 3*skipped, "most draws asked")
	assert.Positive(t, moved, "top-k moved draws")
	assert.GreaterOrEqual(t, straddled, 4*3*3, "rows 3, 4, 5 and 10 put the TopK-th place among ties")
}

// checkArgmaxWideRuns dispatches argmax_wide kernel k twice over the rows
// x with draws and asks each row r with ask[r] for want[r] (the others
// counted skipped); done stays zero after each run.
func checkArgmaxWideRuns(t *testing.T, dev *vk.Device, k *vk.Kernel, name string, x []float32, draws []ArgmaxDraw, want []uint32, ask []bool, cols int, spec []uint32) (asked, skipped int) {
	t.Helper()
	n := len(draws)
	call := newArgmaxWideCall(t, dev, x, draws, cols, spec)
	for i := range 2 {
		rec := dev.NewRecorder()
		rec.Dispatch(k, vk.MustPackPush(ArgmaxPush{Cols: uint32(cols), N: uint32(n)}), call.groups, call.binds...)
		require.NoError(t, dev.Run(rec))
		rec.Close()
		got := downloadU32(t, call.out, n)
		for r := range n {
			if !ask[r] {
				skipped++
				continue
			}
			asked++
			d := draws[r]
			assert.Equal(t, want[r], got[r], "%s run %d row %d: T %g top-k %g top-p %g min-p %g u %.9g", name, i, r, d.Temp, d.TopK, d.TopP, d.MinP, d.U)
		}
		assert.Equal(t, make([]uint32, n), downloadU32(t, call.done, n), "%s run %d: done left at zero", name, i)
	}
	return asked, skipped
}

// argmaxWideGrid calls f for each of cols at argmax_wide's spec ([64 1]
// at 100,000 columns) and each u mode 0-2, with the kernel and a name.
func argmaxWideGrid(t *testing.T, ks *denseKernels, cols []int, f func(cols int, spec []uint32, k *vk.Kernel, mode int, name string)) {
	for _, c := range cols {
		spec := ArgmaxWideSpec
		if c == 100000 {
			spec = []uint32{64, 1}
		}
		k := ks.get(t, spec)
		for mode := range 3 {
			f(c, spec, k, mode, fmt.Sprintf("spec%v/%d/u%d", spec, c, mode))
		}
	}
}

// modeU is the uniform number of u mode mode for weights w of total z:
// 0 the middle of a random interval holding 2*drawMargin of z or more
// (0.5 where none does), 1 zero (the first kept token), 2 float32's
// largest below 1 (the last kept token).
func modeU(rng *rand.Rand, w []float64, z float64, mode int) float64 {
	switch mode {
	case 0:
		var wide []int
		for j, v := range w {
			if v/z >= 2*drawMargin {
				wide = append(wide, j)
			}
		}
		if len(wide) > 0 {
			return drawref.Middle(w, z, wide[rng.Intn(len(wide))])
		}
		return 0.5
	case 1:
		return 0
	}
	return float64(math.Nextafter32(1, 0))
}

// argmaxWideRows are rows of logits for argmax_wide, each with its draw
// and what it asks of the device.
type argmaxWideRows struct {
	x     []float32
	draws []ArgmaxDraw
	want  []uint32
	ask   []bool
}

// add appends row, drawn at temp with the filters and u mode mode
// (modeU), asking drawref.DrawTopK's token where its margin is
// drawMargin or more; with argmax, the row's argmax instead. It returns
// the draw's token and u (as float32 has it).
func (rs *argmaxWideRows) add(rng *rand.Rand, row []float32, temp float32, topK int, topP, minP float32, mode int, argmax bool) (int, float64) {
	w, z := drawref.WeightsTopK(row, temp, topK, topP, minP)
	d := DrawAt(temp, modeU(rng, w, z, mode)).WithTopK(topK).WithTopP(topP).WithMinP(minP)
	id, margin := drawref.DrawTopK(row, temp, topK, topP, minP, float64(d.U))
	want, ask, u := uint32(id), margin >= drawMargin, float64(d.U)
	if argmax {
		d, want, ask = ArgmaxDraw{}, uint32(argmaxOf(row)), true
	}
	rs.x = append(rs.x, row...)
	rs.draws, rs.want, rs.ask = append(rs.draws, d), append(rs.want, want), append(rs.ask, ask)
	return id, u
}
