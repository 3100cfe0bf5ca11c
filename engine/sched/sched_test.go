package sched

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// noisySampler draws the argmax of the logits plus seeded noise: a sampled
// sequence whose draws depend only on its seed and its logits.
type noisySampler struct{ rng *rand.Rand }

func (n *noisySampler) Sample(logits []float32) int32 {
	best, bv := 0, float32(-1)
	for i, v := range logits {
		if v += 500 * n.rng.Float32(); v > bv {
			best, bv = i, v
		}
	}
	return int32(best)
}

// solo runs req alone, with room to spare and no prefix cache.
func solo(t *testing.T, f *fakeRunner, req Request) []int32 {
	t.Helper()
	s, err := New(newFake(f.lay.DenseLayers, f.lay.RoutedLayers, f.lay.ContextLen, f.lay.NVocab, 4096, f.bt), Options{BlockTokens: f.bt, Pages: 4096})
	require.NoError(t, err)
	q, err := s.Add(req)
	require.NoError(t, err)
	for {
		more, err := s.Step()
		require.NoError(t, err)
		if !more {
			break
		}
	}
	require.NoError(t, q.Err)
	return q.Tokens()
}

type soakCase struct {
	name     string
	pages    int
	prefix   bool
	maxSeqs  int
	batch    int
	steps    int
	wantWait bool
	argmax   bool // the runner draws greedy rows itself (argmaxFake)
	workers  int  // goroutines drawing a step's sampled sequences (0: drawWorkers's)
}

// TestSoak joins, cancels and finishes sequences at random over thousands
// of steps, on a pool too small for all of them and with shared prompt
// prefixes: every finished sequence's tokens equal its solo run, the
// fake runner finds every page it reads holding its own sequence's
// entries, and when all is done no page is left taken.
func TestSoak(t *testing.T) {
	for _, c := range []soakCase{
		{name: "roomy", pages: 4096, steps: 2000, batch: 64},
		{name: "tight", pages: 260, steps: 3000, batch: 48, wantWait: true},
		{name: "tight-prefix", pages: 260, prefix: true, steps: 3000, batch: 48, wantWait: true},
		{name: "limit-prefix", pages: 1024, prefix: true, maxSeqs: 5, steps: 2000, batch: 32},
		{name: "argmax-tight-prefix", pages: 260, prefix: true, steps: 2000, batch: 48, wantWait: true, argmax: true},
		{name: "draws-side-by-side", pages: 4096, steps: 1000, batch: 64, workers: 5},
	} {
		t.Run(c.name, func(t *testing.T) { soak(t, c) })
	}
}

func soak(t *testing.T, c soakCase) {
	const bt, ctx, vocab = 4, 96, 50
	if c.workers > 0 {
		was := drawWorkers
		drawWorkers = func() int { return c.workers }
		defer func() { drawWorkers = was }()
	}
	f := newFake(2, 3, ctx, vocab, c.pages, bt)
	var run StepRunner = f
	af := &argmaxFake{fakeRunner: f}
	if c.argmax {
		run = af
	}
	s, err := New(run, Options{BlockTokens: bt, Pages: c.pages, BatchTokens: c.batch, MaxSeqs: c.maxSeqs, PrefixCache: c.prefix})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, uint64(c.pages)))
	system := make([]int32, 23) // a shared "system prompt"
	for i := range system {
		system[i] = int32(rng.IntN(vocab))
	}
	type running struct {
		q    *Seq
		req  Request
		seed uint64
	}
	var live, done []running
	for step := 0; step < c.steps; step++ {
		if rng.IntN(3) == 0 && len(live) < 24 { // a join
			n := 1 + rng.IntN(30)
			prompt := make([]int32, n)
			for i := range prompt {
				prompt[i] = int32(rng.IntN(vocab))
			}
			if rng.IntN(2) == 0 {
				prompt = append(slices.Clone(system), prompt...)
			}
			req := Request{Prompt: prompt, MaxTokens: 1 + rng.IntN(40), Stop: []int32{int32(rng.IntN(vocab))}}
			seed := rng.Uint64()
			if seed%2 == 0 {
				req.Sampler = &noisySampler{rand.New(rand.NewPCG(seed, 7))}
			}
			q, err := s.Add(req)
			require.NoError(t, err)
			live = append(live, running{q, req, seed})
		}
		if rng.IntN(25) == 0 && len(live) > 0 { // a cancel
			i := rng.IntN(len(live))
			s.Cancel(live[i].q)
			assert.Equal(t, StopCancel, live[i].q.Stop)
		}
		_, err := s.Step()
		require.NoError(t, err, "step %d", step)
		live = slices.DeleteFunc(live, func(r running) bool {
			if r.q.Done() {
				done = append(done, r)
			}
			return r.q.Done()
		})
	}
	for s.Busy() {
		_, err := s.Step()
		require.NoError(t, err)
	}
	for _, r := range live {
		done = append(done, r)
	}
	checked := 0
	for _, r := range done {
		require.NoError(t, r.q.Err, "seq %d", r.q.ID)
		if r.q.Stop == StopCancel {
			continue
		}
		req := r.req
		if r.seed%2 == 0 {
			req.Sampler = &noisySampler{rand.New(rand.NewPCG(r.seed, 7))}
		}
		require.Equal(t, solo(t, f, req), r.q.Tokens(), "seq %d (%s) against its solo run", r.q.ID, r.q.Stop)
		checked++
	}
	st := s.Stats()
	t.Logf("%d sequences (%d checked), %d steps, %d rows, %d waits, %d preemptions, %d reused tokens, %d prefix evictions, at most %d of %d pages",
		len(done), checked, st.Steps, st.Rows, st.Waits, st.Preemptions, st.ReusedTokens, st.PrefixEvictions, st.MaxPagesInUse, c.pages)
	assert.Greater(t, checked, 100)
	if c.argmax {
		assert.Positive(t, af.argmaxRows, "greedy rows drawn by the runner")
		assert.Positive(t, af.logitRows, "sampled rows' logits")
	}
	if c.wantWait {
		assert.Positive(t, st.Waits+st.Preemptions, "the tight pool made sequences wait")
	}
	if c.prefix {
		assert.Positive(t, st.ReusedTokens, "the shared prefix was reused")
	}
	assert.Equal(t, s.CachedPages(), s.Pool().Pages()-s.Pool().Free(), "only the prefix cache holds pages")
	s.ClearPrefix()
	assert.Equal(t, s.Pool().Pages(), s.Pool().Free(), "no page leaked")
}

// A sequence too long for the whole budget is refused when it is added,
// naming the flag; bad prompts are refused too.
func TestAddRefuses(t *testing.T) {
	f := newFake(2, 1, 64, 10, 8, 4)
	s, err := New(f, Options{BlockTokens: 4, Pages: 8})
	require.NoError(t, err)
	_, err = s.Add(Request{Prompt: []int32{1, 2, 3}})
	assert.ErrorContains(t, err, "KV budget")
	_, err = s.Add(Request{})
	assert.ErrorContains(t, err, "empty prompt")
	_, err = s.Add(Request{Prompt: []int32{10}, MaxTokens: 1})
	assert.ErrorContains(t, err, "outside the vocabulary")
}

// A prefix shared with an earlier sequence runs only the new tokens, and
// gives the same tokens as without the cache.
func TestPrefixReuse(t *testing.T) {
	const bt = 4
	f := newFake(2, 3, 256, 50, 1024, bt)
	s, err := New(f, Options{BlockTokens: bt, Pages: 1024, PrefixCache: true})
	require.NoError(t, err)
	shared := make([]int32, 41)
	for i := range shared {
		shared[i] = int32(i % 50)
	}
	first := Request{Prompt: append(slices.Clone(shared), 7, 8), MaxTokens: 5}
	second := Request{Prompt: append(slices.Clone(shared), 9, 9, 9), MaxTokens: 5}
	q1, err := s.Add(first)
	require.NoError(t, err)
	for s.Busy() {
		_, err := s.Step()
		require.NoError(t, err)
	}
	rows := s.Stats().Rows
	q2, err := s.Add(second)
	require.NoError(t, err)
	for s.Busy() {
		_, err := s.Step()
		require.NoError(t, err)
	}
	assert.Equal(t, 40, q2.Reused, "the shared prefix's full blocks")
	assert.Equal(t, len(second.Prompt)-40+4, s.Stats().Rows-rows, "only the new prompt tokens and the draws ran")
	assert.Equal(t, solo(t, f, first), q1.Tokens())
	assert.Equal(t, solo(t, f, second), q2.Tokens())
}

// A sequence's OnToken error ends it with StopCallback.
func TestOnTokenStops(t *testing.T) {
	f := newFake(1, 1, 64, 10, 64, 4)
	s, err := New(f, Options{BlockTokens: 4, Pages: 64})
	require.NoError(t, err)
	stop := errors.New("enough")
	n := 0
	q, err := s.Add(Request{Prompt: []int32{1, 2}, OnToken: func(int32) error {
		if n++; n == 3 {
			return stop
		}
		return nil
	}})
	require.NoError(t, err)
	for s.Busy() {
		_, err := s.Step()
		require.NoError(t, err)
	}
	assert.Equal(t, StopCallback, q.Stop)
	assert.ErrorIs(t, q.Err, stop)
	assert.Len(t, q.Tokens(), 3)
	assert.Equal(t, 64, s.Pool().Free())
}

// argmaxFinite is the greedy draw's one pass: the first index of the
// largest value (a tie keeps the first, as the separate argmax did), and
// false for a NaN or an infinity anywhere, first or last included.
func TestArgmaxFinite(t *testing.T) {
	x := []float32{-3, 2, 7, 7, -1}
	id, ok := argmaxFinite(x)
	assert.True(t, ok)
	assert.Equal(t, int32(2), id)
	id, ok = argmaxFinite([]float32{-5, -4, -9})
	assert.True(t, ok)
	assert.Equal(t, int32(1), id, "all negative")
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		for _, at := range []int{0, 2, len(x) - 1} {
			y := slices.Clone(x)
			y[at] = bad
			_, ok := argmaxFinite(y)
			assert.False(t, ok, "%v at %d", bad, at)
		}
	}
}

// TestPrefixReuseRouting: with RunReused, a sequence that the prefix cache
// serves sees each served token through OnRun, before any of its rows
// runs, with the routing it had when the first sequence ran it (the blocks
// filled over several steps: 3 rows a step, 4 tokens a block); the tokens
// after the prefix run as usual.
func TestPrefixReuseRouting(t *testing.T) {
	const bt = 4
	f := newFake(2, 3, 256, 50, 1024, bt)
	s, err := New(f, Options{BlockTokens: bt, Pages: 1024, BatchTokens: 3, PrefixCache: true})
	require.NoError(t, err)
	shared := make([]int32, 21)
	for i := range shared {
		shared[i] = int32(i*7%49 + 1)
	}
	run := func(req Request) *Seq {
		q, err := s.Add(req)
		require.NoError(t, err)
		for s.Busy() {
			_, err := s.Step()
			require.NoError(t, err)
		}
		return q
	}
	q1 := run(Request{Prompt: append(slices.Clone(shared), 7), MaxTokens: 3, KeepRoutes: true})
	var seen []int
	routes := map[int][]mod.Route{}
	steps := s.Stats().Steps
	var stepsAtReuse []int
	q2 := run(Request{Prompt: append(slices.Clone(shared), 9, 9), MaxTokens: 3, RunReused: true,
		OnRun: func(pos int, r []mod.Route) {
			seen = append(seen, pos)
			routes[pos] = r
			if pos < 20 {
				stepsAtReuse = append(stepsAtReuse, s.Stats().Steps)
			}
		}})
	assert.Equal(t, 20, q2.Reused, "five full blocks")
	for pos := range len(q2.tokens) - 1 { // all but the last drawn, which never ran
		assert.Equal(t, pos, seen[pos], "each position once, in order")
		if pos < 20 {
			assert.Equal(t, q1.Routes[pos], routes[pos], "position %d: the routing it had", pos)
		}
	}
	require.Len(t, stepsAtReuse, 20)
	for _, at := range stepsAtReuse {
		assert.Equal(t, steps, at, "served before any row ran")
	}
}

// On an ArgmaxRunner the rows of greedy sequences that do not keep their
// logits come back as their argmax (Row.Argmax), the others as logits:
// a greedy sequence, one keeping its logits and a sampled one, sharing
// steps, give their solo runs' tokens (on the plain fake); a non-finite
// argmax ends its sequence with ErrNonFinite at its token, and an id
// outside the vocabulary ends the step's sequences with an error.
func TestArgmaxRunner(t *testing.T) {
	const bt, ctx, vocab = 4, 64, 50
	prompt := func(seed int) []int32 {
		p := make([]int32, 5+seed)
		for i := range p {
			p[i] = int32((i*7 + seed*13) % vocab)
		}
		return p
	}
	sampler := func() Sampler { return &noisySampler{rand.New(rand.NewPCG(5, 7))} }
	reqs := []Request{
		{Prompt: prompt(0), MaxTokens: 12},                   // greedy: Argmax rows
		{Prompt: prompt(1), MaxTokens: 12, KeepLogits: true}, // greedy, its logits kept: logits rows
		{Prompt: prompt(2), MaxTokens: 12},                   // sampled below: logits rows
		{Prompt: prompt(3), MaxTokens: 12},                   // greedy, its argmax non-finite
	}
	af := &argmaxFake{fakeRunner: newFake(2, 2, ctx, vocab, 512, bt), nonFinite: map[int]bool{3: true}}
	s, err := New(af, Options{BlockTokens: bt, Pages: 512, BatchTokens: 64})
	require.NoError(t, err)
	seqs := make([]*Seq, len(reqs))
	for i, req := range reqs {
		if i == 2 {
			req.Sampler = sampler()
		}
		seqs[i], err = s.Add(req)
		require.NoError(t, err)
	}
	for s.Busy() {
		_, err := s.Step()
		require.NoError(t, err)
	}
	for i := range 3 {
		req := reqs[i]
		if i == 2 {
			req.Sampler = sampler()
		}
		require.NoError(t, seqs[i].Err, "seq %d", i)
		assert.Equal(t, solo(t, af.fakeRunner, req), seqs[i].Tokens(), "seq %d", i)
	}
	assert.Len(t, seqs[1].Logits, len(seqs[1].Tokens()), "the kept logits: a draw each")
	assert.Equal(t, map[int]bool{0: true, 3: true}, af.argmaxSeqs, "Argmax rows: the greedy sequences that keep no logits only")
	assert.Positive(t, af.logitRows)
	assert.Equal(t, StopError, seqs[3].Stop)
	assert.ErrorIs(t, seqs[3].Err, mod.ErrNonFinite)
	assert.ErrorContains(t, seqs[3].Err, "at token 7", "the prompt's last token")
	assert.Empty(t, seqs[3].Tokens())

	bad := &argmaxFake{fakeRunner: newFake(2, 2, ctx, vocab, 512, bt), bad: true}
	s, err = New(bad, Options{BlockTokens: bt, Pages: 512})
	require.NoError(t, err)
	q, err := s.Add(Request{Prompt: prompt(0), MaxTokens: 4})
	require.NoError(t, err)
	for s.Busy() {
		_, err := s.Step()
		require.NoError(t, err)
	}
	assert.Equal(t, StopError, q.Stop)
	assert.ErrorContains(t, q.Err, "outside the vocabulary")
	assert.Equal(t, s.Pool().Pages(), s.Pool().Free(), "every page back")
}

// TestPaused: a decoding sequence whose Paused says so takes no row and
// keeps its pages; with every running sequence paused a step runs nothing
// and Runnable is false; it goes on once Paused lets it; and a sequence
// waiting to start (at MaxSeqs) makes the paused one run on to its end.
func TestPaused(t *testing.T) {
	f := newFake(1, 1, 64, 50, 256, 4)
	s, err := New(f, Options{BlockTokens: 4, Pages: 256, MaxSeqs: 1})
	require.NoError(t, err)
	hold := false
	a, err := s.Add(Request{Prompt: []int32{1, 2, 3}, MaxTokens: 6, Paused: func() bool { return hold }})
	require.NoError(t, err)
	_, err = s.Step() // the prompt, and a drawn token
	require.NoError(t, err)
	require.Len(t, a.Tokens(), 1)
	hold = true
	assert.False(t, s.Runnable(), "the one sequence is paused")
	ran, err := s.Step()
	require.NoError(t, err)
	assert.False(t, ran, "nothing to run")
	assert.Len(t, a.Tokens(), 1)
	assert.Zero(t, a.Preemptions, "a paused sequence keeps its pages")
	hold = false
	require.True(t, s.Runnable())
	_, err = s.Step()
	require.NoError(t, err)
	assert.Len(t, a.Tokens(), 2, "it goes on")

	hold = true
	b, err := s.Add(Request{Prompt: []int32{4, 5}, MaxTokens: 2})
	require.NoError(t, err)
	assert.True(t, s.Runnable(), "a sequence waits to start: the paused one runs on")
	for i := 0; s.Busy() && i < 100; i++ {
		_, err := s.Step()
		require.NoError(t, err)
	}
	require.False(t, s.Busy(), "both ran to their ends")
	assert.Len(t, a.Tokens(), 6, "the paused sequence ran to its end, making room")
	assert.Len(t, b.Tokens(), 2)
}
