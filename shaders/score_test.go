package shaders

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand"
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of router_score and route_decode (the MoD scores at any width)
// against mod's CPU reference, with each reduction forced: the
// shared-memory tree, and subgroupAdd where the device has subgroup
// arithmetic (lavapipe does, with subgroups of 8).

// scoreWidths are row lengths: ragged ones, a 1.1B model's 2048, and widths
// whose one-invocation loop would pass lavapipe's cap (65535 iterations).
var scoreWidths = []int{7, 64, 288, 1000, 2048, 2050}

func scoreDevice(dev *vk.Device) ScoreDevice {
	info := dev.Info()
	l := info.Limits
	return ScoreDevice{CPU: info.Type == vk.CPU, SubgroupSize: DispatchSubgroupSize(info.VendorID, l.SubgroupSize, l.MinSubgroupSize, l.MaxSubgroupSize),
		SubgroupArithmetic: info.Features.SubgroupArithmetic}
}

// dotTolerance bounds the rounding of a dot product of cols terms, relative
// to the sum of their absolute values, on both sides: the CPU (mod dotF32:
// four partial sums of cols/4 terms, then two adds) and the GPU (tpr
// partials of ceil(cols/tpr) terms, then a reduction of depth log2(tpr)+1
// at most, and the bias). Each add can lose half an ulp, 2^-24 of the
// running sum: the classic first-order bound (n-1)u for n terms, taken for
// each order. It is a worst case; the errors seen are far smaller.
func dotTolerance(cols, tpr int) float64 {
	cpu := cols/4 + cols%4 + 3
	gpu := (cols+tpr-1)/tpr + bits.Len(uint(tpr)) + 2
	return float64(cpu+gpu) * 0x1p-24
}

// scoreSpecs are the (variant, [workgroup size, invocations per dot]) to
// force: each reduction with one invocation per dot, a subgroup's worth, a
// workgroup's, and for the tree a ragged 7 of 56. The subgroup ones are
// skipped on a device without subgroup arithmetic (or not of 8).
var scoreSpecs = []struct {
	variant string
	spec    []uint32
}{
	{"router_score", []uint32{64, 1}},
	{"router_score", []uint32{56, 7}},
	{"router_score", []uint32{64, 64}},
	{"router_score", []uint32{256, 256}},
	{"router_score_sg", []uint32{64, 8}},
	{"router_score_sg", []uint32{64, 64}},
	{"router_score_sg", []uint32{256, 256}},
}

// usable says whether the variant can run on dev with spec (the subgroup
// variant needs subgroup arithmetic and whole subgroups per dot product),
// and whether the loop stays under lavapipe's cap for rows of cols.
func scoreUsable(dev *vk.Device, variant string, spec []uint32, cols int) bool {
	sd := scoreDevice(dev)
	if variant == "router_score_sg" && (!sd.subgroupOK() || spec[1]%sd.SubgroupSize != 0) {
		return false
	}
	return !sd.CPU || ScoreLoopIterations(uint32(cols), spec[1]) <= LavapipeLoopIterations
}

// runScore dispatches router_score once over n tokens and rows rows of cols
// and returns y [n][rows].
func runScore(t testing.TB, dev *vk.Device, k *vk.Kernel, spec []uint32, push RouterPush, w, bias, x []float32) []float32 {
	t.Helper()
	n := int(push.N * push.Rows)
	wb, bb, xb := newBuffer(t, dev, f32bytes(w)), newBuffer(t, dev, f32bytes(bias)), newBuffer(t, dev, f32bytes(x))
	rec := dev.NewRecorder()
	defer rec.Close()
	yb := routingBuffer(t, dev, rec, n, 0x7fc00000) // NaN: a dot the kernel skips shows
	per := spec[0] / spec[1]
	rec.Dispatch(k, vk.MustPackPush(push), Groups((uint32(n)+per-1)/per), vk.Bind{Buf: wb, Access: vk.Read},
		vk.Bind{Buf: bb, Access: vk.Read}, vk.Bind{Buf: xb, Access: vk.Read}, vk.Bind{Buf: yb, Access: vk.Write})
	require.NoError(t, dev.Run(rec))
	return download(t, yb, n)
}

func TestRouterScore(t *testing.T) {
	dev := openDevice(t)
	for _, sc := range scoreSpecs {
		k := newKernel(t, dev, lookup(t, sc.variant), sc.spec...)
		for _, n := range []int{1, 2, 37, 513} {
			for _, d := range scoreWidths {
				if !scoreUsable(dev, sc.variant, sc.spec, d) || (n == 513 && sc.spec[1] > 64) {
					continue
				}
				withBias := n%2 == 1
				name := fmt.Sprintf("%s%v/n%d/d%d/bias%v", sc.variant, sc.spec, n, d, withBias)
				rng := rand.New(rand.NewSource(int64(n*1000 + d)))
				w, x := routingNormal(rng, d, 0.1), routingNormal(rng, n*d, 1)
				b := float32(rng.NormFloat64())
				var bias *float32
				hasBias := uint32(0)
				if withBias {
					bias, hasBias = &b, 1
				}
				_, want, scale := routerRef(t, w, x, bias, n, d)
				got := runScore(t, dev, k, sc.spec, RouterPush{N: uint32(n), Rows: 1, Cols: uint32(d), HasBias: hasBias}, w, []float32{b}, x)
				if err := closeness(got, want, scale, dotTolerance(d, int(sc.spec[1]))); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		}
	}
}

// TestPredictorScore checks the predictor's two steps, each against the
// CPU: the hidden layer h = SiLU(W1 x) (router_score with RouterActSiLU,
// W1 [d/2][d]), then p = w2 . h from the GPU's h (router_score again), so
// each step's tolerance is its own. SiLU adds GLSL's exp error (3+2|a| ulp,
// |a| < 5 here) and the division's 2.5 ulp: 2e-6 of |a| <= the scale; its
// slope (< 1.1) carries the dot product's error.
func TestPredictorScore(t *testing.T) {
	dev := openDevice(t)
	for _, sc := range scoreSpecs {
		k := newKernel(t, dev, lookup(t, sc.variant), sc.spec...)
		for _, n := range []int{1, 3} {
			for _, d := range []int{8, 36, 1000, 2048, 2050} {
				h := d / 2
				if !scoreUsable(dev, sc.variant, sc.spec, d) {
					continue
				}
				name := fmt.Sprintf("%s%v/n%d/d%d/h%d", sc.variant, sc.spec, n, d, h)
				rng := rand.New(rand.NewSource(int64(n*100 + d)))
				w1, w2, x := routingNormal(rng, h*d, 1/math.Sqrt(float64(d))), routingNormal(rng, h, 1), routingNormal(rng, n*d, 1)
				up := routingMat(t, "mod_pred_up.weight", h, d, w1)
				want, scale := make([]float64, n*h), make([]float64, n*h)
				for i := 0; i < n; i++ {
					xi := x[i*d : (i+1)*d]
					for j := 0; j < h; j++ {
						want[i*h+j] = float64(mod.SiLU(up.Dot(j, xi)))
						for e, v := range xi {
							scale[i*h+j] += math.Abs(float64(w1[j*d+e] * v))
						}
					}
				}
				hid := runScore(t, dev, k, sc.spec, RouterPush{N: uint32(n), Rows: uint32(h), Cols: uint32(d), Act: RouterActSiLU}, w1, []float32{0}, x)
				if err := closeness(hid, want, scale, 1.1*dotTolerance(d, int(sc.spec[1]))+2e-6); err != nil {
					t.Errorf("%s: hidden: %v", name, err)
				}
				if !scoreUsable(dev, sc.variant, sc.spec, h) {
					continue
				}
				_, pWant, pScale := routerRef(t, w2, hid, nil, n, h)
				p := runScore(t, dev, k, sc.spec, RouterPush{N: uint32(n), Rows: 1, Cols: uint32(h)}, w2, []float32{0}, hid)
				if err := closeness(p, pWant, pScale, dotTolerance(h, int(sc.spec[1]))); err != nil {
					t.Errorf("%s: score: %v", name, err)
				}
			}
		}
	}
}

// TestPlanScore: at every width up to mod's limit, the plan keeps each
// invocation under lavapipe's loop cap on a CPU device, divides its
// workgroup, uses the subgroup variant only with whole subgroups per dot,
// and its grid covers every dot product.
func TestPlanScore(t *testing.T) {
	devs := []ScoreDevice{
		{CPU: true, SubgroupSize: 8, SubgroupArithmetic: true},
		{CPU: true},
		{SubgroupSize: 32, SubgroupArithmetic: true},
		{SubgroupSize: 64, SubgroupArithmetic: true},
		{SubgroupSize: 16},
	}
	for _, dev := range devs {
		for _, cols := range []uint32{1, 7, 2048, 65535, 65536, 1 << 18} {
			for _, shape := range [][2]uint32{{1, 1}, {1, cols / 2}, {512, 1}, {70000, 1}} {
				n, rows := shape[0], max(shape[1], 1)
				for _, sg := range []bool{false, true} {
					p := PlanScore(dev, n, rows, cols, sg)
					name := fmt.Sprintf("%+v/n%d/rows%d/cols%d/sg%v: %+v", dev, n, rows, cols, sg, p)
					wg, tpr := p.Spec[0], p.Spec[1]
					assert.Zero(t, wg%tpr, name)
					if dev.CPU {
						assert.LessOrEqual(t, ScoreLoopIterations(cols, tpr), uint32(LavapipeLoopIterations), name)
					}
					if p.Variant == "router_score_sg" {
						assert.True(t, sg && dev.SubgroupArithmetic, name)
						assert.Zero(t, tpr%dev.SubgroupSize, name)
					}
					groups := uint64(p.Groups[0]) * uint64(p.Groups[1]) * uint64(p.Groups[2])
					assert.GreaterOrEqual(t, groups*uint64(wg/tpr), uint64(n)*uint64(rows), name)
					assert.LessOrEqual(t, p.Groups[0], uint32(MaxGroupsX), name)
				}
			}
		}
	}
}

// routeDecodeCase is one token through route_decode.
type routeDecodeCase struct {
	name       string
	w, x       []float32 // [d]
	bias       *float32
	w2, h      []float32 // [predHidden]: predictor routing when non-nil
	pbias      *float32  // the predictor's bias (a linear predictor's), or none
	wantSelect *bool     // when set, the decision the crafted scores force
}

// TestRouteDecode runs route_decode (each variant and reduction) on random
// tokens at ragged and large widths and on crafted scores, against the CPU:
// r (and p) within dotTolerance; the decision mod.Selects makes of the CPU's
// score, unless that score is within the tolerance of 0; count, the block's
// indirect arguments (its table when selected, (0, 1, 1) else) and xs = x
// exact.
func TestRouteDecode(t *testing.T) {
	dev := openDevice(t)
	sd := scoreDevice(dev)
	f := math.Float32frombits
	yes, no := true, false
	var cases []routeDecodeCase
	rng := rand.New(rand.NewSource(7))
	for _, d := range scoreWidths {
		for rep := 0; rep < 3; rep++ {
			b := float32(rng.NormFloat64()) * 0.1
			c := routeDecodeCase{name: fmt.Sprintf("random/d%d/%d", d, rep), w: routingNormal(rng, d, 1/math.Sqrt(float64(d))),
				x: routingNormal(rng, d, 1), bias: &b}
			if rep == 2 {
				c.bias = nil
			}
			cases = append(cases, c)
			h := d / 2
			if h > 0 {
				cases = append(cases, routeDecodeCase{name: fmt.Sprintf("random-pred/d%d/%d", d, rep), w: c.w, x: c.x, bias: c.bias,
					w2: routingNormal(rng, h, 1), h: routingNormal(rng, h, 1)})
			}
			// A linear predictor (mod.PredictorLinear): p = w2 . x + b.
			pb := float32(rng.NormFloat64() * 0.5)
			cases = append(cases, routeDecodeCase{name: fmt.Sprintf("random-linear/d%d/%d", d, rep), w: c.w, x: c.x, bias: c.bias,
				w2: routingNormal(rng, d, 1/math.Sqrt(float64(d))), h: c.x, pbias: &pb})
		}
	}
	// Crafted: w = 0 makes r = +0 + bias, bit for bit; w2 = (1, 0, ...) makes
	// p = h[0]. A denormal selects (NVIDIA would flush it in a float
	// comparison), ±0 and NaN never do.
	for _, sc := range []struct {
		name string
		bits uint32
		sel  bool
	}{{"denormal", 1, true}, {"-denormal", 0x80000001, false}, {"+0", 0, false}, {"-0", 0x80000000, false},
		{"NaN", 0x7fc00000, false}, {"-NaN", 0xffc00000, false}, {"+Inf", 0x7f800000, true}, {"-Inf", 0xff800000, false}, {"one", 0x3f800000, true}} {
		want := &no
		if sc.sel {
			want = &yes
		}
		b := f(sc.bits)
		d := 300
		cases = append(cases, routeDecodeCase{name: "crafted-r/" + sc.name, w: make([]float32, d), x: routingNormal(rng, d, 1),
			bias: &b, wantSelect: want})
		h := make([]float32, 150)
		w2 := make([]float32, 150)
		h[0], w2[0] = b, 1
		one := float32(1)
		cases = append(cases, routeDecodeCase{name: "crafted-p/" + sc.name, w: make([]float32, d), x: routingNormal(rng, d, 1),
			bias: &one, w2: w2, h: h, wantSelect: want})
	}
	groupsTable := []uint32{3, 1, 1, 1, 1, 1, 7, 2, 1, 65535, 1, 1, 1, 1, 1} // m = 5
	for _, sg := range []bool{false, true} {
		if sg && !sd.subgroupOK() {
			t.Logf("no subgroup arithmetic: the _sg variants are not run")
			continue
		}
		for _, wg := range []uint32{64, 256} {
			ks := map[bool]*vk.Kernel{}
			for _, pred := range []bool{false, true} {
				ks[pred] = newKernel(t, dev, lookup(t, RouteDecodeVariant(sd, pred, sg)), wg)
			}
			for _, c := range cases {
				name := fmt.Sprintf("sg%v/wg%d/%s", sg, wg, c.name)
				c.run(t, dev, ks[c.h != nil], name, wg, groupsTable)
			}
		}
	}
}

func (c routeDecodeCase) run(t *testing.T, dev *vk.Device, k *vk.Kernel, name string, wg uint32, groupsTable []uint32) {
	d := len(c.x)
	bias, hasBias := []float32{0}, uint32(0)
	if c.bias != nil {
		bias, hasBias = []float32{*c.bias}, 1
	}
	// The CPU's scores: r as mod's routedBlock, p as mod's predict after the hidden layer.
	rCPU, rWant, rScale := routerRef(t, c.w, c.x, c.bias, 1, d)
	score, scoreWant, scoreScale, tol := rCPU[0], rWant, rScale, dotTolerance(d, int(wg))
	pred := c.h != nil
	if pred {
		var pCPU []float32
		pCPU, scoreWant, scoreScale = routerRef(t, c.w2, c.h, c.pbias, 1, len(c.h))
		score, tol = pCPU[0], dotTolerance(len(c.h), int(wg))
	}
	rec := dev.NewRecorder()
	defer rec.Close()
	m := len(groupsTable) / 3
	xs, r := routingBuffer(t, dev, rec, d, 0x7fc00000), routingBuffer(t, dev, rec, 1, 0x7fc00000)
	count, args := routingBuffer(t, dev, rec, 1, 0xdeadbeef), routingBuffer(t, dev, rec, 3*m, 0xdeadbeef)
	x := newBuffer(t, dev, f32bytes(c.x))
	binds := []vk.Bind{{Buf: newBuffer(t, dev, f32bytes(c.w)), Access: vk.Read}, {Buf: newBuffer(t, dev, f32bytes(bias)), Access: vk.Read},
		{Buf: x, Access: vk.ReadWrite}, {Buf: xs, Access: vk.Write}, {Buf: r, Access: vk.Write},
		{Buf: count, Access: vk.Write}, {Buf: newBuffer(t, dev, u32bytes(groupsTable)), Access: vk.Read}, {Buf: args, Access: vk.Write}}
	push := RouteDecodePush{NEmbd: uint32(d), HasBias: hasBias, M: uint32(m)}
	var p *vk.Buffer
	if pred {
		p = routingBuffer(t, dev, rec, 1, 0x7fc00000)
		push.PredHidden = uint32(len(c.h))
		pb := []float32{0}
		if c.pbias != nil {
			pb, push.PredBias = []float32{*c.pbias}, 1
		}
		binds = append(binds, vk.Bind{Buf: newBuffer(t, dev, f32bytes(c.h)), Access: vk.Read},
			vk.Bind{Buf: newBuffer(t, dev, f32bytes(c.w2)), Access: vk.Read}, vk.Bind{Buf: p, Access: vk.Write},
			vk.Bind{Buf: newBuffer(t, dev, f32bytes(pb)), Access: vk.Read})
	}
	rec.Dispatch(k, vk.MustPackPush(push), [3]uint32{1, 1, 1}, binds...)
	require.NoError(t, dev.Run(rec), name)

	rGot := download(t, r, 1)
	if c.wantSelect == nil || !pred { // crafted r is exact; random r within rounding
		if err := closeness(rGot, rWant, rScale, dotTolerance(d, int(wg))); err != nil && !(math.IsNaN(rWant[0]) && math.IsNaN(float64(rGot[0]))) {
			t.Errorf("%s: r: %v", name, err)
		}
	}
	gotScore := rGot[0]
	if pred {
		gotScore = download(t, p, 1)[0]
		if err := closeness([]float32{gotScore}, scoreWant, scoreScale, tol); err != nil && !(math.IsNaN(scoreWant[0]) && math.IsNaN(float64(gotScore))) {
			t.Errorf("%s: p: %v", name, err)
		}
	}
	sel := mod.Selects(score)
	if c.wantSelect != nil {
		require.Equal(t, *c.wantSelect, sel, "%s: the crafted score's decision on the CPU", name)
		if math.IsNaN(float64(score)) { // a NaN's payload and sign may change in an add; it stays a NaN
			assert.True(t, math.IsNaN(float64(gotScore)), "%s: a crafted NaN stays NaN, got %g", name, gotScore)
		} else {
			assert.Equal(t, math.Float32bits(score), math.Float32bits(gotScore), "%s: a crafted score is exact", name)
		}
	} else if math.Abs(float64(score)) <= tol*scoreScale[0] {
		sel = mod.Selects(gotScore) // within rounding of 0: either decision is right
	}
	wantCount, wantArgs := uint32(0), make([]uint32, 3*m)
	for j := 0; j < m; j++ {
		wantArgs[3*j], wantArgs[3*j+1], wantArgs[3*j+2] = 0, 1, 1
	}
	if sel {
		wantCount, wantArgs = 1, groupsTable
	}
	assert.Equal(t, []uint32{wantCount}, downloadU32(t, count, 1), "%s: count (score %g, GPU %g)", name, score, gotScore)
	assert.Equal(t, wantArgs, downloadU32(t, args, 3*m), "%s: indirect arguments", name)
	if mod.Poisons(score) { // the skip path must not hide a broken score: x and xs become NaN (mod.PoisonRows)
		for what, got := range map[string][]float32{"x": download(t, x, d), "xs": download(t, xs, d)} {
			for e, v := range got {
				if !math.IsNaN(float64(v)) {
					t.Errorf("%s: score %g: %s[%d] = %g, want NaN", name, score, what, e, v)
					break
				}
			}
		}
		return
	}
	assert.Equal(t, f32bytes(c.x), f32bytes(download(t, xs, d)), "%s: xs = x", name)
	assert.Equal(t, f32bytes(c.x), f32bytes(download(t, x, d)), "%s: x unchanged", name)
}

// BenchmarkScores times one decode token's routing scores at d = 2048 (a
// 1.1B model's width) as the decode step runs them, each checked first:
// the router score alone (router_score as planned, and route_decode, which
// also decides, writes the block's arguments and copies x), and the
// predictor (the hidden layer, W1 2048x1024, then route_decode_pred). Each
// Run replays perRun of them so the submit cost is spread.
func BenchmarkScores(b *testing.B) {
	dev := openDeviceWith(b, vk.InstanceOptions{})
	sd := scoreDevice(dev)
	const d, h, perRun = 2048, 1024, 8
	rng := rand.New(rand.NewSource(1))
	w, w1, w2, x := routingNormal(rng, d, 0.03), routingNormal(rng, h*d, 0.03), routingNormal(rng, h, 1), routingNormal(rng, d, 1)
	wb, w1b, w2b, xb := newBuffer(b, dev, f32bytes(w)), newBuffer(b, dev, f32bytes(w1)), newBuffer(b, dev, f32bytes(w2)), newBuffer(b, dev, f32bytes(x))
	bias := newBuffer(b, dev, f32bytes([]float32{0.1}))
	groups := newBuffer(b, dev, u32bytes(make([]uint32, 3*12)))
	out, hid, xs := routingBuffer(b, dev, nil, 1, 0), routingBuffer(b, dev, nil, h, 0), routingBuffer(b, dev, nil, d, 0)
	count, args, p := routingBuffer(b, dev, nil, 1, 0), routingBuffer(b, dev, nil, 3*12, 0), routingBuffer(b, dev, nil, 1, 0)
	_, rWant, rScale := routerRef(b, w, x, nil, 1, d)
	for _, sg := range []bool{false, true} {
		if sg && !sd.subgroupOK() {
			continue
		}
		rPlan, upPlan := PlanScore(sd, 1, 1, d, sg), PlanScore(sd, 1, h, d, sg)
		kr := newKernel(b, dev, lookup(b, rPlan.Variant), rPlan.Spec...)
		kUp := newKernel(b, dev, lookup(b, upPlan.Variant), upPlan.Spec...)
		kDec := newKernel(b, dev, lookup(b, RouteDecodeVariant(sd, false, sg)), RouteDecodeSpec(sd)...)
		kDecP := newKernel(b, dev, lookup(b, RouteDecodeVariant(sd, true, sg)), RouteDecodeSpec(sd)...)
		decode := func(rec *vk.Recorder, k *vk.Kernel, predHidden uint32) {
			binds := []vk.Bind{{Buf: wb, Access: vk.Read}, {Buf: bias, Access: vk.Read}, {Buf: xb, Access: vk.ReadWrite}, {Buf: xs, Access: vk.Write},
				{Buf: out, Access: vk.Write}, {Buf: count, Access: vk.Write}, {Buf: groups, Access: vk.Read}, {Buf: args, Access: vk.Write}}
			if predHidden > 0 {
				binds = append(binds, vk.Bind{Buf: hid, Access: vk.Read}, vk.Bind{Buf: w2b, Access: vk.Read}, vk.Bind{Buf: p, Access: vk.Write},
					vk.Bind{Buf: w2b, Access: vk.Read})
			}
			rec.Dispatch(k, vk.MustPackPush(RouteDecodePush{NEmbd: d, HasBias: 0, PredHidden: predHidden, M: 12}), [3]uint32{1, 1, 1}, binds...)
		}
		for _, bc := range []struct {
			name   string
			record func(rec *vk.Recorder)
		}{
			{"router_score", func(rec *vk.Recorder) {
				rec.Dispatch(kr, vk.MustPackPush(RouterPush{N: 1, Rows: 1, Cols: d}), rPlan.Groups,
					vk.Bind{Buf: wb, Access: vk.Read}, vk.Bind{Buf: bias, Access: vk.Read}, vk.Bind{Buf: xb, Access: vk.Read}, vk.Bind{Buf: out, Access: vk.Write})
			}},
			{"route_decode", func(rec *vk.Recorder) { decode(rec, kDec, 0) }},
			{"predictor", func(rec *vk.Recorder) {
				rec.Dispatch(kUp, vk.MustPackPush(RouterPush{N: 1, Rows: h, Cols: d, Act: RouterActSiLU}), upPlan.Groups,
					vk.Bind{Buf: w1b, Access: vk.Read}, vk.Bind{Buf: bias, Access: vk.Read}, vk.Bind{Buf: xb, Access: vk.Read}, vk.Bind{Buf: hid, Access: vk.Write})
				decode(rec, kDecP, h)
			}},
		} {
			b.Run(fmt.Sprintf("d%d/sg%v/%s", d, sg, bc.name), func(b *testing.B) {
				rec := dev.NewRecorder()
				defer rec.Close()
				for i := 0; i < perRun; i++ {
					bc.record(rec)
				}
				require.NoError(b, dev.Run(rec))
				if err := closeness(download(b, out, 1), rWant, rScale, dotTolerance(d, 256)); err != nil {
					b.Fatalf("wrong before timing: %v", err)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := dev.Run(rec); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(b.Elapsed().Seconds()/float64(b.N*perRun)*1e6, "us/token")
			})
		}
	}
}
