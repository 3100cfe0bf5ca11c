package cpu

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/mod"
)

func openShipped(t *testing.T, name string) *mod.Model {
	m, err := mod.Open(filepath.Join("..", "..", "models", name))
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

func randomPrompt(rng *rand.Rand, n, nv int) []int32 {
	p := []int32{1}
	for len(p) < n {
		p = append(p, int32(3+rng.IntN(nv-3)))
	}
	return p
}

func drain(t *testing.T, s *sched.Scheduler) {
	t.Helper()
	for s.Busy() {
		_, err := s.Step()
		require.NoError(t, err)
	}
}

// A second request sharing a 200-token prefix with the first runs only
// its new tokens (the prefix's full pages come from the cache, the routed
// layers' partial last pages copied on write), and gives the tokens and
// logits it gives without the cache.
func TestStepPrefixReuse(t *testing.T) {
	m := openShipped(t, "tinystories-mod.gguf")
	for _, r := range []mod.Routing{mod.RoutingRouter, mod.RoutingPredictor} {
		st, err := NewStepper(m, r, Options{ContextLen: 512})
		require.NoError(t, err)
		s, err := sched.New(st, sched.Options{BlockTokens: 16, Pages: sched.PagesFor(st.Layout(), 4, 512, 16), BatchTokens: 64, PrefixCache: true})
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(5, 200))
		shared := randomPrompt(rng, 200, m.Config.NVocab)
		first := sched.Request{Prompt: append(append([]int32(nil), shared...), randomPrompt(rng, 10, m.Config.NVocab)[1:]...), MaxTokens: 30, KeepLogits: true}
		second := sched.Request{Prompt: append(append([]int32(nil), shared...), randomPrompt(rng, 15, m.Config.NVocab)[1:]...), MaxTokens: 12, KeepLogits: true, KeepRoutes: true}
		q1, err := s.Add(first)
		require.NoError(t, err)
		for len(q1.Tokens()) < 2 { // the first runs on beside the second
			_, err := s.Step()
			require.NoError(t, err)
		}
		// The first sequence still writes its routed layers' pages past the
		// prefix while the second shares them, and the third reads the cache
		// after both: a partial page not copied on write would show.
		third := second
		third.Prompt = append(append([]int32(nil), shared...), randomPrompt(rng, 7, m.Config.NVocab)[1:]...)
		for _, req := range []sched.Request{second, third} {
			q, err := s.Add(req)
			require.NoError(t, err)
			drain(t, s)
			require.NoError(t, q.Err)
			assert.Equal(t, 192, q.Reused, "%s: the prefix's 12 full blocks", r)
			assert.Equal(t, len(req.Prompt)-192+len(q.Tokens())-1, q.Ran, "%s: only the new prompt tokens and the draws ran", r)
			want := runSolo(t, m, r, req)
			assert.Equal(t, want.tokens, q.Tokens(), r)
			worst := 0.0
			for j := range q.Logits {
				worst = max(worst, relDiff(q.Logits[j], want.logits[j]))
			}
			for p := 192; p < len(q.Routes); p++ {
				for j, rt := range q.Routes[p] {
					assert.Equal(t, want.routes[p][j].Selected, rt.Selected, "%s position %d", r, p)
				}
			}
			t.Logf("%s: reused %d tokens, max |Δlogit| / max |logit| against no reuse = %.2g", r, q.Reused, worst)
			assert.LessOrEqual(t, worst, stepTol(m))
		}
		require.NoError(t, q1.Err)
		want := runSolo(t, m, r, first)
		assert.Equal(t, want.tokens, q1.Tokens())
		for j := range q1.Logits {
			assert.LessOrEqual(t, relDiff(q1.Logits[j], want.logits[j]), stepTol(m), "%s: the first sequence's draw %d", r, j)
		}
	}
}

// Sixteen short conversations at --ctx 4096 hold pages for their tokens,
// not for 16 x 4096; a budget too small for all of them at once completes
// every one with its solo tokens, the waits reported.
func TestStepMemory(t *testing.T) {
	m := openShipped(t, "tinystories-mod.gguf")
	const ctx, bt = 4096, 16
	st, err := NewStepper(m, mod.RoutingRouter, Options{ContextLen: ctx})
	require.NoError(t, err)
	lay := st.Layout()
	rng := rand.New(rand.NewPCG(9, 16))
	reqs := make([]sched.Request, 16)
	held := 0 // pages the tokens need, every routed layer taking every token
	for i := range reqs {
		reqs[i] = sched.Request{Prompt: randomPrompt(rng, 20+rng.IntN(40), m.Config.NVocab), MaxTokens: 8 + rng.IntN(16)}
		held += sched.PagesFor(lay, 1, len(reqs[i].Prompt)+reqs[i].MaxTokens, bt)
	}
	full := sched.PagesFor(lay, 16, ctx, bt)
	for _, c := range []struct {
		name  string
		pages int
	}{{"16 full contexts", full}, {"room for about 3", held / 5}} {
		t.Run(c.name, func(t *testing.T) {
			st, err := NewStepper(m, mod.RoutingRouter, Options{ContextLen: ctx})
			require.NoError(t, err)
			s, err := sched.New(st, sched.Options{BlockTokens: bt, Pages: c.pages, BatchTokens: 128})
			require.NoError(t, err)
			seqs := make([]*sched.Seq, len(reqs))
			for i, req := range reqs {
				seqs[i], err = s.Add(req)
				require.NoError(t, err)
			}
			drain(t, s)
			waits := 0
			for i, q := range seqs {
				require.NoError(t, q.Err)
				assert.Equal(t, runSolo(t, m, mod.RoutingRouter, reqs[i]).tokens, q.Tokens(), "seq %d", i)
				waits += q.Waits + q.Preemptions
			}
			stats := s.Stats()
			t.Logf("pool %d pages (16 x 4096 tokens: %d); at most %d in use, %d with memory (%d KiB), tokens' worst case %d; %d waits, %d preemptions",
				c.pages, full, stats.MaxPagesInUse, st.HeldPages(), st.HeldPages()*st.PageBytes(bt)/1024, held, stats.Waits, stats.Preemptions)
			assert.LessOrEqual(t, stats.MaxPagesInUse, held, "pages for the tokens held, no more")
			assert.LessOrEqual(t, st.HeldPages(), stats.MaxPagesInUse, "memory only for pages handed out")
			if c.pages < held {
				assert.Positive(t, waits, "the small budget made sequences wait, and each says so")
				assert.Equal(t, waits, stats.Waits+stats.Preemptions)
			}
			assert.Equal(t, c.pages, s.Pool().Free())
		})
	}
}
