package engine

import (
	"fmt"
	"math"
	"slices"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
)

// RunnerStepper is a Runner as the scheduler's step runner: the step of
// one sequence at a time, for a Loop with no sequences in parallel (a
// Model without Options.Parallel, bench, bench --parallel 1) and for the
// backends without a batched step (the reference). A one-row step is the
// runner's own decode step (Vulkan's recorded once, the argmax on the
// device for a greedy row), so a single stream loses nothing to the
// scheduler.
//
// The runner holds one sequence, which the stepper remembers (its tokens
// and their routing): a sequence that begins with the tokens it holds (a
// session's next call, its history first) skips them, and one that does
// not makes it start again (Reset) and run the shared part anew (causal
// routing gives the same caches however the tokens are split). The
// scheduler's pages go unused: the runner keeps its own cache, so the
// Layout has one dense table and no routed ones, and CopyPage is never
// called (no prefix cache).
//
// A greedy row of a runner that chains (GreedyChainer) runs the tokens
// greedy decoding will ask for next in the same go, as many as the
// runner's ChainSteps and the sequence's MaxTokens and context allow: the
// runner holds them ahead of the sequence, with the argmax after each, and
// the next rows that ask for them take them without running. Where the
// sequence goes otherwise (a stop token or string, a cancelled request),
// the tokens ahead are dropped (Truncater) when another sequence's row or
// the routing counts need the runner. A plain sampled row of a runner that
// chains draws (DrawChainer) does the same, each token ahead drawn with
// the number the sequence's sampler will hand its row
// (sched.DeviceSampler.Peek): a row is served from the chain only with
// the number its token was drawn with.
type RunnerStepper struct {
	r      Runner
	greedy GreedyFeeder  // r's, when it takes the argmax itself
	drawer DrawFeeder    // r's, when it draws plain sampled tokens itself
	dchain DrawChainer   // r's, when it chains draws too
	chain  GreedyChainer // r's, when it chains greedy steps
	trunc  Truncater     // r's, when it can drop tokens
	tracer RoutingTracer // r's, when it traces routing
	stats  RoutingStatser
	held   []int32       // the tokens the runner holds, in order
	best   []int32       // the argmax (or draw) after each held token a chain ran (noBest for the others)
	drawn  []drawKey     // what each of best was drawn with (zero: the argmax)
	routes [][]mod.Route // each held token's routing (nil for a dense model)
	traced []bool        // whether routes holds it (not fetched for a sequence that wanted none)
	seq    *sched.Seq    // the sequence being run
	valid  int           // the held tokens that are seq's (the rest may be another's)
	reused int           // seq's tokens that were held already and did not run
	lost   bool          // the runner holds none of them now (Lost)
	chunk  int           // the most tokens one Feed takes
	lay    sched.Layout
}

// NewRunnerStepper steps r, whose Feed takes up to chunk tokens (a
// Backend's runner is unwrapped: its own methods, FeedArgmax and Routes,
// are what make a step fast and traced).
func NewRunnerStepper(r Runner, nVocab, chunk int) *RunnerStepper {
	inner := unwrap(r)
	a := &RunnerStepper{r: inner, chunk: max(1, chunk), lay: sched.Layout{DenseLayers: 1, ContextLen: inner.ContextLen(), NVocab: nVocab}}
	a.greedy, _ = inner.(GreedyFeeder)
	if d, ok := inner.(DrawFeeder); ok && d.DrawsOnDevice() {
		a.drawer = d
		a.dchain, _ = inner.(DrawChainer)
	}
	a.chain, _ = inner.(GreedyChainer)
	a.trunc, _ = inner.(Truncater)
	a.tracer, _ = inner.(RoutingTracer)
	a.stats, _ = inner.(RoutingStatser)
	inner.Reset()
	return a
}

// Forget drops the sequence the runner holds: the next one runs from its
// first token (bench's rounds each time the same work).
func (a *RunnerStepper) Forget() {
	a.r.Reset()
	a.held, a.best, a.routes, a.traced, a.seq, a.valid, a.lost = a.held[:0], a.best[:0], a.routes[:0], a.traced[:0], nil, 0, false
	a.drawn = a.drawn[:0]
}

// drawKey is what a row's token is drawn with: a sampled row's draw
// parameters and uniform number (sched.Row.Draw, U); zero for the argmax.
type drawKey struct {
	d sched.Draw
	u float64
}

func keyOf(r sched.Row) drawKey { return drawKey{r.Draw, r.U} }

// noBest marks a held token whose argmax the stepper does not know.
const noBest = math.MinInt32

// Lost says the runner was used otherwise (eval mode's LogProbs ran on it,
// perhaps from a token callback while a sequence runs): its next Feed
// first runs the tokens it held again.
func (a *RunnerStepper) Lost() { a.lost = true }

func (a *RunnerStepper) Layout() sched.Layout { return a.lay }

// CopyPage is never called: a Loop over a RunnerStepper has no prefix
// cache, whose shared pages are what gets copied.
func (a *RunnerStepper) CopyPage(dst, src int32) {}

// Reused is how many of the running sequence's tokens the runner held
// already, so that they did not run again.
func (a *RunnerStepper) Reused() int { return a.reused }

// StatsOf is RoutingStats when the runner holds q (nil otherwise).
func (a *RunnerStepper) StatsOf(q *sched.Seq) []LayerStat {
	if a.seq != q || a.lost {
		return nil
	}
	return a.RoutingStats()
}

// RoutingStats are the runner's counts over the sequence it holds: tokens
// a chain ran ahead of it are dropped first (nil if that fails).
func (a *RunnerStepper) RoutingStats() []LayerStat {
	if a.stats == nil {
		return nil
	}
	if a.seq != nil && !a.lost && len(a.held) > a.valid {
		if err := a.rewind(a.valid); err != nil {
			a.Forget()
			return nil
		}
	}
	return a.stats.RoutingStats()
}

// Step runs each sequence's rows in turn (a Loop over a RunnerStepper
// runs one sequence at a time, so there is one).
func (a *RunnerStepper) Step(rows []sched.Row, blockTokens int) ([]float32, [][]mod.Route, error) {
	logits, _, routes, err := a.step(rows, false)
	return logits, routes, err
}

// StepArgmax is Step with the greedy rows' tokens drawn by the runner
// (sched.ArgmaxRunner); without a GreedyFeeder it takes the argmax here.
func (a *RunnerStepper) StepArgmax(rows []sched.Row, blockTokens int) ([]float32, []int32, [][]mod.Route, error) {
	return a.step(rows, true)
}

// DrawsOnDevice says whether the runner draws a row with a temperature
// itself (sched.DrawRunner): a DrawFeeder that draws.
func (a *RunnerStepper) DrawsOnDevice() bool { return a.drawer != nil }

func (a *RunnerStepper) step(rows []sched.Row, useArgmax bool) (logits []float32, ids []int32, routes [][]mod.Route, err error) {
	for lo := 0; lo < len(rows); {
		hi := lo + 1
		for hi < len(rows) && rows[hi].Seq == rows[lo].Seq {
			hi++
		}
		l, id, rt, err := a.run(rows[lo:hi], useArgmax)
		if err != nil {
			a.Forget() // what the runner holds after a failed Feed is unknown
			return nil, nil, nil, err
		}
		logits = append(logits, l...)
		if last := rows[hi-1]; useArgmax && last.Argmax {
			ids = append(ids, id)
		}
		routes = append(routes, rt...) // a row's nil without routing (a dense model, NoRoutes)
		lo = hi
	}
	return logits, ids, routes, nil
}

// run runs the rows of one sequence: those the runner holds already are
// skipped (their routing remembered), the rest fed.
func (a *RunnerStepper) run(rows []sched.Row, useArgmax bool) (logits []float32, id int32, routes [][]mod.Route, err error) {
	if q := rows[0].Seq; a.seq != q {
		a.seq, a.valid, a.reused = q, 0, 0 // a new sequence: the held tokens it repeats are kept
	}
	if rows[0].Pos != a.valid {
		return nil, 0, nil, fmt.Errorf("engine: a step from position %d after the sequence's %d tokens", rows[0].Pos, a.valid)
	}
	// Skip the rows the runner holds, but a last one that wants logits:
	// those are gone once a later token ran (a greedy one's argmax is
	// known when a chain ran it).
	q := rows[0].Seq
	skip := 0
	for ; skip < len(rows); skip++ {
		r := rows[skip]
		if r.Pos >= len(a.held) || a.held[r.Pos] != r.Token || (a.tracer != nil && q.WantsRoutes(r.Pos) && !a.traced[r.Pos]) {
			break // a held token whose routing is wanted and was not fetched runs again
		}
		if r.Logits && !(useArgmax && r.Argmax && a.best[r.Pos] != noBest && a.drawn[r.Pos] == keyOf(r)) {
			break // a draw a chain made with another number (or the argmax) runs again
		}
		if !r.Logits {
			a.reused++ // a prompt's token; a greedy row's from a chain is no reuse
		}
		routes = append(routes, a.routes[r.Pos])
	}
	a.valid += skip
	if skip == len(rows) {
		if last := rows[skip-1]; last.Logits {
			id = a.best[last.Pos]
		}
		return nil, id, routes, nil
	}
	feed := rows[skip:]
	if p := feed[0].Pos; p < len(a.held) || a.lost { // the runner holds other tokens from here
		if err := a.rewind(p); err != nil {
			return nil, 0, nil, err
		}
	}
	tokens := make([]int32, len(feed))
	for i, r := range feed {
		tokens[i] = r.Token
	}
	last := feed[len(feed)-1]
	var ahead []int32 // a chain's argmaxes (or draws) after last: ahead[i] follows the token at last.Pos+i
	var us []float64  // a chain of draws' numbers: ahead[i] drawn with us[i]
	switch n := a.chainSteps(q, feed); {
	case !last.Logits:
		_, err = a.r.Feed(tokens) // a prompt chunk before the last
	case useArgmax && last.Argmax && last.Temp > 0 && n > 1:
		// The scheduler took last.U; the sampler's next numbers are the
		// next rows'.
		us = append([]float64{last.U}, q.Sampler().(sched.DeviceSampler).Peek(n-1)...)
		if ahead, err = a.dchain.FeedDrawChain(last.Token, n, last.Draw, us); err == nil {
			id = ahead[0]
		}
	case useArgmax && last.Argmax && last.Temp > 0:
		if a.drawer == nil {
			return nil, 0, nil, fmt.Errorf("engine: a draw at temperature %g on a runner that does not draw", last.Temp)
		}
		id, err = a.drawer.FeedDraw(tokens, last.Draw, last.U)
	case useArgmax && last.Argmax && n > 1:
		if ahead, err = a.chain.FeedArgmaxChain(last.Token, n); err == nil {
			id = ahead[0]
		}
	case useArgmax && last.Argmax && a.greedy != nil:
		id, err = a.greedy.FeedArgmax(tokens)
	default:
		logits, err = a.r.Feed(tokens)
		if err == nil && useArgmax && last.Argmax { // a runner without its own argmax
			l := logits
			id, logits = sched.ArgmaxNonFinite, nil
			if mod.Finite(l) {
				id = stats.Argmax(l)
			}
		}
	}
	if err != nil {
		return nil, 0, nil, err
	}
	var traced [][]mod.Route
	want := a.tracer != nil && q.WantsRoutes(last.Pos)
	if want { // a GPU runner copies the routing back for it: only when wanted
		traced = a.tracer.Routes()
	}
	for i, r := range feed {
		var rt []mod.Route
		if i < len(traced) {
			rt = slices.Clone(traced[i])
		}
		a.held = append(a.held, r.Token)
		a.best = append(a.best, noBest)
		a.drawn = append(a.drawn, drawKey{})
		a.routes = append(a.routes, rt)
		a.traced = append(a.traced, want)
		routes = append(routes, rt)
	}
	a.valid += len(feed)
	if len(ahead) > 0 {
		a.best[len(a.best)-1] = ahead[0]
		key := func(i int) drawKey {
			if us == nil {
				return drawKey{}
			}
			return drawKey{last.Draw, us[i]}
		}
		a.drawn[len(a.drawn)-1] = key(0)
		for i := 1; i < len(ahead); i++ { // the chain's tokens ahead of the sequence
			var rt []mod.Route
			if i < len(traced) {
				rt = slices.Clone(traced[i])
			}
			a.held = append(a.held, ahead[i-1])
			a.best = append(a.best, ahead[i])
			a.drawn = append(a.drawn, key(i))
			a.routes = append(a.routes, rt)
			a.traced = append(a.traced, want)
		}
	}
	return logits, id, routes, nil
}

// chainSteps is how many tokens a chain runs for feed, the last rows of
// sequence q: 1 (no chain) unless feed is one greedy row and the runner
// chains; else as many as the runner takes in one go, the sequence may
// still draw (MaxTokens) and the context holds.
func (a *RunnerStepper) chainSteps(q *sched.Seq, feed []sched.Row) int {
	if a.chain == nil || a.trunc == nil || len(feed) != 1 || !feed[0].Argmax {
		return 1
	}
	if _, ok := q.Sampler().(sched.DeviceSampler); feed[0].Temp > 0 && (a.dchain == nil || !ok) {
		return 1
	}
	n := min(a.chain.ChainSteps(), a.lay.ContextLen-feed[0].Pos)
	if left := q.DrawsLeft(); left >= 0 {
		n = min(n, left)
	}
	return max(n, 1)
}

// rewind makes the runner hold its first p tokens only: it drops the rest
// (Truncater), or starts again and runs them anew, their routing kept.
func (a *RunnerStepper) rewind(p int) error {
	held := a.held[:p]
	if a.trunc != nil && !a.lost && a.trunc.Truncate(p) == nil {
		a.held, a.best, a.drawn, a.routes, a.traced = held, a.best[:p], a.drawn[:p], a.routes[:p], a.traced[:p]
		return nil
	}
	a.r.Reset()
	for i := 0; i < p; i += a.chunk {
		if _, err := a.r.Feed(held[i:min(i+a.chunk, p)]); err != nil {
			return fmt.Errorf("engine: running the sequence's first %d tokens again: %w", p, err)
		}
	}
	a.held, a.best, a.drawn, a.routes, a.traced, a.lost = held, a.best[:p], a.drawn[:p], a.routes[:p], a.traced[:p], false
	return nil // the argmaxes kept for held[:p] hold still: the same tokens ran again
}
