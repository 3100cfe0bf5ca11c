// Package schedtest holds what the step runners' equality tests share
// (engine/cpu, engine/vulkan): a scheduler driven through sequences that
// join and leave at random steps, each sequence's run alone, and the
// comparison of the two.
package schedtest

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/mod"
)

// JoinAndLeave adds n sequences of different prompt lengths (up to 60
// tokens of a vocabulary of nv, BOS first) to s at random steps and steps
// s until all have ended: each leaves at its own max tokens, every fifth
// may stop at EOS (2) first, and two (3 and 11, when there are) are
// cancelled. Every request keeps its logits and routing.
func JoinAndLeave(t testing.TB, s *sched.Scheduler, nv, n int) ([]sched.Request, []*sched.Seq) {
	t.Helper()
	return JoinAndLeaveKeeping(t, s, nv, n, func(int) bool { return true })
}

// JoinAndLeaveKeeping is JoinAndLeave where sequence i keeps its logits
// only when keep(i) says so: the others' greedy rows may be drawn by the
// runner (sched.ArgmaxRunner), and only their tokens are compared.
func JoinAndLeaveKeeping(t testing.TB, s *sched.Scheduler, nv, n int, keep func(i int) bool) ([]sched.Request, []*sched.Seq) {
	t.Helper()
	rng := rand.New(rand.NewPCG(3, 33))
	reqs := make([]sched.Request, n)
	join := make([]int, n)
	for i := range reqs {
		prompt := []int32{1}
		for range rng.IntN(60) {
			prompt = append(prompt, int32(3+rng.IntN(nv-3)))
		}
		reqs[i] = sched.Request{Prompt: prompt, MaxTokens: 4 + rng.IntN(30), KeepLogits: keep(i), KeepRoutes: true}
		if i%5 == 0 {
			reqs[i].Stop = []int32{2} // EOS may come first
		}
		join[i] = rng.IntN(30)
	}
	cancelAt := map[int]int{3: 12, 11: 25} // sequence -> step
	seqs := make([]*sched.Seq, n)
	for step := 0; ; step++ {
		for i := range reqs {
			if join[i] == step {
				var err error
				seqs[i], err = s.Add(reqs[i])
				require.NoError(t, err)
			}
		}
		for i, at := range cancelAt {
			if at == step && i < n && seqs[i] != nil {
				s.Cancel(seqs[i])
			}
		}
		more, err := s.Step()
		require.NoError(t, err)
		if !more && step > 30 {
			return reqs, seqs
		}
	}
}

// Feeder is a single-sequence runner (cpu.Runner, vulkan.Runner).
type Feeder interface {
	Feed(tokens []int32) ([]float32, error)
	Routes() [][]mod.Route
	Pos() int
	ContextLen() int
}

// Solo is one sequence run alone: its tokens, the logits of each draw and
// each position's routing.
type Solo struct {
	Tokens []int32
	Logits [][]float32
	Routes [][]mod.Route
}

// RunSolo runs req alone on run (fresh or reset): the prompt in one
// Feed, then one greedy token at a time (ties to the lower id).
func RunSolo(t testing.TB, run Feeder, req sched.Request) Solo {
	t.Helper()
	var out Solo
	feed := append([]int32(nil), req.Prompt...)
	for {
		logits, err := run.Feed(feed)
		require.NoError(t, err)
		for _, rt := range run.Routes() {
			out.Routes = append(out.Routes, append([]mod.Route(nil), rt...))
		}
		out.Logits = append(out.Logits, append([]float32(nil), logits...))
		id := int32(0)
		for i, x := range logits {
			if x > logits[id] {
				id = int32(i)
			}
		}
		if len(req.Stop) > 0 && id == req.Stop[0] {
			return out
		}
		out.Tokens = append(out.Tokens, id)
		if run.Pos() >= run.ContextLen() || len(out.Tokens) >= req.MaxTokens {
			return out
		}
		feed = []int32{id}
	}
}

// Check compares each of seqs with its request run alone (solo): the
// greedy tokens and every routing decision equal (a cancelled sequence's
// as far as it went), and it returns the worst rel of a draw's logits
// (of the requests that keep them).
func Check(t testing.TB, reqs []sched.Request, seqs []*sched.Seq, solo func(sched.Request) Solo, rel func(got, want []float32) float64) float64 {
	t.Helper()
	worst := 0.0
	for i, q := range seqs {
		require.NoError(t, q.Err, "seq %d", i)
		want := solo(reqs[i])
		got := q.Tokens()
		if q.Stop == sched.StopCancel {
			require.LessOrEqual(t, len(got), len(want.Tokens))
			want.Tokens, want.Logits = want.Tokens[:len(got)], want.Logits[:len(q.Logits)]
		}
		require.Equal(t, want.Tokens, got, "seq %d (%s): tokens", i, q.Stop)
		if !reqs[i].KeepLogits {
			require.Empty(t, q.Logits, "seq %d: logits not kept", i)
			want.Logits = nil
		}
		require.Len(t, q.Logits, len(want.Logits), "seq %d: draws", i)
		for j := range q.Logits {
			worst = max(worst, rel(q.Logits[j], want.Logits[j]))
		}
		for p, rt := range q.Routes {
			require.Less(t, p, len(want.Routes))
			for j := range rt {
				assert.Equal(t, want.Routes[p][j].Selected, rt[j].Selected, "seq %d position %d layer %d: score %g alone, %g batched", i, p, rt[j].Layer, want.Routes[p][j].Score, rt[j].Score)
			}
		}
	}
	return worst
}
