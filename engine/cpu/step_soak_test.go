package cpu

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
)

// TestStepSoak runs the CPU step runner under the scheduler for a
// thousand steps of random joins, cancels and finishes, on a pool too
// small for all of them at once (so sequences wait and are preempted) and
// with a prefix cache that half the prompts share a system prompt with:
// every sequence that finished gives its solo run's greedy tokens and its
// logits within stepTol, and at the end every page is back.
func TestStepSoak(t *testing.T) {
	sm := buildSynth(t, tiny, gguf.TypeQ8_0, 0.25)
	st, err := NewStepper(sm.Model, mod.RoutingPredictor, Options{ContextLen: 128})
	require.NoError(t, err)
	const bt = 16
	pages := sched.PagesFor(st.Layout(), 3, 128, bt) // room for 3 full contexts, 12 sequences live
	s, err := sched.New(st, sched.Options{BlockTokens: bt, Pages: pages, BatchTokens: 40, PrefixCache: true})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(11, 1000))
	nv := sm.Model.Config.NVocab
	system := randomPrompt(rng, 37, nv)
	type running struct {
		q   *sched.Seq
		req sched.Request
	}
	var live, done []running
	steps := 1000
	if testing.Short() {
		steps = 200
	}
	for step := 0; step < steps; step++ {
		if rng.IntN(3) == 0 && len(live) < 12 {
			prompt := randomPrompt(rng, 1+rng.IntN(40), nv)
			if rng.IntN(2) == 0 {
				prompt = append(slices.Clone(system), prompt[1:]...)
			}
			req := sched.Request{Prompt: prompt, MaxTokens: 1 + rng.IntN(30), KeepLogits: true}
			q, err := s.Add(req)
			require.NoError(t, err)
			live = append(live, running{q, req})
		}
		if rng.IntN(30) == 0 && len(live) > 0 {
			s.Cancel(live[rng.IntN(len(live))].q)
		}
		_, err := s.Step()
		require.NoError(t, err)
		live = slices.DeleteFunc(live, func(r running) bool {
			if r.q.Done() {
				done = append(done, r)
			}
			return r.q.Done()
		})
	}
	drain(t, s)
	done = append(done, live...)
	checked, worst := 0, 0.0
	for _, r := range done {
		require.NoError(t, r.q.Err)
		if r.q.Stop == sched.StopCancel {
			continue
		}
		want := runSolo(t, sm.Model, mod.RoutingPredictor, r.req)
		assert.Equal(t, want.tokens, r.q.Tokens(), "seq %d (%s)", r.q.ID, r.q.Stop)
		for j := range r.q.Logits {
			worst = max(worst, relDiff(r.q.Logits[j], want.logits[j]))
		}
		checked++
	}
	stats := s.Stats()
	t.Logf("%d sequences (%d checked), %d steps (%d shared), %d rows, %d waits, %d preemptions, %d reused tokens, at most %d of %d pages",
		len(done), checked, stats.Steps, stats.SharedSteps, stats.Rows, stats.Waits, stats.Preemptions, stats.ReusedTokens, stats.MaxPagesInUse, pages)
	t.Logf("max |Δlogit| / max |logit| against solo = %.2g", worst)
	assert.LessOrEqual(t, worst, stepTol(sm.Model))
	assert.Positive(t, stats.Waits+stats.Preemptions, "the pool made sequences wait")
	assert.Positive(t, stats.ReusedTokens, "the system prompt was reused")
	s.ClearPrefix()
	assert.Equal(t, pages, s.Pool().Free(), "no page leaked")
}
