package shaders

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
)

// TestRouteRows: route_rows against the CPU, for the router and for
// predictors (an MLP's w2 . h, a linear one's w . x + b), with and without
// biases, 1 to RouteRowsMost rows of up to 3 sequences' consecutive rows,
// some rows' scores not finite (their rows poisoned, and selected when
// +Inf), compact positions or not: every row's router score (within
// float32 rounding); the trace at the layer's place, r and p (within
// float32 rounding) and the decisions, the rest of it untouched (or all of
// it, with traceRows 0); the selected rows in order, their count
// and the table's arguments for it; the gathered rows and every row of x,
// bit for bit; each selected row's position, RoPE's, entry (its table's
// length before the step plus its sequence's selected rows before it)
// and table offset. Rows whose score is within 1e-3 of 0 are drawn again,
// so that no decision rests on the rounding.
func TestRouteRows(t *testing.T) {
	dev := openDevice(t)
	const d, ph, nRouted, routed, m = 72, 20, 3, 1, 4
	for _, kind := range []string{"router", "mlp", "linear"} {
		pred := kind != "router"
		k := newKernel(t, dev, lookup(t, RouteRowsName(pred)))
		for _, n := range []int{1, 2, 5, RouteRowsMost} {
			for _, biased := range []bool{false, true} {
				for _, compact := range []bool{false, true} {
					name := fmt.Sprintf("%s/n%d/bias%v/compact%v", kind, n, biased, compact)
					rng := rand.New(rand.NewSource(int64(n*100 + len(kind))))
					w, w2 := denseNormals(rng, d, 0.3), denseNormals(rng, ph, 0.3)
					bias, pb := []float32{0}, []float32{0}
					if biased {
						bias[0], pb[0] = 0.25, -0.125
					}
					hid := ph
					if kind == "linear" { // p = w2 . x + pb, x read as h
						hid, w2 = d, denseNormals(rng, d, 0.3)
					}
					x, h := make([]float32, n*d), make([]float32, n*hid)
					r, p := make([]float32, n), make([]float32, n)
					dot := func(a, b []float32) float64 {
						s := 0.0
						for i := range a {
							s += float64(a[i]) * float64(b[i])
						}
						return s
					}
					for i := range n {
						for {
							copy(x[i*d:], denseNormals(rng, d, 1))
							if kind == "linear" {
								copy(h[i*hid:], x[i*d:(i+1)*d])
							} else {
								copy(h[i*hid:], denseNormals(rng, hid, 1))
							}
							rs := dot(w, x[i*d:(i+1)*d]) + float64(bias[0])
							ps := dot(w2, h[i*hid:(i+1)*hid]) + float64(pb[0])
							if math.Abs(rs) > 1e-3 && (!pred || math.Abs(ps) > 1e-3) {
								r[i], p[i] = float32(rs), float32(ps)
								break
							}
						}
						if i%4 == 3 { // not finite: +Inf, -Inf or NaN
							bad := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}[i/4%3]
							if pred {
								h[i*hid] = bad
								if kind == "linear" {
									x[i*d] = bad
								}
							} else {
								x[i*d] = bad
							}
							// As the kernel sums: an infinity times w[0] keeps w[0]'s sign.
							r[i] = float32(dot(w, x[i*d:(i+1)*d]) + float64(bias[0]))
							p[i] = float32(dot(w2, h[i*hid:(i+1)*hid]) + float64(pb[0]))
						}
					}
					// Three sequences' consecutive rows; rmeta's lengths before the step.
					rowSeq, rowPos, rmeta := make([]uint32, n), make([]uint32, n), make([]uint32, 2*n*nRouted)
					for i := range n {
						rowSeq[i] = uint32(10 * (i * 3 / n))
						rowPos[i] = uint32(100*int(rowSeq[i]) + i)
						for j := range nRouted {
							rmeta[2*(i*nRouted+j)] = 1000 + rowSeq[i] + uint32(j)
							rmeta[2*(i*nRouted+j)+1] = 7*rowSeq[i] + uint32(3*j)
						}
					}
					table := make([]uint32, 3*m*(n+1))
					for i := range table {
						table[i] = rng.Uint32()
					}
					// The reference.
					deciding := r
					if pred {
						deciding = p
					}
					wantX := append([]float32(nil), x...)
					sel, selMask := []uint32{}, []uint32{}
					for i := range n {
						if mod.Poisons(deciding[i]) {
							for j := range d {
								wantX[i*d+j] = float32(math.NaN())
							}
						}
						s := uint32(0)
						if mod.Selects(deciding[i]) {
							s = 1
							sel = append(sel, uint32(i))
						}
						selMask = append(selMask, s)
					}
					c := len(sel)
					const junk = 0xdeadbeef
					fill := func(k int) []uint32 {
						out := make([]uint32, k)
						for i := range out {
							out[i] = junk
						}
						return out
					}
					wantXS, wantPos, wantRPos, wantEnt, wantToff := fill(n*d), fill(n), fill(n), fill(n), fill(n)
					for g, i := range sel {
						for j := range d {
							wantXS[g*d+j] = math.Float32bits(wantX[int(i)*d+j])
						}
						rank := 0
						for rank < g && rowSeq[sel[g-rank-1]] == rowSeq[i] {
							rank++
						}
						mi := 2 * (int(i)*nRouted + routed)
						e := rmeta[mi+1] + uint32(rank)
						wantPos[g], wantEnt[g], wantToff[g] = rowPos[i], e, rmeta[mi]
						wantRPos[g] = rowPos[i]
						if compact {
							wantRPos[g] = e
						}
					}
					// The kernel.
					rec := dev.NewRecorder()
					defer rec.Close()
					buf := func(b []byte) *vk.Buffer { return newBuffer(t, dev, b) }
					xB := buf(f32bytes(x))
					out := func(k int) *vk.Buffer { return buf(u32bytes(fill(k))) }
					const traceRows = RouteRowsMost + 3
					traced := n%2 == 1 // traceRows 0 for even n: no trace written
					xsB, rB, countB, argsB, idxB, traceB := out(n*d), out(n), out(1), out(3*m), out(n), out(nRouted*3*traceRows)
					posB, rposB, entB, toffB := out(n), out(n), out(n), out(n)
					binds := []vk.Bind{denseBind(buf(f32bytes(w)), vk.Read), denseBind(buf(f32bytes(bias)), vk.Read), denseBind(xB, vk.ReadWrite),
						denseBind(xsB, vk.Write), denseBind(rB, vk.Write), denseBind(countB, vk.Write), denseBind(buf(u32bytes(table)), vk.Read),
						denseBind(argsB, vk.Write), denseBind(idxB, vk.Write), denseBind(traceB, vk.Write), denseBind(buf(u32bytes(rowPos)), vk.Read),
						denseBind(buf(u32bytes(rowSeq)), vk.Read), denseBind(buf(u32bytes(rmeta)), vk.Read), denseBind(posB, vk.Write),
						denseBind(rposB, vk.Write), denseBind(entB, vk.Write), denseBind(toffB, vk.Write)}
					push := RouteRowsPush{N: uint32(n), NEmbd: d, M: m, NRouted: nRouted, Routed: routed}
					if traced {
						push.TraceRows = traceRows
					}
					if biased {
						push.HasBias = 1
					}
					if compact {
						push.Compact = 1
					}
					if pred {
						hB := buf(f32bytes(h))
						if kind == "linear" {
							hB = xB
						}
						push.PredHidden = uint32(hid)
						if biased {
							push.PredBias = 1
						}
						binds = append(binds, denseBind(hB, vk.Read), denseBind(buf(f32bytes(w2)), vk.Read), denseBind(buf(f32bytes(pb)), vk.Read))
					}
					rec.Dispatch(k, vk.MustPackPush(push), [3]uint32{1, 1, 1}, binds...)
					require.NoError(t, dev.Run(rec), name)
					close := func(what string, want []float32, got []float32) {
						for i := range want {
							if math.IsNaN(float64(want[i])) || math.IsInf(float64(want[i]), 0) {
								assert.False(t, isFinite(got[i]), "%s: %s[%d] = %g, want not finite", name, what, i, got[i])
								continue
							}
							assert.InDelta(t, want[i], got[i], 1e-5*(1+math.Abs(float64(want[i]))), "%s: %s[%d]", name, what, i)
						}
					}
					close("r", r, download(t, rB, n))
					tr := downloadU32(t, traceB, nRouted*3*traceRows)
					wantTr := fill(nRouted * 3 * traceRows)
					if traced {
						at := 3 * traceRows * routed
						asF := func(x []uint32) []float32 {
							f := make([]float32, len(x))
							for i, v := range x {
								f[i] = math.Float32frombits(v)
							}
							return f
						}
						close("the trace's r", r, asF(tr[at:at+n]))
						copy(wantTr[at:], tr[at:at+n])
						if pred {
							close("the trace's p", p, asF(tr[at+traceRows:at+traceRows+n]))
							copy(wantTr[at+traceRows:], tr[at+traceRows:at+traceRows+n])
						}
						copy(wantTr[at+2*traceRows:], selMask)
					}
					assert.Equal(t, wantTr, tr, "%s: the trace: the decisions, and nothing but r, p and them", name)
					assert.Equal(t, []uint32{uint32(c)}, downloadU32(t, countB, 1), "%s: count", name)
					assert.Equal(t, sel, downloadU32(t, idxB, n)[:c], "%s: idx", name)
					assert.Equal(t, table[3*m*c:3*m*(c+1)], downloadU32(t, argsB, 3*m), "%s: the table's arguments for the count", name)
					assert.Equal(t, f32Bits(wantX), f32Bits(download(t, xB, n*d)), "%s: x, its poisoned rows NaN", name)
					assert.Equal(t, wantXS, downloadU32(t, xsB, n*d), "%s: the selected rows gathered", name)
					assert.Equal(t, wantPos, downloadU32(t, posB, n), "%s: positions", name)
					assert.Equal(t, wantRPos, downloadU32(t, rposB, n), "%s: RoPE's positions", name)
					assert.Equal(t, wantEnt, downloadU32(t, entB, n), "%s: entries", name)
					assert.Equal(t, wantToff, downloadU32(t, toffB, n), "%s: table offsets", name)
				}
			}
		}
	}
}

func isFinite(v float32) bool { return !math.IsNaN(float64(v)) && !math.IsInf(float64(v), 0) }
