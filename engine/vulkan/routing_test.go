package vulkan

import (
	"fmt"
	"math"
	"math/rand"
	"path/filepath"
	"testing"
	"time"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wideModel describes a random MoD model at a real model's width, written
// to a GGUF file: the routing kernels must run at any width, where the
// shipped fixtures are a few hundred wide.
type wideModel struct {
	nVocab, nEmbd, nLayer, nHead, nKVHead, nFF, ctx, predHidden int
	routed                                                      []uint32 // empty: a dense ("llama") twin
	routerBias                                                  float32  // r ~ N(routerBias, 1)
	seed                                                        int64
}

// write writes the model (F32; router scores ~N(0, 1), predictor scores of
// a similar spread, so that tokens both go through and skip) and returns
// its path.
func (wm wideModel) write(t testing.TB) string {
	t.Helper()
	rng := rand.New(rand.NewSource(wm.seed))
	randn := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * scale)
		}
		return v
	}
	ones := func(n int) []float32 {
		v := randn(n, 0.1)
		for i := range v {
			v[i]++
		}
		return v
	}
	arch := mod.ArchMoD
	if len(wm.routed) == 0 {
		arch = mod.ArchLlama
	}
	w := gguf.NewWriter()
	kv := func(k string, v gguf.Value) { require.NoError(t, w.SetKV(k, v)) }
	kv(mod.KeyArchitecture, gguf.Scalar(arch))
	for k, v := range map[string]int{mod.KeyContextLength: wm.ctx, mod.KeyEmbeddingLen: wm.nEmbd, mod.KeyBlockCount: wm.nLayer,
		mod.KeyFeedForwardLen: wm.nFF, mod.KeyHeadCount: wm.nHead, mod.KeyHeadCountKV: wm.nKVHead, mod.KeyVocabSize: wm.nVocab} {
		kv(mod.ArchKey(arch, k), gguf.Scalar(uint32(v)))
	}
	kv(mod.ArchKey(arch, mod.KeyRMSEpsilon), gguf.Scalar(float32(1e-5)))
	if arch == mod.ArchMoD {
		kv(mod.ArchKey(arch, mod.KeyPredictorHidden), gguf.Scalar(uint32(wm.predHidden)))
		kv(mod.ArchKey(arch, mod.KeyRoutedLayers), gguf.Array(wm.routed))
		kv(mod.ArchKey(arch, mod.KeyCapacity), gguf.Scalar(float32(0.125)))
		kv(mod.ArchKey(arch, mod.KeyGate), gguf.Scalar(mod.GateSigmoid))
	}

	d, kvd, ff, h := wm.nEmbd, wm.nKVHead*(wm.nEmbd/wm.nHead), wm.nFF, wm.predHidden
	add := func(name string, dims []uint64, v []float32) {
		require.NoError(t, w.AddFloat32(name, gguf.TypeF32, dims, v))
	}
	u := func(x ...int) []uint64 {
		out := make([]uint64, len(x))
		for i, v := range x {
			out[i] = uint64(v)
		}
		return out
	}
	sd := 1 / math.Sqrt(float64(d))
	add(mod.TensorTokenEmbd, u(d, wm.nVocab), randn(d*wm.nVocab, 1))
	add(mod.TensorOutputNorm, u(d), ones(d))
	add(mod.TensorOutput, u(d, wm.nVocab), randn(d*wm.nVocab, sd))
	routed := map[int]bool{}
	for _, l := range wm.routed {
		routed[int(l)] = true
	}
	for l := 0; l < wm.nLayer; l++ {
		bt := func(n string) string { return mod.BlockTensor(l, n) }
		add(bt(mod.TensorAttnNorm), u(d), ones(d))
		add(bt(mod.TensorAttnQ), u(d, d), randn(d*d, sd))
		add(bt(mod.TensorAttnK), u(d, kvd), randn(d*kvd, sd))
		add(bt(mod.TensorAttnV), u(d, kvd), randn(d*kvd, sd))
		add(bt(mod.TensorAttnOutput), u(d, d), randn(d*d, sd))
		add(bt(mod.TensorFFNNorm), u(d), ones(d))
		add(bt(mod.TensorFFNGate), u(d, ff), randn(d*ff, sd))
		add(bt(mod.TensorFFNUp), u(d, ff), randn(d*ff, sd))
		add(bt(mod.TensorFFNDown), u(ff, d), randn(ff*d, 1/math.Sqrt(float64(ff))))
		if !routed[l] {
			continue
		}
		// The block input's rows have |x| ~ sqrt(d): with w ~ N(0, 1/d),
		// r = w.x ~ N(0, 1), and so is each predictor hidden unit.
		add(bt(mod.TensorRouterWeight), u(d), randn(d, sd))
		add(bt(mod.TensorRouterBias), u(1), []float32{wm.routerBias})
		if h > 0 {
			add(bt(mod.TensorPredUp), u(d, h), randn(d*h, sd))
			add(bt(mod.TensorPredDown), u(h), randn(h, 2/math.Sqrt(float64(h))))
		}
	}
	path := filepath.Join(t.TempDir(), "wide-mod.gguf")
	require.NoError(t, w.WriteFile(path))
	return path
}

// wide2048 is a 1.1B model's width (TinyLlama: nEmbd 2048, 32 heads of 64,
// 4 KV heads) with two blocks, the second routed, and a predictor of
// nEmbd/2: the predictor kernel alone once looped 526336 times per token
// here, over lavapipe's cap, and was refused.
var wide2048 = wideModel{nVocab: 96, nEmbd: 2048, nLayer: 2, nHead: 32, nKVHead: 4, nFF: 512, ctx: 32,
	predHidden: 1024, routed: []uint32{1}, routerBias: 0.1, seed: 2048}

// TestWideMoD runs router and predictor routing at nEmbd 2048 and at a
// ragged 2050 (heads of 82) against mod's CPU State: every step's logits and
// each routed layer's decisions (checkAgainstCPU).
func TestWideMoD(t *testing.T) {
	dev := openDevice(t, true)
	ragged := wide2048
	ragged.nEmbd, ragged.nHead, ragged.nKVHead, ragged.predHidden, ragged.seed = 2050, 25, 5, 1025, 2050
	for _, wm := range []wideModel{wide2048, ragged} {
		m := openModel(t, wm.write(t))
		tokens := make([]int32, 12)
		for i := range tokens {
			tokens[i] = int32((i*37 + 5) % wm.nVocab)
		}
		for _, routing := range []mod.Routing{mod.RoutingRouter, mod.RoutingPredictor} {
			t.Run(fmt.Sprintf("d%d/%s", wm.nEmbd, routing), func(t *testing.T) {
				checkAgainstCPU(t, dev, m, routing, tokens)
			})
		}
	}
}

// TestGPURoutingPlans runs the routing kernels as a GPU would run them
// (subgroupAdd, 256-wide route_decode, a subgroup per predictor row), on
// lavapipe, which plans the tree and narrower workgroups for itself: router
// and predictor, at nEmbd 2048 and on a fixture, against the CPU; under
// each of deviceProfiles (the device's own with RoutingAsGPU, and the GPU
// profile, whose routing is a GPU's anyway), with the F16 cache's bound
// where the profile's cache is F16 (reference_test.go).
func TestGPURoutingPlans(t *testing.T) {
	dev := openDevice(t, true)
	if !dev.Info().Features.SubgroupArithmetic {
		t.Skipf("%s has no subgroup arithmetic", dev.Info().Name)
	}
	wide := openModel(t, wide2048.write(t))
	fixture := openModel(t, "../../testdata/mod/mod-rand-sigmoid-pred.gguf")
	for _, pc := range deviceProfiles(dev) {
		for _, m := range []*mod.Model{wide, fixture} {
			tokens := make([]int32, 12)
			for i := range tokens {
				tokens[i] = int32((i*37 + 5) % m.Config.NVocab)
			}
			for _, routing := range []mod.Routing{mod.RoutingRouter, mod.RoutingPredictor} {
				t.Run(fmt.Sprintf("%s/d%d/%s", pc.name, m.Config.NEmbd, routing), func(t *testing.T) {
					prof := *pc.prof
					prof.RoutingAsGPU = true // the GPU's routing kernels on lavapipe
					run, err := New(dev, m, routing, Options{DeviceProfile: &prof})
					require.NoError(t, err)
					t.Cleanup(run.Close)
					cpu := runReference(t, m, routing, run)
					for i, tok := range tokens {
						want, tol := cpu.Forward(t, []int32{tok}, false, tolF32)
						got, err := run.Feed([]int32{tok})
						require.NoError(t, err)
						require.Empty(t, closeErr(want, got, tol), "step %d", i)
						entries, err := run.CacheEntries()
						require.NoError(t, err)
						for l := range entries {
							if m.Config.Routed[l] {
								require.Equal(t, cpu.Selected[l], entries[l], "step %d layer %d: routing", i, l)
							}
						}
					}
					var names []string
					for name := range run.ks.made {
						names = append(names, name)
					}
					assert.Contains(t, fmt.Sprint(names), "_sg", "the subgroup variants ran")
				})
			}
		}
	}
}

// TestRoutedDispatches counts the dispatches of the recorded decode step of
// a MoD model, and, token by token, those that ran workgroups. A routed
// block records 1 direct dispatch (route_decode; 2 with the predictor's
// hidden layer) and its block's and mod_residual's dispatches, all indirect on
// route_decode's arguments; when the token skips the block, every one of
// them has zero workgroups (checked on the arguments the GPU wrote). The
// head is the embedding and the profile's head plan (Profile.Head:
// rmsnorm, the output matvec and argmax; the norm folded into the matvec
// where the profile fuses norms): counted from the plan, under each of
// deviceProfiles.
func TestRoutedDispatches(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	c := m.Config
	for _, pc := range deviceProfiles(dev) {
		for _, routing := range []mod.Routing{mod.RoutingRouter, mod.RoutingPredictor} {
			t.Run(pc.name+"/"+routing.String(), func(t *testing.T) {
				run, err := New(dev, m, routing, Options{DeviceProfile: pc.prof, KVType: "f32"})
				require.NoError(t, err)
				t.Cleanup(run.Close)
				_, err = run.Feed([]int32{1}) // records the step
				require.NoError(t, err)
				fixed := 1 // route_decode
				if routing == mod.RoutingPredictor {
					fixed = 2 // and the predictor's hidden layer
				}
				blockDispatches := make([]int, c.NLayer)
				head := 1 + len(pc.prof.Head()) // embed; the head's plan
				wantAll, wantIndirect, dense := head, 0, head
				for l := 0; l < c.NLayer; l++ {
					p := run.frameOf(stepPass(true))
					ops, err := run.blockOps(p, l, p.rows, routedBlock{})
					require.NoError(t, err)
					blockDispatches[l] = len(ops)
					dense += len(ops)
					if c.Routed[l] {
						wantAll += fixed + len(ops) + 1 // + mod_residual
						wantIndirect += len(ops) + 1
					} else {
						wantAll += len(ops)
					}
				}
				st := run.step.Stats()
				assert.Equal(t, wantAll, st.Dispatches, "dispatches recorded")
				assert.Equal(t, wantIndirect, st.Indirect, "indirect: every dispatch of a routed block after route_decode")
				t.Logf("step: %d dispatches (%d indirect), %d barriers; the same model all dense would record %d",
					st.Dispatches, st.Indirect, st.Barriers, dense)

				cpu, err := m.NewState(routing)
				require.NoError(t, err)
				_, err = cpu.Forward([]int32{1}, false)
				require.NoError(t, err)
				tokens := fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-"+routing.String()]
				ran, skipped := 0, 0
				for _, tok := range tokens {
					_, err := run.Feed([]int32{tok})
					require.NoError(t, err)
					before := append([]int(nil), cpu.Selected...)
					_, err = cpu.Forward([]int32{tok}, false)
					require.NoError(t, err)
					nonzero := st.Dispatches - st.Indirect
					for l := 0; l < c.NLayer; l++ {
						if !c.Routed[l] {
							continue
						}
						selected := cpu.Selected[l] > before[l]
						count := mustDownloadU32(t, run.routes[l].count, 1)[0]
						assert.Equal(t, map[bool]uint32{true: 1, false: 0}[selected], count, "layer %d: the GPU's decision is the CPU's", l)
						args := mustDownloadU32(t, run.args[l], 3*(blockDispatches[l]+1))
						for j := 0; j < len(args); j += 3 {
							if args[j]*args[j+1]*args[j+2] != 0 {
								nonzero++
							} else {
								assert.Equal(t, []uint32{0, 1, 1}, args[j:j+3], "layer %d dispatch %d: a dispatch that does not run has (0, 1, 1)", l, j/3)
							}
						}
						if selected {
							ran++
						} else {
							skipped++
							for j := 0; j < len(args); j += 3 {
								assert.Zero(t, args[j], "layer %d: a skipped token's dispatch %d runs no workgroup", l, j/3)
							}
						}
					}
					assert.LessOrEqual(t, nonzero, st.Dispatches)
				}
				require.Positive(t, skipped, "some tokens skip a routed block")
				require.Positive(t, ran, "some go through")
				t.Logf("%d routed-block visits ran, %d skipped; a skipped visit: %d direct dispatches and %d indirect ones of zero workgroups",
					ran, skipped, fixed, blockDispatches[1]+1)
			})
		}
	}
}

// BenchmarkMoDDecode times decode of MoD models against their dense twins
// (the same shapes without routers): a stories15M shape (nEmbd 288, 6
// blocks, 32000 tokens: the output matrix is most of the bytes) and nEmbd
// 2048 with 4 blocks, every other block routed, router bias -1.15 (~12.5%
// of tokens go through, DESIGN.md's capacity); router and predictor
// routing, with and without conditional spans. Each runner is validated
// first against the CPU (logits and decisions). The MoD model and its twin
// decode the same tokens in alternation, so a load that comes and goes on
// the machine hits both alike; it reports the MoD model's tokens/s, its
// speedup over the twin, the ideal speedup from the weight bytes each reads
// per token (mod.Model.WeightBytesPerToken at the routed fractions
// measured), and the fraction of the ideal achieved.
//
//	go test ./engine/vulkan -run '^$' -bench MoDDecode -benchtime 2x
func BenchmarkMoDDecode(b *testing.B) {
	const steps = 16
	dev := openDevice(b, false)
	for _, sh := range []struct {
		name  string
		shape wideModel
	}{
		{"stories15M", wideModel{nVocab: 32000, nEmbd: 288, nLayer: 6, nHead: 6, nKVHead: 6, nFF: 768, ctx: 64,
			predHidden: 144, routed: []uint32{1, 3, 5}, routerBias: -1.15, seed: 15}},
		{"d2048-L4", wideModel{nVocab: 96, nEmbd: 2048, nLayer: 4, nHead: 32, nKVHead: 4, nFF: 1024, ctx: 64,
			predHidden: 1024, routed: []uint32{1, 3}, routerBias: -1.15, seed: 4}},
	} {
		shape := sh.shape
		twin := shape
		twin.routed = nil
		dm, mm := openModel(b, twin.write(b)), openModel(b, shape.write(b))
		tokens := make([]int32, steps)
		for i := range tokens {
			tokens[i] = int32((i*37 + 5) % shape.nVocab)
		}
		dense := validatedRunner(b, dev, dm, mod.RoutingRouter, Options{}, tokens)
		for _, bc := range []struct {
			name          string
			routing       mod.Routing
			noConditional bool
		}{
			{"router", mod.RoutingRouter, false},
			{"router/no-conditional", mod.RoutingRouter, true},
			{"predictor", mod.RoutingPredictor, false},
			{"predictor/no-conditional", mod.RoutingPredictor, true},
		} {
			b.Run(sh.name+"/"+bc.name, func(b *testing.B) {
				run := validatedRunner(b, dev, mm, bc.routing, Options{NoConditional: bc.noConditional}, tokens)
				entries, err := run.CacheEntries()
				require.NoError(b, err)
				frac := make([]float64, shape.nLayer)
				routed := 0.0
				for _, l := range shape.routed {
					frac[l] = float64(entries[l]) / float64(steps)
					routed += frac[l] / float64(len(shape.routed))
				}
				var tDense, tMoD time.Duration
				sequence := func(r *Runner) time.Duration {
					start := time.Now()
					r.Reset()
					for _, t := range tokens {
						_, err := r.Feed([]int32{t})
						require.NoError(b, err)
					}
					return time.Since(start)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					tDense += sequence(dense)
					tMoD += sequence(run)
				}
				b.StopTimer()
				ideal := dm.WeightBytesPerToken(bc.routing, nil) / mm.WeightBytesPerToken(bc.routing, frac)
				speedup := tDense.Seconds() / tMoD.Seconds()
				b.ReportMetric(float64(b.N*steps)/tMoD.Seconds(), "tokens/s")
				b.ReportMetric(float64(b.N*steps)/tDense.Seconds(), "dense_tokens/s")
				b.ReportMetric(routed, "routed")
				b.ReportMetric(speedup, "speedup")
				b.ReportMetric(ideal, "ideal")
				b.ReportMetric(speedup/ideal, "of_ideal")
			})
		}
	}
}

// validatedRunner is a runner of m that has fed tokens, each step's logits
// and routing decisions checked against the CPU (STYLE.md: validate, then
// time).
func validatedRunner(b *testing.B, dev *vk.Device, m *mod.Model, routing mod.Routing, opts Options, tokens []int32) *Runner {
	run, err := New(dev, m, routing, opts)
	require.NoError(b, err)
	b.Cleanup(run.Close)
	cpu, err := m.NewState(routing)
	require.NoError(b, err)
	for i, tok := range tokens {
		want, err := cpu.Forward([]int32{tok}, false)
		require.NoError(b, err)
		got, err := run.Feed([]int32{tok})
		require.NoError(b, err)
		require.Empty(b, closeErr(want, got, tolLogits), "step %d", i)
		entries, err := run.CacheEntries()
		require.NoError(b, err)
		for l := range entries {
			if m.Config.Routed[l] {
				require.Equal(b, cpu.Selected[l], entries[l], "step %d layer %d: routing", i, l)
			}
		}
	}
	return run
}

func mustDownloadU32(t testing.TB, b *vk.Buffer, n int) []uint32 {
	t.Helper()
	out, err := downloadU32(b, n)
	require.NoError(t, err)
	return out
}
