package shaders

// Tests of the routing chain against the CPU reference: gather and the gated
// residual (mod_residual) of the selected rows, directly and on compact's
// indirect arguments, and score, selection, gather, block and residual
// recorded once and replayed end to end.

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// residualRef is routedBlock's update for the selected rows: x[i] +=
// g(r[i]) * (o[j] - x[i]), with the scale of each element for closeness.
func residualRef(x, o, r []float32, sel []int, d int, gate string) (want, scale []float64) {
	want, scale = make([]float64, len(x)), make([]float64, len(x))
	y := append([]float32(nil), x...)
	for i := range x {
		scale[i] = math.Abs(float64(x[i]))
	}
	for j, i := range sel {
		g := mod.Gate(gate, r[i])
		xi, oj := y[i*d:(i+1)*d], o[j*d:(j+1)*d]
		for e := range xi {
			scale[i*d+e] += math.Abs(float64(g * (oj[e] - xi[e])))
			xi[e] += g * (oj[e] - xi[e])
		}
	}
	for i := range y {
		want[i] = float64(y[i])
	}
	return want, scale
}

func TestGatherScatter(t *testing.T) {
	dev := openDevice(t)
	kGather := newKernel(t, dev, lookup(t, "gather"))
	kScatter := map[string]*vk.Kernel{ // the gated residual: mod_residual, DESIGN.md §3's target
		mod.GateSigmoid:  newKernel(t, dev, lookup(t, ModResidualVariant(mod.GateSigmoid, mod.GateTargetBlock))),
		mod.GateIdentity: newKernel(t, dev, lookup(t, ModResidualVariant(mod.GateIdentity, mod.GateTargetBlock))),
	}
	for _, n := range routingSizes {
		for _, d := range []int{1, 7, 64, 100} {
			for _, capacity := range []float32{0.3, 1} {
				for _, gate := range []string{mod.GateSigmoid, mod.GateIdentity} {
					for _, indirect := range []bool{false, true} {
						name := fmt.Sprintf("n%d/d%d/c%g/%s/indirect%v", n, d, capacity, gate, indirect)
						rng := rand.New(rand.NewSource(int64(n*10 + d)))
						x, r := routingNormal(rng, n*d, 1), routingNormal(rng, n, 2)
						sel := mod.TopKIndices(r, mod.TopK(capacity, n))
						ks := len(sel)
						o := routingNormal(rng, ks*d, 1) // the block's outputs for the gathered rows
						wantXS := make([]float64, ks*d)
						for j, i := range sel {
							for e := 0; e < d; e++ {
								wantXS[j*d+e] = float64(x[i*d+e])
							}
						}
						want, scale := residualRef(x, o, r, sel, d, gate)

						xb, rb, ob := newBuffer(t, dev, f32bytes(x)), newBuffer(t, dev, f32bytes(r)), newBuffer(t, dev, f32bytes(o))
						idx := newBuffer(t, dev, u32bytes(routingU32(sel)))
						count := newBuffer(t, dev, u32bytes([]uint32{uint32(ks)}))
						args := newBuffer(t, dev, u32bytes(routingArgs(ks, RoutingRowsPerGroup)))
						rec := dev.NewRecorder()
						xs := routingBuffer(t, dev, rec, n*d, 0x7fc00000)
						gBinds := []vk.Bind{{Buf: idx, Access: vk.Read}, {Buf: count, Access: vk.Read},
							{Buf: xb, Access: vk.Read}, {Buf: xs, Access: vk.Write}}
						sBinds := []vk.Bind{{Buf: xb, Access: vk.ReadWrite}, {Buf: ob, Access: vk.Read},
							{Buf: idx, Access: vk.Read}, {Buf: rb, Access: vk.Read}}
						gPush := vk.MustPackPush(GatherPush{NEmbd: uint32(d)})
						if indirect { // count workgroups: K is only a bound
							rec.DispatchIndirect(kGather, gPush, args, 0, gBinds...)
							rec.DispatchIndirect(kScatter[gate], vk.MustPackPush(ModResidualPush{Cols: uint32(d), N: uint32(n), K: uint32(n)}), args, 0, sBinds...)
						} else { // over every row there could be: those past count (gather) or K (mod_residual) do nothing
							rec.Dispatch(kGather, gPush, Groups(uint32(n)), gBinds...)
							rec.Dispatch(kScatter[gate], vk.MustPackPush(ModResidualPush{Cols: uint32(d), N: uint32(n), K: uint32(ks)}), Groups(uint32(n)), sBinds...)
						}
						require.NoError(t, dev.Run(rec), name)
						ones := make([]float64, ks*d)
						for i := range ones {
							ones[i] = 1
						}
						if err := closeness(download(t, xs, ks*d), wantXS, ones, 0); err != nil {
							t.Errorf("%s: gather: %v", name, err)
						}
						if err := closeness(download(t, xb, n*d), want, scale, residualTolerance[gate]); err != nil {
							t.Errorf("%s: mod_residual: %v", name, err)
						}
						rec.Close()
					}
				}
			}
		}
	}
}

// routingStep is one routed block on the GPU, recorded once: scores, the
// selection, compaction, and the block's kernels dispatched indirectly on
// the count the GPU computed.
type routingStep struct {
	n, d, k                               int
	x, w, bias, w1, w2                    *vk.Buffer
	r, p, mask, idxTopk, idx, count, args *vk.Buffer
	xs, o                                 *vk.Buffer
	rec                                   *vk.Recorder
}

// TestRoutingEndToEnd runs routedBlock's semantics (mod/forward.go) on the
// GPU (scores as PlanScore plans them on this device) with a stand-in block o = xs + xs (the add kernel; nEmbd 256 so that
// add's 256-element workgroups are one row each and compact's arguments
// drive it too): router score -> top-k or r > 0 or p > 0 -> compaction ->
// indirect gather -> block -> indirect gated residual (mod_residual). The step is recorded
// once and replayed on different inputs; nothing is read back until each
// replay has finished, so the selected count never reaches the CPU before
// the end. Inputs are small integers and the router weights -1, 0, 1, so
// r is exact and full of ties: the selection must be the CPU's exactly.
func TestRoutingEndToEnd(t *testing.T) {
	dev := openDevice(t)
	const n, d = 100, 256
	ks := newTopkKernels(t, dev)
	sdev := scoreDevice(dev)
	rPlan, upPlan, downPlan := PlanScore(sdev, n, 1, d, true), PlanScore(sdev, n, d/2, d, true), PlanScore(sdev, n, 1, d/2, true)
	kRouter := newKernel(t, dev, lookup(t, rPlan.Variant), rPlan.Spec...)
	kUp := newKernel(t, dev, lookup(t, upPlan.Variant), upPlan.Spec...)
	kDown := newKernel(t, dev, lookup(t, downPlan.Variant), downPlan.Spec...)
	kPos := newKernel(t, dev, lookup(t, "compact_positive"))
	kGather := newKernel(t, dev, lookup(t, "gather"))
	kAdd := newKernel(t, dev, lookup(t, "add"))
	kScatter := map[string]*vk.Kernel{ // the gated residual: mod_residual, DESIGN.md §3's target
		mod.GateSigmoid:  newKernel(t, dev, lookup(t, ModResidualVariant(mod.GateSigmoid, mod.GateTargetBlock))),
		mod.GateIdentity: newKernel(t, dev, lookup(t, ModResidualVariant(mod.GateIdentity, mod.GateTargetBlock))),
	}
	for _, tc := range []struct {
		routing mod.Routing
		gate    string
		bias    float32
	}{
		{mod.RoutingTopK, mod.GateSigmoid, 0.25},
		{mod.RoutingRouter, mod.GateIdentity, -0.5},
		{mod.RoutingPredictor, mod.GateSigmoid, 0.5},
	} {
		name := tc.routing.String()
		rng := rand.New(rand.NewSource(int64(tc.routing) + 1))
		w := make([]float32, d)
		for i := range w {
			w[i] = float32(rng.Intn(3) - 1)
		}
		h := d / 2
		w1, w2 := routingNormal(rng, h*d, 1/math.Sqrt(d)), routingNormal(rng, h, 1)
		k := mod.TopK(0.3, n)
		st := routingStep{n: n, d: d, k: k, rec: dev.NewRecorder()}
		rec := st.rec
		st.x = routingBuffer(t, dev, nil, n*d, 0)
		st.w, st.bias = newBuffer(t, dev, f32bytes(w)), newBuffer(t, dev, f32bytes([]float32{tc.bias}))
		st.w1, st.w2 = newBuffer(t, dev, f32bytes(w1)), newBuffer(t, dev, f32bytes(w2))
		// Filled at the start of every replay: what a kernel fails to write
		// shows (NaN rows in o would poison x).
		st.r, st.p = routingBuffer(t, dev, rec, n, 0x7fc00000), routingBuffer(t, dev, rec, n, 0x7fc00000)
		st.mask, st.idxTopk, st.idx = routingBuffer(t, dev, rec, n, 7), routingBuffer(t, dev, rec, k, 0xdeadbeef), routingBuffer(t, dev, rec, n, 0xdeadbeef)
		st.count, st.args = routingBuffer(t, dev, rec, 1, 0xdeadbeef), routingBuffer(t, dev, rec, 3, 0xdeadbeef)
		st.xs, st.o = routingBuffer(t, dev, rec, n*d, 0x7fc00000), routingBuffer(t, dev, rec, n*d, 0x7fc00000)

		rec.Dispatch(kRouter, vk.MustPackPush(RouterPush{N: n, Rows: 1, Cols: d, HasBias: 1}), rPlan.Groups,
			vk.Bind{Buf: st.w, Access: vk.Read}, vk.Bind{Buf: st.bias, Access: vk.Read},
			vk.Bind{Buf: st.x, Access: vk.Read}, vk.Bind{Buf: st.r, Access: vk.Write})
		compactOut := []vk.Bind{{Buf: st.idx, Access: vk.Write}, {Buf: st.count, Access: vk.Write}, {Buf: st.args, Access: vk.Write}}
		compactPush := vk.MustPackPush(CompactPush{N: n, RowsPerGroup: RoutingRowsPerGroup, Cols: d})
		switch tc.routing {
		case mod.RoutingTopK:
			ks.record(rec, topkBuffers{scores: st.r, mask: st.mask, idx: st.idxTopk, x: st.x, cols: d}, n, uint32(k))
			rec.Dispatch(ks["compact_mask"], compactPush, [3]uint32{1, 1, 1},
				append([]vk.Bind{{Buf: st.mask, Access: vk.Read}}, compactOut...)...)
		case mod.RoutingRouter:
			rec.Dispatch(kPos, compactPush, [3]uint32{1, 1, 1},
				append(append([]vk.Bind{{Buf: st.r, Access: vk.Read}}, compactOut...), vk.Bind{Buf: st.mask, Access: vk.Write}, vk.Bind{Buf: st.x, Access: vk.ReadWrite})...)
		case mod.RoutingPredictor:
			hid := routingBuffer(t, dev, rec, n*h, 0x7fc00000)
			rec.Dispatch(kUp, vk.MustPackPush(RouterPush{N: n, Rows: uint32(h), Cols: d, Act: RouterActSiLU}), upPlan.Groups,
				vk.Bind{Buf: st.w1, Access: vk.Read}, vk.Bind{Buf: st.w2, Access: vk.Read},
				vk.Bind{Buf: st.x, Access: vk.Read}, vk.Bind{Buf: hid, Access: vk.Write})
			rec.Dispatch(kDown, vk.MustPackPush(RouterPush{N: n, Rows: 1, Cols: uint32(h)}), downPlan.Groups,
				vk.Bind{Buf: st.w2, Access: vk.Read}, vk.Bind{Buf: st.w2, Access: vk.Read},
				vk.Bind{Buf: hid, Access: vk.Read}, vk.Bind{Buf: st.p, Access: vk.Write})
			rec.Dispatch(kPos, compactPush, [3]uint32{1, 1, 1},
				append(append([]vk.Bind{{Buf: st.p, Access: vk.Read}}, compactOut...), vk.Bind{Buf: st.mask, Access: vk.Write}, vk.Bind{Buf: st.x, Access: vk.ReadWrite})...)
		}
		rec.DispatchIndirect(kGather, vk.MustPackPush(GatherPush{NEmbd: d}), st.args, 0,
			vk.Bind{Buf: st.idx, Access: vk.Read}, vk.Bind{Buf: st.count, Access: vk.Read},
			vk.Bind{Buf: st.x, Access: vk.Read}, vk.Bind{Buf: st.xs, Access: vk.Write})
		rec.DispatchIndirect(kAdd, vk.MustPackPush(AddPush{N: n * d}), st.args, 0, // o = 2 xs, count rows
			vk.Bind{Buf: st.xs, Access: vk.Read}, vk.Bind{Buf: st.xs, Access: vk.Read}, vk.Bind{Buf: st.o, Access: vk.Write})
		rec.DispatchIndirect(kScatter[tc.gate], vk.MustPackPush(ModResidualPush{Cols: d, N: n, K: n}), st.args, 0,
			vk.Bind{Buf: st.x, Access: vk.ReadWrite}, vk.Bind{Buf: st.o, Access: vk.Read},
			vk.Bind{Buf: st.idx, Access: vk.Read}, vk.Bind{Buf: st.r, Access: vk.Read})
		require.NoError(t, rec.Err())

		inputs := map[string][]float32{}
		for _, in := range []string{"a", "zeros", "b"} {
			x := make([]float32, n*d)
			if in != "zeros" { // zeros: r = bias for every token
				for i := range x {
					x[i] = float32(rng.Intn(7) - 3)
				}
			}
			inputs[in] = x
		}
		for _, in := range []string{"a", "zeros", "b"} {
			t.Run(fmt.Sprintf("%s/%s/%s", name, tc.gate, in), func(t *testing.T) {
				st.check(t, dev, tc.routing, tc.gate, w, tc.bias, w1, w2, inputs[in])
			})
		}
		assert.Equal(t, 1, rec.Stats().Recordings, "%s: recorded once", name)
		assert.Equal(t, 3, rec.Stats().Submits, "%s: replayed per input", name)
		rec.Close()
	}
}

// check replays the step on x and compares every output with the CPU's.
func (st *routingStep) check(t *testing.T, dev *vk.Device, routing mod.Routing, gate string, w []float32, bias float32, w1, w2, x []float32) {
	n, d := st.n, st.d
	require.NoError(t, st.x.Upload(f32bytes(x), 0))
	require.NoError(t, dev.Run(st.rec))

	r, rWant, rScale := routerRef(t, w, x, &bias, n, d)
	rGot := download(t, st.r, n)
	require.NoError(t, closeness(rGot, rWant, rScale, 0), "router scores: integer data, exact")
	var sel []int
	switch routing {
	case mod.RoutingTopK:
		sel = mod.TopKIndices(r, st.k)
		assert.NoError(t, routingExact(downloadU32(t, st.idxTopk, st.k), routingU32(sel)), "topk idx")
	case mod.RoutingRouter:
		sel = routingPositive(r)
	case mod.RoutingPredictor:
		pWant, pScale := predictorRef(t, w1, w2, x, n, d, d/2)
		pGot := download(t, st.p, n)
		require.NoError(t, closeness(pGot, pWant, pScale, predictorTolerance), "predictor scores")
		// p is not exact (exp), so the CPU's selection is the GPU's unless
		// a p_i is within the tolerance of 0.
		sel = routingPositive(pGot)
		pCPU := make([]float32, n)
		for i := range pCPU {
			pCPU[i] = float32(pWant[i])
			if math.Abs(pWant[i]) <= predictorTolerance*pScale[i] {
				pCPU[i] = pGot[i]
			}
		}
		require.Equal(t, sel, routingPositive(pCPU), "predictor selection")
	}
	t.Logf("%d of %d tokens selected", len(sel), n)
	count := len(sel)
	assert.Equal(t, []uint32{uint32(count)}, downloadU32(t, st.count, 1), "count")
	assert.Equal(t, routingArgs(count, RoutingRowsPerGroup), downloadU32(t, st.args, 3), "indirect arguments")
	assert.NoError(t, routingExact(downloadU32(t, st.mask, n), routingMask(sel, n)), "mask")
	assert.NoError(t, routingExact(downloadU32(t, st.idx, count), routingU32(sel)), "idx")

	o := make([]float32, count*d) // the stand-in block: o = xs + xs
	for j, i := range sel {
		for e := 0; e < d; e++ {
			o[j*d+e] = x[i*d+e] + x[i*d+e]
		}
	}
	want, scale := residualRef(x, o, r, sel, d, gate)
	assert.NoError(t, closeness(download(t, st.x, n*d), want, scale, residualTolerance[gate]), "x after the routed block")
}

// routingCPUTime is the time per call of fn on the CPU, measured in the same
// run as the GPU timing it is a baseline for.
func routingCPUTime(fn func()) float64 {
	const minTime = 0.05 // seconds
	start := time.Now()
	calls := 0
	for time.Since(start).Seconds() < minTime {
		fn()
		calls++
	}
	return time.Since(start).Seconds() / float64(calls)
}
