package vulkan

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/engine/sched/schedtest"
	"github.com/modrun/modrun/internal/poison"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// runStepSolo is req alone on run (reset first): the prompt in one Feed
// (the batched prefill), then one greedy token at a time (the decode
// step).
func runStepSolo(t *testing.T, run *Runner, req sched.Request) schedtest.Solo {
	t.Helper()
	run.Reset()
	return schedtest.RunSolo(t, run, req)
}

// stepBT is the tokens a page of the step tests' pools holds.
const stepBT = 16

// stepScheduler is run's step runner for up to seqs sequences a step, its
// device pool reserved for poolSeqs sequences of poolTokens tokens each in
// pages of stepBT, and a scheduler over it that steps up to the runner's
// MaxRows rows at once.
func stepScheduler(t testing.TB, run *Runner, seqs, poolSeqs, poolTokens int) (*Stepper, *sched.Scheduler) {
	t.Helper()
	st, err := run.Stepper(seqs)
	require.NoError(t, err)
	pages := sched.PagesFor(st.Layout(), poolSeqs, poolTokens, stepBT)
	require.NoError(t, st.Reserve(pages, stepBT))
	s, err := sched.New(st, sched.Options{BlockTokens: stepBT, Pages: pages, BatchTokens: st.MaxRows()})
	require.NoError(t, err)
	return st, s
}

// stepTolVK is the logits' tolerance of a step against the solo run on
// the same device, relative to the largest logit: the step's rows take
// the batch kernels (matmul, paged attention: each invocation sums every
// 16th key, then the workgroup combines) where the solo decode takes
// matvec and decode attention, so the float sums round differently; with
// F32 caches the difference is summation order only, as between the GPU
// and the CPU (tolLogits, 1e-4 absolute on logits of order 10).
//
// With an F16 pool the keys and values are halves on both sides, every
// entry read as a half, the row's own included (paged_attention,
// decode_attention, decode_attend and the batched prefill alike), but f32
// values a few ulps apart round to halves a half-ulp apart where they
// straddle a boundary.
// Each side's logits are within the F16 cache's bound of the F32
// reference (reference_test.go: its F32 path's, plus 2·max|ref16 -
// ref32|), so step - solo is within stepTolVK plus 4·max|ref16 - ref32|
// (relative, as stepTolVK), ref16 and ref32 run on each solo sequence
// (halfStepBound; the same for the tensor-core matmul's rounded operands).
const stepTolVK = 1e-4

// stepModelsVK are the models the step is checked on: dense, MoD with
// router and with predictor routing.
func stepModelsVK(t *testing.T) []struct {
	name    string
	m       *mod.Model
	routing mod.Routing
} {
	dense := openModel(t, "../../models/tinystories-dense.gguf")
	modm := openModel(t, "../../models/tinystories-mod.gguf")
	return []struct {
		name    string
		m       *mod.Model
		routing mod.Routing
	}{{"dense", dense, mod.RoutingRouter}, {"mod router", modm, mod.RoutingRouter}, {"mod predictor", modm, mod.RoutingPredictor}}
}

// Sixteen sequences of different prompt lengths join at random steps and
// leave at different ones (their own max tokens, a stop token, two
// cancelled), decoding and prefilling in the same steps under a small
// --batch-tokens, on the Vulkan step runner: each sequence's greedy tokens
// and routing decisions are its solo run's on the same device, its logits
// within stepTolVK (and the F16 pool's bound with an F16 pool). Every
// other sequence keeps no logits, so its draws are the device's argmax
// (StepArgmax) in the same steps as the others' logits. Under each of
// deviceProfiles: the step's paged kernels are the same under both, the
// solo run's are not (fused norm and attention, split attention), and the
// MoD model with its predictor runs all of them (its dense layers too),
// so the GPU profile takes that model alone, with each pool, to keep CI's
// time (the dense and router runs would add 11 s on lavapipe).
func TestVulkanStepMatchesSolo(t *testing.T) {
	dev := openDevice(t, true)
	for _, pc := range deviceProfiles(dev) {
		for i, sm := range stepModelsVK(t) {
			if pc.name != "own" && i != 2 {
				continue
			}
			t.Run(pc.name+"/"+sm.name, func(t *testing.T) { vulkanStepMatchesSolo(t, dev, pc.prof, sm.m, sm.routing, "f32", 16) })
		}
		// The F16 pool (a GPU's default): paged_kv_f16 and paged_attention_f16,
		// against the solo run's F16 cache.
		sm := stepModelsVK(t)[2]
		t.Run(pc.name+"/"+sm.name+" f16", func(t *testing.T) { vulkanStepMatchesSolo(t, dev, pc.prof, sm.m, sm.routing, "f16", 16) })
	}
	// The tensor-core matmul's profile, its product emulated: steps of up
	// to 32 rows take matmul.comp's narrow tiles (Stepper.narrow), wider
	// ones and the solo run's prompts the tensor-core tiles. The default,
	// hilo kernel keeps f32's precision: stepTolVK. The f16-operand kernel
	// (MODRUN_TENSOR_CORES=f16) puts each side's logits within
	// 2·max|refHalf - ref32| of the f32 reference's (reference_test.go,
	// with mod.State.MatmulHalf), so within stepTolVK + 4·that of each
	// other, as an F16 pool's; the tokens and routing equal.
	sm := stepModelsVK(t)[2]
	coop := DeviceProfile(dev.Info())
	coop.MatmulCoop, coop.MatmulCoopEmulate = true, true
	t.Run("matmul-coop-emulated/"+sm.name, func(t *testing.T) { vulkanStepMatchesSolo(t, dev, &coop, sm.m, sm.routing, "f32", 16) })
	coopHalf := coop
	coopHalf.MatmulCoopHalf = true
	t.Run("matmul-coop-f16-emulated/"+sm.name, func(t *testing.T) { vulkanStepMatchesSolo(t, dev, &coopHalf, sm.m, sm.routing, "f32", 16) })
	// The direct matmul (MODRUN_MATMUL_DIRECT=1) at every row count: each
	// step's and prompt's matmuls through the planes, hilo, within the same
	// bound.
	// Under a GPU's profile, so that the products are cut along K (a
	// slice of one step) as a GPU cuts its small grids: a routed block's
	// cut is planned for its bound, whatever its count.
	direct := gpuProfileOn(coop.Device, false)
	direct.MatmulCoop, direct.MatmulCoopEmulate = true, true
	direct.MatmulDirect, direct.MatmulDirectMin, direct.MatmulDirectSlice = true, 0, 32
	t.Run("matmul-direct-split-emulated/"+sm.name, func(t *testing.T) { vulkanStepMatchesSolo(t, dev, &direct, sm.m, sm.routing, "f32", 16) })
}

func vulkanStepMatchesSolo(t *testing.T, dev *vk.Device, prof *shaders.Profile, m *mod.Model, routing mod.Routing, kv string, nSeqs int) {
	const ctx = 128
	run, err := New(dev, m, routing, Options{KVType: kv, ContextLen: ctx, UBatch: 48, DeviceProfile: prof})
	require.NoError(t, err)
	defer run.Close()
	st, s := stepScheduler(t, run, 4, nSeqs, ctx)
	reqs, seqs := schedtest.JoinAndLeaveKeeping(t, s, m.Config.NVocab, nSeqs, func(i int) bool { return i%2 == 0 })
	solo, err := New(dev, m, routing, Options{KVType: kv, ContextLen: ctx, Trace: true, DeviceProfile: prof})
	require.NoError(t, err)
	defer solo.Close()
	tol := stepTolVK
	coop := prof != nil && prof.MatmulCoop && prof.MatmulCoopHalf // hilo's operands are f32's
	worst := schedtest.Check(t, reqs, seqs, func(req sched.Request) schedtest.Solo {
		out := runStepSolo(t, solo, req)
		if kv == "f16" || coop {
			tol = max(tol, stepTolVK+4*halfStepBound(t, m, routing, req, out, kv, coop))
		}
		return out
	}, relDiffVK)
	if m.Config.IsMoD() {
		for i, q := range seqs {
			require.NotEmpty(t, q.Routes, "seq %d: routes", i)
		}
	}
	stats := s.Stats()
	t.Logf("%d steps (%d shared), %d rows; max |Δlogit| / max |logit| against solo = %.2g, bound %.2g", stats.Steps, stats.SharedSteps, stats.Rows, worst, tol)
	assert.Greater(t, stats.SharedSteps, stats.Steps/2, "most steps ran rows of several sequences")
	assert.Positive(t, st.Phases().Argmax, "greedy rows drawn on the device")
	assert.LessOrEqual(t, worst, tol)
	assert.Equal(t, s.Pool().Pages(), s.Pool().Free(), "every page back")
}

// halfStepBound is max|ref16 - ref32| / max|ref32| over the draws of solo,
// req's solo run: the effect of the runner's halves (an F16 cache kv, the
// tensor-core matmul's operands with coop) on its logits, relative as
// relDiffVK, from the reference fed the same tokens with and without them.
func halfStepBound(t *testing.T, m *mod.Model, routing mod.Routing, req sched.Request, solo schedtest.Solo, kv string, coop bool) float64 {
	ref := newReferenceOf(t, m, routing, kv, coop)
	worst := 0.0
	feed := req.Prompt
	for j := range solo.Logits {
		want, err := ref.State.Forward(feed, false)
		require.NoError(t, err)
		want16, err := ref.half.Forward(feed, false)
		require.NoError(t, err)
		worst = max(worst, relDiffVK(want16, want))
		if j < len(solo.Tokens) {
			feed = solo.Tokens[j : j+1]
		}
	}
	return worst
}

// relDiffVK is max |a-b| / max |b|.
func relDiffVK(a, b []float32) float64 {
	var d, m float64
	for i := range b {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
		m = max(m, math.Abs(float64(b[i])))
	}
	if math.IsNaN(d) {
		return math.Inf(1)
	}
	return d / max(m, 1e-30)
}

// TestVulkanStepSoak runs the Vulkan step runner under the scheduler for
// 300 steps of random joins, cancels and finishes on a pool too small for
// all of them (sequences wait and are preempted) with a prefix cache that
// half the prompts share a system prompt with (shared pages, copied
// before a write: CopyPage): every sequence that finished gives its solo
// run's greedy tokens and logits within stepTolVK, and every page is
// back at the end.
func TestVulkanStepSoak(t *testing.T) {
	dev := openDevice(t, true)
	m := stepModelsVK(t)[2] // MoD, predictor routing
	const ctx, bt = 128, 16
	run, err := New(dev, m.m, m.routing, Options{KVType: "f32", ContextLen: ctx, UBatch: 40})
	require.NoError(t, err)
	defer run.Close()
	st, err := run.Stepper(4)
	require.NoError(t, err)
	pages := sched.PagesFor(st.Layout(), 1, ctx, bt) * 3 / 2 // room for 1.5 full contexts, 12 sequences live
	require.NoError(t, st.Reserve(pages, bt))
	s, err := sched.New(st, sched.Options{BlockTokens: bt, Pages: pages, BatchTokens: st.MaxRows(), PrefixCache: true})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(11, 300))
	nv := m.m.Config.NVocab
	prompt := func(n int) []int32 {
		p := []int32{1}
		for len(p) < n {
			p = append(p, int32(3+rng.IntN(nv-3)))
		}
		return p
	}
	system := prompt(37)
	type running struct {
		q   *sched.Seq
		req sched.Request
	}
	var live, done []running
	for step := 0; step < 300 || s.Busy(); step++ {
		if step < 300 && rng.IntN(3) == 0 && len(live) < 12 {
			p := prompt(1 + rng.IntN(40))
			if rng.IntN(2) == 0 {
				p = append(append([]int32(nil), system...), p[1:]...)
			}
			req := sched.Request{Prompt: p, MaxTokens: 1 + rng.IntN(30), KeepLogits: true}
			q, err := s.Add(req)
			require.NoError(t, err)
			live = append(live, running{q, req})
		}
		if step < 300 && rng.IntN(30) == 0 && len(live) > 0 {
			s.Cancel(live[rng.IntN(len(live))].q)
		}
		_, err := s.Step()
		require.NoError(t, err)
		kept := live[:0]
		for _, r := range live {
			if r.q.Done() {
				done = append(done, r)
			} else {
				kept = append(kept, r)
			}
		}
		live = kept
	}
	solo, err := New(dev, m.m, m.routing, Options{KVType: "f32", ContextLen: ctx})
	require.NoError(t, err)
	defer solo.Close()
	checked, worst := 0, 0.0
	for _, r := range done {
		require.NoError(t, r.q.Err)
		if r.q.Stop == sched.StopCancel {
			continue
		}
		want := runStepSolo(t, solo, r.req)
		assert.Equal(t, want.Tokens, r.q.Tokens(), "seq %d (%s)", r.q.ID, r.q.Stop)
		for j := range r.q.Logits {
			worst = max(worst, relDiffVK(r.q.Logits[j], want.Logits[j]))
		}
		checked++
	}
	stats := s.Stats()
	t.Logf("%d sequences (%d checked), %d steps (%d shared), %d rows, %d waits, %d preemptions, %d reused tokens, at most %d of %d pages; max |Δlogit| / max |logit| against solo = %.2g",
		len(done), checked, stats.Steps, stats.SharedSteps, stats.Rows, stats.Waits, stats.Preemptions, stats.ReusedTokens, stats.MaxPagesInUse, pages, worst)
	assert.LessOrEqual(t, worst, stepTolVK)
	assert.Positive(t, stats.Waits+stats.Preemptions, "the pool made sequences wait")
	assert.Positive(t, stats.ReusedTokens, "the system prompt was reused")
	s.ClearPrefix()
	assert.Equal(t, pages, s.Pool().Free(), "no page leaked")
}

// With a NaN in a weight, a step's greedy row drawn on the device (its
// argmax alone) and one whose logits come back both end their sequence
// with ErrNonFinite at the prompt's last token, and draw nothing; under
// each of deviceProfiles (a GPU's argmax is argmax_wide).
func TestVulkanStepNonFinite(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, poison.Copy(t, "../../models/tinystories-dense.gguf", "blk.0.attn_q.weight", 5, float32(math.NaN())))
	for _, pc := range deviceProfiles(dev) {
		t.Run(pc.name, func(t *testing.T) {
			const ctx = 64
			run, err := New(dev, m, mod.RoutingRouter, Options{KVType: "f32", ContextLen: ctx, UBatch: 16, DeviceProfile: pc.prof})
			require.NoError(t, err)
			defer run.Close()
			st, s := stepScheduler(t, run, 2, 2, ctx)
			var seqs []*sched.Seq
			for _, keep := range []bool{false, true} {
				q, err := s.Add(sched.Request{Prompt: []int32{1, 400, 500}, MaxTokens: 4, KeepLogits: keep})
				require.NoError(t, err)
				seqs = append(seqs, q)
			}
			for s.Busy() {
				_, err := s.Step()
				require.NoError(t, err)
			}
			for i, q := range seqs {
				assert.Equal(t, sched.StopError, q.Stop, "seq %d", i)
				assert.ErrorIs(t, q.Err, mod.ErrNonFinite, "seq %d", i)
				assert.ErrorContains(t, q.Err, "at token 2", "seq %d", i)
				assert.Empty(t, q.Tokens(), "seq %d", i)
			}
			assert.Equal(t, 1, st.Phases().Argmax, "the first sequence's row drawn on the device")
		})
	}
}

// A step of many sequences may take more rows than one context holds:
// four 50-token prompts (200 rows, a context of 64) run in one step when
// UBatch allows (stepRows: a solo prefill's chunk stays at the context),
// and every sequence's greedy tokens and logits are its solo run's.
func TestVulkanStepRowsPastContext(t *testing.T) {
	dev := openDevice(t, true)
	m := stepModelsVK(t)[1] // MoD, router: the routed layers' selection over the whole step
	const ctx, seqs = 64, 4
	run, err := New(dev, m.m, m.routing, Options{KVType: "f32", ContextLen: ctx, UBatch: 256})
	require.NoError(t, err)
	defer run.Close()
	st, s := stepScheduler(t, run, seqs, seqs, ctx+2*stepBT)
	require.Equal(t, 4*ctx, st.MaxRows(), "seqs contexts")
	rng := rand.New(rand.NewPCG(4, 64))
	reqs := make([]sched.Request, seqs)
	q := make([]*sched.Seq, seqs)
	for i := range reqs {
		p := []int32{1}
		for len(p) < 50 {
			p = append(p, int32(3+rng.IntN(m.m.Config.NVocab-3)))
		}
		reqs[i] = sched.Request{Prompt: p, MaxTokens: 8, KeepLogits: i%2 == 0, KeepRoutes: true}
		q[i], err = s.Add(reqs[i])
		require.NoError(t, err)
	}
	for s.Busy() {
		_, err := s.Step()
		require.NoError(t, err)
	}
	assert.Equal(t, 200, st.Phases().Rows-(s.Stats().Steps-1)*seqs, "the prompts in one step, then a row a sequence")
	solo, err := New(dev, m.m, m.routing, Options{KVType: "f32", ContextLen: ctx, Trace: true})
	require.NoError(t, err)
	defer solo.Close()
	worst := schedtest.Check(t, reqs, q, func(req sched.Request) schedtest.Solo { return runStepSolo(t, solo, req) }, relDiffVK)
	assert.LessOrEqual(t, worst, stepTolVK)
}

// MODRUN_VEC_ROWS caps the rows a step runs as matvecs: at 1 every step
// of several sequences takes the matmul (on lavapipe its tiles; on a GPU
// its narrow, split ones), and the steps still match the solo runs.
// Values past the device's most, or not numbers, are refused by name.
func TestVecRowsEnv(t *testing.T) {
	dev := openDevice(t, false)
	sm := stepModelsVK(t)[0]
	assertEnvRefused(t, dev, sm.m, sm.routing, "MODRUN_VEC_ROWS", "x", "-1", "17", "1.5")
	t.Setenv("MODRUN_VEC_ROWS", "1")
	run, err := New(dev, sm.m, sm.routing, Options{})
	require.NoError(t, err)
	assert.Equal(t, 1, run.vecRows())
	run.Close()
	vulkanStepMatchesSolo(t, dev, nil, sm.m, sm.routing, "f32", 8)
}

// MODRUN_PROMPT_STEPS sets how many prompt tokens run one at a time where
// Options.PromptSteps does not (an explicit option wins); a count under 1
// or not a number is refused by name when a runner opens.
func TestPromptStepsEnv(t *testing.T) {
	for _, tc := range []struct {
		env       string
		opt, want int
	}{{"", 0, 0}, {"1", 0, 1}, {"3", 0, 3}, {"1", -1, 1}, {"3", 5, 5}, {"x", 2, 2}} {
		t.Setenv("MODRUN_PROMPT_STEPS", tc.env)
		got, err := promptStepsEnv(tc.opt, nil)
		require.NoError(t, err, "%q, option %d", tc.env, tc.opt)
		assert.Equal(t, tc.want, got, "%q, option %d", tc.env, tc.opt)
	}
	dev := openDevice(t, false)
	sm := stepModelsVK(t)[0]
	assertEnvRefused(t, dev, sm.m, sm.routing, "MODRUN_PROMPT_STEPS", "x", "0", "-1", "1.5")
	t.Setenv("MODRUN_PROMPT_STEPS", "3")
	run, err := New(dev, sm.m, sm.routing, Options{})
	require.NoError(t, err)
	assert.Equal(t, 3, run.PromptSteps())
	run.Close()
	// Unset: 1 where a short prompt runs as one matvec pass, and the steps
	// where no chunk of 2 rows or more does.
	t.Setenv("MODRUN_PROMPT_STEPS", "")
	for _, tc := range []struct {
		vecRows string
		want    int
	}{{"", 1}, {"1", DefaultPromptSteps}} {
		run, err := New(dev, sm.m, sm.routing, Options{Knobs: Knobs{"MODRUN_VEC_ROWS": tc.vecRows}})
		require.NoError(t, err)
		assert.Equal(t, tc.want, run.PromptSteps(), "MODRUN_VEC_ROWS=%q", tc.vecRows)
		run.Close()
	}
}

// narrowSpec fits the tile to a few rows: the power of two at or above n
// up to 32 on any base, 33-64 rows on the pipelined tile's 64-token
// variant (never on the others, nor past the base's own tile).
func TestNarrowSpec(t *testing.T) {
	pipe := shaders.MatmulSpecPipe
	for _, tc := range []struct {
		n    int
		base shaders.MatmulSpec
		want shaders.MatmulSpec
		ok   bool
	}{
		{5, shaders.MatmulSpecGPU, shaders.MatmulSpec{BM: 8, BN: 64, BK: 32, TM: 4, TN: 2, Along: true}, true},
		{16, pipe, shaders.MatmulSpec{BM: 16, BN: 64, BK: 32, TM: 4, TN: 4, Along: true}, true},
		{1, pipe, shaders.MatmulSpec{BM: 1, BN: 64, BK: 32, TM: 1, TN: 1, Along: true}, true},
		{33, pipe, narrowPipe, true},
		{64, pipe, narrowPipe, true},
		{65, pipe, pipe, false},
		{40, shaders.MatmulSpecGPU, shaders.MatmulSpecGPU, false},
		{40, shaders.MatmulSpec{BM: 128, BN: 64, BK: 16, TM: 8, TN: 4}, shaders.MatmulSpec{BM: 128, BN: 64, BK: 16, TM: 8, TN: 4}, false},
	} {
		got, ok := narrowSpec(tc.n, tc.base, true)
		assert.Equal(t, tc.ok, ok, "n=%d base %+v", tc.n, tc.base)
		assert.Equal(t, tc.want, got, "n=%d base %+v", tc.n, tc.base)
		require.NoError(t, got.Check())
	}
	assert.Equal(t, "matmul_pf_q4_k", narrowPipe.Kernel("q4_k"))
}

// assertEnvRefused: with environment variable name set to each of values,
// opening a runner of m fails naming the variable.
func assertEnvRefused(t *testing.T, dev *vk.Device, m *mod.Model, routing mod.Routing, name string, values ...string) {
	t.Helper()
	for _, v := range values {
		t.Setenv(name, v)
		_, err := New(dev, m, routing, Options{})
		assert.ErrorContains(t, err, name, "%q", v)
	}
}
