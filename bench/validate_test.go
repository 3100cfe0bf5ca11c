package bench

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/synthtest"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/quant"
	"github.com/modrun/modrun/mod/synth"
)

// scripted is a runner whose Feed returns its steps' logits in turn.
type scripted struct {
	steps [][]float32
	i     int
}

func (s *scripted) Feed([]int32) ([]float32, error) {
	l := append([]float32(nil), s.steps[s.i]...)
	s.i++
	return l, nil
}
func (s *scripted) Pos() int        { return s.i }
func (s *scripted) ContextLen() int { return 100 }
func (s *scripted) Reset()          { s.i = 0 }

// Validation refuses what a logit error within the path's bound D cannot
// explain, and reports the rest: a near-tie flipped, or a tail token's
// logit off by more than D, is no refusal.
func TestValidateRefusesOnlyWhatRoundingCannotExplain(t *testing.T) {
	tol := ValidationTolerance{Abs: 0.01, Path: "test"} // D = 0.01 at every step
	ref := &scripted{steps: [][]float32{{1, 0.999, 0}, {10, 0, -10}, {3, 0, 0}}}

	// Step 0: the near-tie flips (margin 0.001 < 2D); step 1: the tail
	// token's logit is 1 off (its probability is e^-20: KL ~1e-8).
	ok := &scripted{steps: [][]float32{{0.999, 1, 0}, {10, 0, -9}, {3, 0, 0}}}
	st, err := validate(ok, ref, []int32{1}, 2, tol)
	require.NoError(t, err)
	assert.Equal(t, 3, st.Steps)
	assert.Equal(t, 1, st.Flips)
	assert.InDelta(t, 2.0/3, st.Top1Agreement, 1e-12)
	assert.InDelta(t, 1, st.MaxLogitDiff, 1e-6, "reported, not refused")
	assert.InDelta(t, 0.1, st.MaxRelLogitDiff, 1e-6, "1 of the step's largest |logit| 10")
	kl0 := klDivergence([]float32{1, 0.999, 0}, []float32{0.999, 1, 0})
	kl1 := klDivergence([]float32{10, 0, -10}, []float32{10, 0, -9})
	assert.Less(t, kl1, 1e-7, "the tail token barely moves the distribution")
	assert.Equal(t, max(kl0, kl1), st.MaxKL)
	assert.InDelta(t, (kl0+kl1)/3, st.MeanKL, 1e-15)

	for _, c := range []struct {
		name string
		got  [][]float32
		want string
	}{
		{"a distribution moved", [][]float32{{1, 0.999, 0}, {10, 0, -10}, {3, 0.5, 0.5}},
			"validation failed at step 2 (test tolerance, logit error D = 0.01 + 0 × largest |logit|: ): the next-token distribution is KL"},
		{"a decisive flip", [][]float32{{1, 0.999, 0}, {0, 10, -10}, {3, 0, 0}},
			"validation failed at step 1"},
		{"not a number", [][]float32{{1, 0.999, float32(math.NaN())}, {10, 0, -10}, {3, 0, 0}},
			"validation failed at step 0 (test tolerance, logit error D = 0.01 + 0 × largest |logit|: ): a logit is not a number"},
	} {
		_, err := validate(&scripted{steps: c.got}, ref, []int32{1}, 2, tol)
		assert.ErrorContains(t, err, c.want, c.name)
	}

	// The margin rule alone: a flip over 2D whose distribution barely moved.
	s := stepComparison{scale: 1, margin: 0.5, wantTop: 0, gotTop: 1, finite: true}
	assert.ErrorContains(t, s.check(ValidationTolerance{Abs: 0.1}, false), "greedy token 1, where the CPU reference's is 0 by a margin of 0.5, more than a logit error within D = 0.1 can flip")
	s.margin = 0.19
	assert.NoError(t, s.check(ValidationTolerance{Abs: 0.1}, false), "within 2D: a near-tie")
}

// KL(p || q) of two logit vectors: zero for a shift, and the textbook value
// for two coins.
func TestKLDivergence(t *testing.T) {
	assert.InDelta(t, 0, klDivergence([]float32{1, 2, 3}, []float32{11, 12, 13}), 1e-12)
	// p = (1/2, 1/2), q = (1/(1+e), e/(1+e)).
	e := math.E
	want := 0.5*math.Log(0.5*(1+e)) + 0.5*math.Log(0.5*(1+e)/e)
	assert.InDelta(t, want, klDivergence([]float32{0, 0}, []float32{0, 1}), 1e-12)
}

// planted corrupts a real backend's logits as a broken kernel would, keeping
// the backend's path (its 8-bit activations) and so its tolerance.
type planted struct {
	engine.Runner
	corrupt func(logits, previous []float32)
	prev    []float32
}

func (p *planted) Feed(tokens []int32) ([]float32, error) {
	l, err := p.Runner.Feed(tokens)
	if err != nil {
		return l, err
	}
	cur := append([]float32(nil), l...)
	if p.prev != nil {
		p.corrupt(l, p.prev)
	}
	p.prev = cur
	return l, nil
}
func (p *planted) Reset() { p.Runner.Reset(); p.prev = nil }
func (p *planted) QuantizedActivations() bool {
	q, ok := p.Runner.(interface{ QuantizedActivations() bool })
	return ok && q.QuantizedActivations()
}

// Bench refuses a backend whose kernel results are corrupted, on the CPU
// backend's loosest tolerance (8-bit activations, K-quant weights) and on
// a trained model alike, while the same backend uncorrupted passes. The
// corruptions are the bugs kernels have had: a stale buffer (the logits of
// the previous position) and a tile mis-indexed (each 32 rows of the
// output product written to the neighbouring tile's place).
func TestBenchRefusesPlantedErrors(t *testing.T) {
	q4km, err := quant.Parse("q4_k_m")
	require.NoError(t, err)
	random, err := synth.Build(synthtest.Tiny, synth.Options{Scheme: q4km, Seed: 5})
	require.NoError(t, err)
	defer random.Close()
	trained, err := mod.Open(benchModel)
	require.NoError(t, err)
	defer trained.Close()
	corruptions := map[string]func(l, prev []float32){
		"stale logits": func(l, prev []float32) { copy(l, prev) },
		"tiles swapped": func(l, _ []float32) {
			for i := 0; i+64 <= len(l); i += 64 {
				for j := i; j < i+32; j++ {
					l[j], l[j+32] = l[j+32], l[j]
				}
			}
		},
	}
	for name, m := range map[string]*mod.Model{"random q4_k_m": random.Model, "trained": trained} {
		b, _, err := engine.OpenBackend(m, mod.RoutingRouter, engine.BackendOptions{Name: engine.BackendCPU, ContextLen: 64})
		require.NoError(t, err)
		defer b.Close()
		tol := toleranceFor(b.Runner, m)
		if name == "random q4_k_m" {
			require.Equal(t, tolCPUOther, tol, "the loosest tolerance")
		}
		prompt := []int32{1, 80, 111, 122, 259, 101, 120, 259}
		o := Options{PromptTokens: 8, DecodeTokens: 4, ValidateTokens: 8}
		k, err := NewBenchmark(b, m, mod.RoutingRouter, prompt, o)
		require.NoError(t, err, "%s uncorrupted", name)
		t.Logf("%s uncorrupted (%s): %+v", name, tol.Path, k.Result().Validation)
		for what, corrupt := range corruptions {
			bad := &engine.Backend{Runner: &planted{Runner: b.Runner, corrupt: corrupt}, Name: "cpu"}
			k, err := NewBenchmark(bad, m, mod.RoutingRouter, prompt, o)
			assert.ErrorContains(t, err, "validation failed", "%s, %s", name, what)
			t.Logf("%s, %s: %v; %+v", name, what, err, k.Result().Validation)
		}
	}
}

// The tolerance follows the path and the weight types.
func TestToleranceFor(t *testing.T) {
	for _, c := range []struct {
		typ  gguf.TensorType
		want ValidationTolerance
	}{{gguf.TypeF32, tolFloat}, {gguf.TypeQ8_0, tolCPU8}, {gguf.TypeQ4_0, tolCPU8}, {gguf.TypeQ4_K, tolCPUOther}, {gguf.TypeQ3_K, tolCPUOther}, {gguf.TypeQ5_1, tolCPU8}} {
		m := synthtest.Build(t, c.typ, 0)
		b, _, err := engine.OpenBackend(m.Model, mod.RoutingRouter, engine.BackendOptions{Name: engine.BackendCPU, ContextLen: 16})
		require.NoError(t, err)
		assert.Equal(t, c.want, toleranceFor(b.Runner, m.Model), c.typ.String())
		b.Close()
	}
	m := synthtest.Build(t, gguf.TypeQ8_0, 0)
	ref, err := engine.NewCPU(m.Model, mod.RoutingRouter)
	require.NoError(t, err)
	assert.Equal(t, tolFloat, toleranceFor(ref, m.Model), "the reference itself")
}

// routed is a scripted runner with routing: the count its one routed layer
// (1) took after each Feed, and the score of the Feed's token there.
type routed struct {
	scripted
	counts []int
	scores []float32
}

func (r *routed) RoutingStats() []engine.LayerStat {
	return []engine.LayerStat{{Layer: 1, Selected: r.counts[r.i-1], Seen: r.i}}
}
func (r *routed) Routes() [][]mod.Route {
	return [][]mod.Route{{{Layer: 1, Score: r.scores[r.i-1], Selected: r.scores[r.i-1] > 0}}}
}

// A routed layer that decides a token otherwise than the reference is a
// near-tie when the reference's score was within the bound of 0: the steps
// after it are reported, not refused (the two caches now differ). Far from
// 0 it is refused.
func TestValidateRoutingNearTie(t *testing.T) {
	tol := ValidationTolerance{Abs: 0.01, Path: "test"}
	logits := [][]float32{{3, 0, 0}, {3, 0, 0}, {3, 0, 0}}
	moved := [][]float32{{3, 0, 0}, {3, 0, 0}, {3, 1, 1}} // past the bound, after the flip
	for _, c := range []struct {
		name   string
		scores []float32
		want   string
	}{
		{"near-tie", []float32{1, 0.005, 1}, ""},
		{"decisive", []float32{1, 0.5, 1}, "validation failed at step 1: routed layer 1 took 2 tokens, the CPU reference 1, but no router score of the step was within a near-tie of 0 (the nearest 0.5, the bound 0.01)"},
	} {
		ref := &routed{scripted: scripted{steps: logits}, counts: []int{1, 1, 1}, scores: c.scores}
		b := &routed{scripted: scripted{steps: moved}, counts: []int{1, 2, 2}, scores: c.scores}
		st, err := validate(b, ref, []int32{1}, 2, tol)
		if c.want != "" {
			assert.ErrorContains(t, err, c.want, c.name)
			continue
		}
		require.NoError(t, err, c.name)
		assert.True(t, st.RoutingNearTie)
		assert.Equal(t, 1, st.RoutingNearTieStep)
		assert.Equal(t, 3, st.Steps)
		assert.Positive(t, st.MaxKL, "the step after the flip is reported")
	}
	// Without the flip, the same logits are refused.
	ref := &routed{scripted: scripted{steps: logits}, counts: []int{1, 1, 1}, scores: []float32{1, 0.005, 1}}
	b := &routed{scripted: scripted{steps: moved}, counts: []int{1, 1, 1}, scores: []float32{1, 0.005, 1}}
	_, err := validate(b, ref, []int32{1}, 2, tol)
	assert.ErrorContains(t, err, "validation failed at step 2 (test tolerance")
}
