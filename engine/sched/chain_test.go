package sched

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/mod"
)

// chainFake is drawFake as a ChainRunner of most steps: a chain runs its
// steps one after another through drawFake's StepArgmax, each row's token
// the id it gave the step before (put in its sequence's tokens while the
// chain runs, as the device holds it, so that the fake's check of every
// key a row attends sees it), drawing with us[i][s]. Each step's pages
// must be reserved: the fake writes and reads them. It records the
// chains' lengths.
type chainFake struct {
	*drawFake
	most   int
	chains []int
	s      *Scheduler // to check when it chains
}

func (f *chainFake) ChainSteps() int { return f.most }

func (f *chainFake) StepChain(rows []Row, steps int, us [][]float64, bt int) ([][]int32, [][][]mod.Route, error) {
	if steps < 1 || steps > f.most {
		return nil, nil, errors.New("chainFake: steps out of range")
	}
	f.chains = append(f.chains, steps)
	if len(f.s.queue) > 0 || len(rows) != len(f.s.active) {
		return nil, nil, errors.New("chainFake: a chain while a sequence waits to start or for pages")
	}
	held := make([]int, len(rows)) // each sequence's tokens before the chain
	for i, r := range rows {
		held[i] = len(r.Seq.tokens)
		if r.Pos != held[i]-1 || !r.Argmax {
			return nil, nil, errors.New("chainFake: a row that is not its sequence's next decode row")
		}
		if r.Pos+steps > f.lay.ContextLen {
			return nil, nil, errors.New("chainFake: a chain past the context")
		}
	}
	defer func() {
		for i, r := range rows {
			r.Seq.tokens = r.Seq.tokens[:held[i]]
		}
	}()
	var ids [][]int32
	var routes [][][]mod.Route
	step := append([]Row(nil), rows...)
	for s := range steps {
		if s > 0 {
			for i := range step {
				step[i].Pos++
				step[i].Token = ids[s-1][i]
				step[i].Seq.tokens = append(step[i].Seq.tokens, step[i].Token)
				if step[i].Temp > 0 {
					step[i].U = us[i][s]
				}
			}
		}
		_, got, rt, err := f.drawFake.StepArgmax(step, bt)
		if err != nil {
			return nil, nil, err
		}
		ids = append(ids, got)
		if rt != nil {
			routes = append(routes, rt)
		}
	}
	return ids, routes, nil
}

// chainWork runs sixteen sequences on run, a pool of pages pages with a
// prefix cache, at most maxSeqs at once (0: any): greedy and plain sampled
// ones (uSampler), one keeping its logits, every fourth cut by its
// callback, one with no MaxTokens (to the context's end), one with two
// stop tokens; they join one a step for the first eight, then in twos
// every sixth step. Then four continuations of finished ones.
func chainWork(t *testing.T, run StepRunner, vocab, pages, bt, maxSeqs int) ([]*Seq, []*uSampler, Stats) {
	s, err := New(run, Options{BlockTokens: bt, Pages: pages, BatchTokens: 48, MaxSeqs: maxSeqs, PrefixCache: true})
	require.NoError(t, err)
	if f, ok := run.(*chainFake); ok {
		f.s = s
	}
	rng := rand.New(rand.NewPCG(6, 7))
	var seqs []*Seq
	var samplers []*uSampler
	var prompts [][]int32
	add := func(i int) {
		prompt := make([]int32, 1+rng.IntN(20))
		for j := range prompt {
			prompt[j] = int32(rng.IntN(vocab))
		}
		req := Request{Prompt: prompt, MaxTokens: 3 + rng.IntN(25), KeepLogits: i == 5}
		switch i {
		case 3:
			req.MaxTokens = 0
		case 7:
			req.Stop = []int32{int32(rng.IntN(vocab)), int32(rng.IntN(vocab))}
			req.MaxTokens = 40
		}
		if i%4 == 2 { // its callback ends it, most likely inside a chain
			req.MaxTokens = 40
			n, cut := 0, 3+i
			req.OnToken = func(int32) error {
				if n++; n == cut {
					return errors.New("enough")
				}
				return nil
			}
		}
		var us *uSampler
		if i%3 == 1 {
			us = newUSampler(vocab, true, uint64(i))
			req.Sampler = us
		}
		q, err := s.Add(req)
		require.NoError(t, err)
		seqs, samplers, prompts = append(seqs, q), append(samplers, us), append(prompts, prompt)
	}
	for i, steps := 0, 0; i < 16 || s.Busy(); steps++ {
		if i < 16 && (i < 8 || steps%6 == 0) {
			add(i)
			if i++; i >= 8 && i < 16 {
				add(i)
				i++
			}
		}
		_, err := s.Step()
		require.NoError(t, err)
	}
	// With a pool that holds every block: continuations (a chat's next
	// turn), each prompt a sequence's prompt and tokens up to the end of
	// one of the blocks its steps completed, and one more token: served
	// from the prefix cache up to that block, with its routed tables'
	// lengths as they were at its end (a chained step's block's too).
	if pages < 1000 {
		require.Equal(t, pages, s.Pool().Free()+s.CachedPages(), "every page back or cached")
		return seqs, samplers, s.Stats()
	}
	require.Zero(t, s.Stats().PrefixEvictions)
	var blocks []int // each continuation's blocks served
	for _, i := range []int{0, 1, 4, 6} {
		all := append(slices.Clone(prompts[i]), seqs[i].Tokens()...)
		for end := (len(prompts[i])/bt + 1) * bt; end < len(all); end += bt { // each block of drawn tokens the last served
			q, err := s.Add(Request{Prompt: append(slices.Clone(all[:end]), 1), MaxTokens: 2, KeepRoutes: true})
			require.NoError(t, err)
			seqs, samplers, blocks = append(seqs, q), append(samplers, nil), append(blocks, end/bt)
		}
	}
	for more := true; more; {
		more, err = s.Step()
		require.NoError(t, err)
	}
	for c, q := range seqs[16:] {
		require.Equal(t, blocks[c]*bt, q.Reused, "continuation %d is served its cached prefix", c)
	}
	require.Equal(t, pages, s.Pool().Free()+s.CachedPages(), "every page back or cached")
	return seqs, samplers, s.Stats()
}

// TestChainSteps: on a ChainRunner the scheduler runs the steps in which
// every running sequence decodes one row drawn on the runner as one
// chain, at most as long as any sequence may still draw (MaxTokens) or
// hold (the context), never while a sequence waits to start, prefills,
// keeps its logits or waits for pages; and books each step of it as the
// steps one at a time: every sequence's tokens, end, and sampler's
// numbers (taken once each, only for the tokens booked) are those of the
// same sequences on the runner that does not chain, with a pool roomy or
// so tight that sequences wait and are preempted, for a routed model.
func TestChainSteps(t *testing.T) {
	const bt, ctx, vocab = 4, 64, 40
	for _, tc := range []struct{ pages, maxSeqs int }{{2000, 0}, {100, 0}, {2000, 5}} {
		pages := tc.pages
		mk := func() *drawFake {
			return &drawFake{argmaxFake: &argmaxFake{fakeRunner: newFake(2, 3, ctx, vocab, pages, bt)}, draws: true}
		}
		base := mk()
		want, wantS, wantStats := chainWork(t, base, vocab, pages, bt, tc.maxSeqs)
		f := &chainFake{drawFake: mk(), most: 4}
		got, gotS, stats := chainWork(t, f, vocab, pages, bt, tc.maxSeqs)
		t.Logf("pages %d, at most %d at once: %d steps one at a time (%d waits, %d preemptions); chained %d steps, %d of them in %d chains %v (%d waits, %d preemptions)",
			pages, tc.maxSeqs, wantStats.Steps, wantStats.Waits, wantStats.Preemptions, stats.Steps, stats.ChainedSteps, stats.Chains, f.chains, stats.Waits, stats.Preemptions)
		require.Positive(t, stats.Chains)
		assert.Equal(t, len(f.chains), stats.Chains)
		sum, short := 0, 0
		for _, n := range f.chains {
			sum += n
			if n < f.most {
				short++
			}
		}
		assert.Equal(t, sum, stats.ChainedSteps)
		assert.Positive(t, short, "chains cut short by a sequence's MaxTokens or the context")
		if pages == 100 {
			assert.Positive(t, wantStats.Waits+wantStats.Preemptions, "the tight pool made sequences wait")
		}
		var stops []StopReason
		for i := range want {
			assert.Equal(t, want[i].Tokens(), got[i].Tokens(), "seq %d's tokens", i)
			assert.Equal(t, want[i].Stop, got[i].Stop, "seq %d's end", i)
			assert.Equal(t, want[i].Err != nil, got[i].Err != nil, "seq %d's error", i)
			stops = append(stops, got[i].Stop)
			if ws := wantS[i]; ws != nil {
				gs := gotS[i]
				assert.Equal(t, ws.us, gs.us, "seq %d: the same numbers taken", i)
				assert.Equal(t, ws.ids, gs.ids, "seq %d: each token drawn reached the sampler", i)
				for j, u := range gs.us {
					assert.Equal(t, int32(u*vocab), gs.ids[j], "seq %d draw %d: drawn with its own number", i, j)
				}
				assert.Zero(t, gs.hosts, "seq %d: drawn on the runner", i)
			}
		}
		assert.Contains(t, stops, StopContextFull)
		assert.Contains(t, stops, StopCallback)
		assert.Contains(t, stops, StopMaxTokens)
		for i := 16; i < len(want); i++ {
			assert.Equal(t, want[i].Routes, got[i].Routes, "continuation %d's routing, its prefix's served from the cache", i)
		}
	}
}

// TestChainHoldsForArrivals: no chain runs while Arriving says a sequence
// is about to be added, nor for a sequence's first decode step; once
// neither holds, the running sequences chain.
func TestChainHoldsForArrivals(t *testing.T) {
	const bt, ctx, vocab, pages = 4, 64, 40, 200
	f := &chainFake{drawFake: &drawFake{argmaxFake: &argmaxFake{fakeRunner: newFake(1, 1, ctx, vocab, pages, bt)}}, most: 4}
	s, err := New(f, Options{BlockTokens: bt, Pages: pages})
	require.NoError(t, err)
	f.s = s
	arriving := true
	s.Arriving = func() bool { return arriving }
	q, err := s.Add(Request{Prompt: []int32{1, 2, 3}, MaxTokens: 30})
	require.NoError(t, err)
	for range 6 {
		_, err := s.Step()
		require.NoError(t, err)
	}
	require.Empty(t, f.chains, "a sequence about to be added")
	require.Len(t, q.Tokens(), 6)
	arriving = false
	r, err := s.Add(Request{Prompt: []int32{4, 5}, MaxTokens: 30})
	require.NoError(t, err)
	for range 2 { // r's prompt, then its first decode step
		_, err := s.Step()
		require.NoError(t, err)
		require.Empty(t, f.chains, "a step of a prompt, or of a sequence's first decode")
	}
	_, err = s.Step()
	require.NoError(t, err)
	require.Equal(t, []int{4}, f.chains)
	require.Len(t, r.Tokens(), 6)
}
