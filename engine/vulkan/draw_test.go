package vulkan

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/internal/drawref"
	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
)

// drawMarginVK is the least margin (drawref.Draw) of a draw the runner
// tests ask of the device on the same logits: the device's float32 sums
// move an interval's ends by a few millionths of the total
// (shaders.TestArgmaxWideDraw).
const drawMarginVK = 1e-5

// wideMiddle is the uniform number at the middle of the interval of a
// token drawn at random among those with a weight of 1e-3 of the total or
// more (the largest always has: the test model has 512).
func wideMiddle(rng *rand.Rand, logits []float32, d sched.Draw) float64 {
	w, z := drawref.WeightsTopK(logits, d.Temp, d.TopK, d.TopP, d.MinP)
	var wide []int
	for j, x := range w {
		if x/z >= 1e-3 {
			wide = append(wide, j)
		}
	}
	return drawref.Middle(w, z, wide[rng.IntN(len(wide))])
}

// TestFeedDraw: FeedDraw's token is the draw of the logits Feed returns
// for the same sequence (a twin runner fed the same tokens: the same
// kernels, the same logits) at temperatures 0.5, 1 and 1.5, for the
// prompt's prefill and the decode steps after it, unfiltered, at min-p
// 0.05, top-p 0.9, top-p 0.7 with min-p 0.2, top-k 5, and top-k 40 with
// top-p 0.8, u at the middle of a
// likely token's interval (always asked) or at
// random (asked where its margin allows); after the draws FeedArgmax and a greedy chain give the
// argmax again (the draw parameters are back at temperature 0). A chain
// of draws (FeedDrawChain) draws each step with its own number, as FeedDraw
// does (with min-p, top-p and top-k too), and a greedy chain after it gives argmaxes again.
// A min-p outside [0, 1) is refused by name. Under
// each of deviceProfiles: a GPU's head (argmax_wide) draws, lavapipe's
// argmax does not, and FeedDraw says so.
func TestFeedDraw(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../models/tinystories-mod.gguf")
	for _, pc := range deviceProfiles(dev) {
		t.Run(pc.name, func(t *testing.T) {
			open := func() *Runner {
				run, err := New(dev, m, mod.RoutingRouter, Options{KVType: "f32", ContextLen: 64, DeviceProfile: pc.prof})
				require.NoError(t, err)
				t.Cleanup(run.Close)
				return run
			}
			feed, draw := open(), open()
			if head := pc.prof.Head(); head[len(head)-1].Variant != "argmax_wide" {
				require.False(t, draw.DrawsOnDevice())
				_, err := draw.FeedDraw([]int32{1}, sched.Draw{Temp: 1}, 0.5)
				require.ErrorContains(t, err, "does not draw")
				return
			}
			require.True(t, draw.DrawsOnDevice())
			_, err := draw.FeedDraw([]int32{1}, sched.Draw{}, 0.5)
			require.ErrorContains(t, err, "temperature 0 must be above 0")
			_, err = draw.FeedDraw([]int32{1}, sched.Draw{Temp: 1, MinP: 1}, 0.5)
			require.ErrorContains(t, err, "min-p 1 in [0, 1)")
			draw.Reset()
			rng := rand.New(rand.NewPCG(5, 6))
			tokens := []int32{1, 403, 231, 263, 93, 298} // a prompt: the prefill's head
			asked := 0
			_, err = draw.FeedDraw([]int32{1}, sched.Draw{Temp: 1, TopK: -1}, 0.5)
			require.ErrorContains(t, err, "top-k -1 0 or more")
			draw.Reset()
			for step := range 18 {
				logits, err := feed.Feed(tokens)
				require.NoError(t, err)
				d := []sched.Draw{{}, {MinP: 0.05}, {TopP: 0.9}, {TopP: 0.7, MinP: 0.2}, {TopK: 5}, {TopK: 40, TopP: 0.8}}[step/3]
				d.Temp = []float32{0.5, 1, 1.5}[step%3]
				u := rng.Float64()
				if step%2 == 0 {
					u = wideMiddle(rng, logits, d)
				}
				id, err := draw.FeedDraw(tokens, d, u)
				require.NoError(t, err)
				want, margin := drawref.DrawTopK(logits, d.Temp, d.TopK, d.TopP, d.MinP, float64(float32(u)))
				if step%2 == 0 {
					require.GreaterOrEqual(t, margin, drawMarginVK, "step %d: u at the middle of an interval", step)
				}
				if margin >= drawMarginVK && drawref.TopKMargin(logits, d.TopK) > 0 { // equal logits at top-k's cut: the twin's and the draw's ties could part
					asked++
					require.Equal(t, int32(want), id, "step %d: %+v u %.9g", step, d, u)
				}
				tokens = []int32{id}
			}
			logits, err := feed.Feed(tokens)
			require.NoError(t, err)
			best, err := draw.FeedArgmax(tokens)
			require.NoError(t, err)
			require.Equal(t, stats.Argmax(logits), best, "the argmax after draws")
			n := draw.ChainSteps()
			require.Greater(t, n, 1, "the GPU profile chains")
			greedyChain := func(what string) {
				ids, err := draw.FeedArgmaxChain(best, n)
				require.NoError(t, err)
				for i, id := range ids {
					logits, err := feed.Feed([]int32{best})
					require.NoError(t, err)
					require.Equal(t, stats.Argmax(logits), id, "a greedy chain's step %d %s", i, what)
					best = id
				}
			}
			greedyChain("after draws")
			filtered := 0
			for round := range 5 { // a chain of draws: each step with its own number
				us := make([]float64, n)
				for i := range us {
					us[i] = rng.Float64()
					if round >= 1 { // far in the tail: left in the slots, they would not draw the argmax
						us[i] = 0.99 + 0.009*rng.Float64()
					}
				}
				d := []sched.Draw{{Temp: 1}, {Temp: 1}, {Temp: 1, MinP: 0.1}, {Temp: 1, TopP: 0.8}, {Temp: 1, TopK: 5}}[round] // filtered, the tail is the last kept tokens'
				ids, err := draw.FeedDrawChain(best, n, d, us)
				require.NoError(t, err)
				require.Len(t, ids, n)
				for i, id := range ids {
					logits, err := feed.Feed([]int32{best})
					require.NoError(t, err)
					want, margin := drawref.DrawTopK(logits, 1, d.TopK, d.TopP, d.MinP, float64(float32(us[i])))
					if plain, _ := drawref.Draw(logits, 1, float64(float32(us[i]))); plain != want {
						filtered++
					}
					if margin >= drawMarginVK && drawref.TopKMargin(logits, d.TopK) > 0 {
						asked++
						require.Equal(t, int32(want), id, "round %d: a chain's draw %d", round, i)
					}
					best = id
				}
			}
			greedyChain("after a chain of draws")
			require.Positive(t, filtered, "min-p, top-p or top-k moved a tail draw")
			t.Logf("%d of %d draws asked", asked, 18+5*n)
		})
	}
}

// recSampler draws as d says, with the uniform numbers of its own
// generator, on the device (sched.DeviceSampler) or here (Sample, with
// drawref.DrawTopK), and records each number and token.
type recSampler struct {
	d     sched.Draw
	rng   *rand.Rand
	src   *rand.PCG // rng's
	us    []float64
	ids   []int32
	hosts int // draws made here
}

func (r *recSampler) Plain() (sched.Draw, bool) { return r.d, true }

func (r *recSampler) Uniform() float64 {
	u := r.rng.Float64()
	r.us = append(r.us, u)
	return u
}

func (r *recSampler) Peek(n int) []float64 { return stats.Ahead(r.src, n) }

func (r *recSampler) Drawn(id int32) { r.ids = append(r.ids, id) }

func (r *recSampler) Sample(logits []float32) int32 {
	id, _ := drawref.DrawTopK(logits, r.d.Temp, r.d.TopK, r.d.TopP, r.d.MinP, r.Uniform())
	r.hosts++
	r.Drawn(int32(id))
	return int32(id)
}

// TestVulkanStepDraws: sampled sequences drawn on the device by the
// batched step (sched.DrawRunner: the draw rows beside greedy ones whose
// argmax the device takes, and beside rows whose logits come back, in the
// same steps, while other sequences prefill) each take the token of the
// draw of their own logits: each draw is checked against drawref.Draw of
// the logits the sequence's solo run gives when fed the same tokens,
// where its margin is above what the batched kernels' rounding can move
// (stepTolVK of the largest logit, over the temperature), one with
// min-p 0.1 (asked where no logit is within that rounding of its floor),
// one with top-p 0.6 (asked where its crossing is not within it either),
// one with top-k 12 and top-p 0.9 (asked where top-k's cut is not within
// it of the next logit either, and top-p's crossing among its tokens);
// greedy sequences give their solo run's tokens. Each uniform number is taken
// once, before its step, and each token drawn is handed to the sampler.
// Under each of deviceProfiles: lavapipe's own head does not draw, so the
// same sequences draw on the host there (Sample), through the same check.
func TestVulkanStepDraws(t *testing.T) {
	dev := openDevice(t, true)
	m := stepModelsVK(t)[2] // MoD, predictor routing
	for _, pc := range deviceProfiles(dev) {
		t.Run(pc.name, func(t *testing.T) {
			const ctx = 96
			run, err := New(dev, m.m, m.routing, Options{KVType: "f32", ContextLen: ctx, UBatch: 40, DeviceProfile: pc.prof})
			require.NoError(t, err)
			defer run.Close()
			st, s := stepScheduler(t, run, 6, 9, ctx)
			onDevice := st.DrawsOnDevice()
			rng := rand.New(rand.NewPCG(8, 9))
			nv := m.m.Config.NVocab
			var reqs []sched.Request
			var seqs []*sched.Seq
			var samplers []*recSampler
			for i := range 9 {
				prompt := []int32{1}
				for range 1 + rng.IntN(30) {
					prompt = append(prompt, int32(3+rng.IntN(nv-3)))
				}
				req := sched.Request{Prompt: prompt, MaxTokens: 8 + rng.IntN(12), KeepLogits: i%3 == 2}
				var rs *recSampler
				if d, ok := map[int]sched.Draw{0: {Temp: 0.7}, 1: {Temp: 1.1, TopK: 12, TopP: 0.9}, 3: {Temp: 1, MinP: 0.1}, 6: {Temp: 1.3, TopP: 0.6}}[i]; ok {
					src := rand.NewPCG(uint64(i), 1)
					rs = &recSampler{d: d, rng: rand.New(src), src: src}
					req.Sampler = rs
				}
				q, err := s.Add(req)
				require.NoError(t, err)
				reqs, seqs, samplers = append(reqs, req), append(seqs, q), append(samplers, rs)
				_, err = s.Step() // each joins a step later: prefills beside decodes
				require.NoError(t, err)
			}
			for more := true; more; {
				more, err = s.Step()
				require.NoError(t, err)
			}
			solo, err := New(dev, m.m, m.routing, Options{KVType: "f32", ContextLen: ctx, DeviceProfile: pc.prof})
			require.NoError(t, err)
			defer solo.Close()
			draws, asked := 0, 0
			for i, q := range seqs {
				require.NoError(t, q.Err, "seq %d", i)
				rs := samplers[i]
				if rs == nil {
					assert.Equal(t, runStepSolo(t, solo, reqs[i]).Tokens, q.Tokens(), "greedy seq %d", i)
					continue
				}
				require.Equal(t, q.Tokens(), rs.ids, "seq %d: every token drawn reached the sampler", i)
				require.Len(t, rs.us, len(rs.ids), "seq %d: one uniform number a draw", i)
				if onDevice {
					assert.Zero(t, rs.hosts, "seq %d: drawn on the device", i)
				} else {
					assert.Equal(t, len(rs.ids), rs.hosts, "seq %d: drawn here", i)
				}
				solo.Reset()
				feed := reqs[i].Prompt
				for j, id := range rs.ids {
					logits, err := solo.Feed(feed)
					require.NoError(t, err)
					big, best := 0.0, math.Inf(-1)
					for _, l := range logits {
						big, best = max(big, math.Abs(float64(l))), max(best, float64(l))
					}
					d := rs.d
					want, margin := drawref.DrawTopK(logits, d.Temp, d.TopK, d.TopP, d.MinP, float64(float32(rs.us[j])))
					if d.MinP > 0 {
						for _, l := range logits {
							if math.Abs(float64(l)-best-math.Log(float64(d.MinP))) < 4*stepTolVK*big {
								margin = 0 // the batched logits may put it either side of the floor
							}
						}
					}
					if d.TopP > 0 && drawref.TopPMarginTopK(logits, d.TopK, d.TopP) < 4*stepTolVK*big {
						margin = 0 // the batched logits' weights may cross at another logit
					}
					if drawref.TopKMargin(logits, d.TopK) < 4*stepTolVK*big {
						margin = 0 // the batched logits may order top-k's cut and the next the other way
					}
					draws++
					if margin >= drawMarginVK+4*stepTolVK*big/float64(rs.d.Temp) {
						asked++
						assert.Equal(t, int32(want), id, "seq %d draw %d: T %g u %.9g margin %.3g", i, j, rs.d.Temp, rs.us[j], margin)
					}
					feed = []int32{id}
				}
			}
			t.Logf("on the device %t: %d draws, %d asked; %d steps (%d shared)", onDevice, draws, asked, s.Stats().Steps, s.Stats().SharedSteps)
			assert.Greater(t, 2*asked, draws, "most draws asked")
			assert.Positive(t, st.Phases().Argmax, "rows drawn on the device")
			assert.Equal(t, s.Pool().Pages(), s.Pool().Free(), "every page back")
		})
	}
}
