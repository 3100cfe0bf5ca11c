package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/mod"
)

// The generation loop: every generation (the API's Session.Generate and
// through it the command line and the server, and bench) is a sequence in
// one scheduler (engine/sched); each Generate call joins as one sequence
// and receives its tokens in order on its own goroutine. A Loop of one
// sequence at a time steps the backend's runner itself (RunnerStepper),
// and its callers run the steps: a Generate call whose sequence waits for
// one runs it, so that a stream runs on its caller's goroutine, step and
// callback in turn, with no goroutine in between (a call that generates
// from inside a callback steps the sequences it waits behind). A Loop of
// several steps the backend's batched step runner (StepperOf) over a page
// pool on a goroutine of its own, which steps while any sequence can run
// and never waits for a caller.

// ErrClosed is returned by a Loop's Generate once the Loop is closed.
var ErrClosed = errors.New("engine: the generation loop is closed")

// LoopOptions size a Loop.
type LoopOptions struct {
	// Parallel is how many sequences run at once; up to 1 (and on the
	// reference backend, which has no batched step) they take turns on the
	// runner (RunnerStepper).
	Parallel int
	// PrefixCache runs the batched step runner even for one sequence at a
	// time, for its prefix cache: the full 16-token blocks of a sequence
	// that an earlier one ran are not run again. Parallel above 1 has it
	// always.
	PrefixCache bool
	KVBudget    int64 // bytes of the page pool; 0 = enough for Parallel sequences of the context
	UBatch      int   // rows a step takes at most; 0 = the backend's prompt chunk (or 512)
	ContextLen  int   // the longest sequence
	NVocab      int
	// Turn is the backend's runner's turn, which every step of a step
	// runner that shares the runner's state takes (the RunnerStepper, and
	// Vulkan's, which shares its device and scratch): another user of the
	// runner (eval mode) takes it too, between steps. Nil: steps take none.
	Turn chan struct{}
}

// BlockTokens is the size of a page of the batched step runner's pool.
const BlockTokens = 16

// Loop runs generations as sequences of one scheduler (see above).
type Loop struct {
	// joining counts the Generate calls on their way to add a sequence
	// (waiting for mu): the scheduler chains no steps while one does, so
	// that a request is not held back behind a chain it came before.
	joining atomic.Int64
	mu      sync.Mutex // guards everything below, and the scheduler
	// cond wakes Close (no Generate left, or a callback running).
	cond *sync.Cond
	// stepper (capacity 1) is held by whoever runs a step; stepped is
	// closed (and replaced) when a step ran or the loop changed (a
	// sequence came or left, Close), waking whoever waits for one: the
	// callers of a Loop over the runner, the stepping goroutine of a
	// batched one (exited when it has stopped).
	stepper   chan struct{}
	stepped   chan struct{}
	exited    chan struct{}
	s         *sched.Scheduler
	st        sched.StepRunner
	runner    *RunnerStepper // st, when it is the runner's
	closed    bool
	inflight  int // Generate calls running
	callbacks int // token callbacks running
	turn      chan struct{}
}

// NewLoop is a Loop over backend b (its runner, or a step runner sharing
// its weights) with o's sizes.
func NewLoop(b *Backend, o LoopOptions) (*Loop, error) {
	if o.Parallel < 0 || o.KVBudget < 0 || o.UBatch < 0 {
		return nil, fmt.Errorf("engine: parallel sequences %d, KV budget %d and batch %d must not be negative", o.Parallel, o.KVBudget, o.UBatch)
	}
	parallel := max(o.Parallel, 1)
	l := &Loop{turn: o.Turn, stepper: make(chan struct{}, 1)}
	l.cond = sync.NewCond(&l.mu)
	so := sched.Options{BlockTokens: BlockTokens, MaxSeqs: parallel}
	var st Stepper
	if parallel > 1 || o.PrefixCache {
		st, _ = StepperOf(b, parallel) // nil: the reference, which has none
	}
	if st == nil {
		l.runner = NewRunnerStepper(b, o.NVocab, cmp.Or(b.PromptChunk(), o.UBatch, DefaultUBatch))
		l.st, so.MaxSeqs = l.runner, 1
		so.BatchTokens = cmp.Or(b.PromptChunk(), o.UBatch, DefaultUBatch)
		so.Pages = sched.PagesFor(l.runner.Layout(), 1, o.ContextLen+2*BlockTokens, BlockTokens) // bookkeeping only
	} else {
		pages := sched.PagesFor(st.Layout(), parallel, o.ContextLen+2*BlockTokens, BlockTokens)
		if o.KVBudget > 0 {
			pages = int(o.KVBudget / int64(st.PageBytes(BlockTokens)))
			if pages < 1 {
				return nil, fmt.Errorf("engine: KV budget %d bytes holds no %d-byte page", o.KVBudget, st.PageBytes(BlockTokens))
			}
		}
		if err := st.Reserve(pages, BlockTokens); err != nil {
			return nil, err
		}
		so.BatchTokens = o.UBatch
		if most := st.MaxRows(); most > 0 { // Vulkan: the runner's batch scratch
			so.BatchTokens = min(cmp.Or(so.BatchTokens, most), most)
		}
		so.Pages, so.PrefixCache = pages, true
		l.st = st
		if _, cpu := b.Runner.(cpuRunner); cpu {
			l.turn = nil // the CPU's step runner shares the weights only
		}
	}
	s, err := sched.New(l.st, so)
	if err != nil {
		return nil, err
	}
	l.s = s
	s.Arriving = func() bool { return l.joining.Load() > 0 }
	if l.runner == nil {
		l.exited = make(chan struct{})
		go l.loop()
	}
	return l, nil
}

// loop is a batched Loop's stepping goroutine: it steps while a sequence
// can run, until Close.
func (l *Loop) loop() {
	defer close(l.exited)
	for {
		stepped := l.waitStep()
		if !l.step() {
			if l.Closed() {
				return
			}
			<-stepped // a sequence came, or Close
		}
	}
}

// step runs one step for the sequences that can run, unless another
// caller is running one or none can; it says whether it ran one. A failed
// step ends its sequences with the error (Seq.Err).
func (l *Loop) step() bool {
	select {
	case l.stepper <- struct{}{}:
	default:
		return false // another caller steps: its step wakes this one after
	}
	defer func() { <-l.stepper }()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || !l.s.Runnable() {
		return false
	}
	if l.turn != nil {
		l.turn <- struct{}{}
	}
	_, _ = l.s.Step()
	if l.turn != nil {
		<-l.turn
	}
	l.changed()
	return true
}

// changed wakes whoever waits for a step or a change (the caller holds
// mu).
func (l *Loop) changed() {
	if l.stepped != nil {
		close(l.stepped)
		l.stepped = nil
	}
}

// waitStep is the channel closed at the next step or change (made when
// someone waits: a stream alone steps without it).
func (l *Loop) waitStep() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stepped == nil {
		l.stepped = make(chan struct{})
	}
	return l.stepped
}

// Close waits for the Generate calls to end (unless a token callback
// runs: Close from one closes at once) and ends every sequence; no step
// runs after it. The backend stays open.
func (l *Loop) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.inflight > 0 && l.callbacks == 0 && !l.closed {
		l.cond.Wait()
	}
	l.closed = true
	l.s.CancelAll(nil)
	l.cond.Broadcast()
	l.changed()
	if l.exited != nil {
		l.mu.Unlock()
		<-l.exited
		l.mu.Lock()
	}
}

// Closed says whether Close has begun.
func (l *Loop) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// RunnerUsed tells a Loop that steps the runner itself that the runner ran
// something else (eval mode), so that the sequence it held is gone: a
// running sequence's next step runs it again first. The caller holds the
// Loop's turn (no step runs).
func (l *Loop) RunnerUsed() {
	if l.runner != nil {
		l.runner.Lost()
	}
}

// runnerStats are the runner's counts over q, when the runner holds it.
func (l *Loop) runnerStats(q *sched.Seq) []LayerStat {
	if l.turn != nil {
		l.turn <- struct{}{}
		defer func() { <-l.turn }()
	}
	return l.runner.StatsOf(q)
}

// Forget makes the next sequences run from their first token: the
// prefix cache emptied, the runner's sequence forgotten (bench's rounds
// time the same work each). Nothing else may use the runner meanwhile.
func (l *Loop) Forget() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.s.ClearPrefix()
	if l.runner != nil {
		l.runner.Forget()
	}
}

// Batched says whether the loop steps the backend's batched step runner
// (sequences share steps, over a page pool with a prefix cache) rather
// than the runner itself.
func (l *Loop) Batched() bool { return l.runner == nil }

// Pages says how the batched step runner's page pool is used (all 0 for a
// Loop that steps the runner).
func (l *Loop) Pages() (inUse, total, blockTokens int) {
	if l.runner != nil {
		return 0, 0, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.s.Pool()
	return p.Pages() - p.Free(), p.Pages(), p.BlockTokens()
}

// Stats is what the scheduler did so far.
func (l *Loop) Stats() sched.Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.Stats()
}

// PoolPages is the size of the page pool.
func (l *Loop) PoolPages() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.Pool().Pages()
}

// join adds a sequence; ErrClosed once the loop is closing.
func (l *Loop) join(req sched.Request) (*sched.Seq, error) {
	l.joining.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.joining.Add(-1)
	if l.closed {
		return nil, ErrClosed
	}
	q, err := l.s.Add(req)
	if err != nil {
		return nil, err
	}
	l.inflight++
	l.changed() // a batched loop's stepping goroutine may wait for work
	return q, nil
}

// leave ends q (when it runs still) and counts its Generate out.
func (l *Loop) leave(q *sched.Seq) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.s.Cancel(q)
	l.inflight--
	l.cond.Broadcast() // Close waits for no Generate left
	l.changed()        // a sequence waiting to start may now
}

// inCallback brackets a token callback, for Close.
func (l *Loop) inCallback(fn func() error) error {
	l.mu.Lock()
	l.callbacks++
	l.cond.Broadcast()
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.callbacks--
		l.mu.Unlock()
	}()
	return fn()
}

// seqEvent is what the stepping goroutine tells a Generate call: a token
// ran (evRan), a token was drawn (evDrawn), or the sequence ended (evDone),
// and when.
type seqEvent struct {
	kind   int
	at     time.Time
	pos    int
	routes []mod.Route
	id     int32
	lp     Token       // a drawn token's log-probabilities
	stats  []LayerStat // at evDone: the RunnerStepper's counts,
	reused int         // and the tokens it held already
}

const (
	evRan = iota
	evDrawn
	evDone
)

// seqEvents queue events without blocking the stepping goroutine.
type seqEvents struct {
	mu     sync.Mutex
	list   []seqEvent
	signal chan struct{} // capacity 1: events are waiting
}

func (e *seqEvents) push(ev seqEvent) {
	ev.at = time.Now()
	e.mu.Lock()
	e.list = append(e.list, ev)
	e.mu.Unlock()
	select {
	case e.signal <- struct{}{}:
	default:
	}
}

func (e *seqEvents) take() []seqEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.list
	e.list = nil
	return out
}

// lpSampler is a sequence's sampler, with the drawn token's
// log-probabilities taken from the same logits.
type lpSampler struct {
	s        *Sampler
	logProbs bool
	top      int
	last     Token
}

// Plain is the sampler's (sched.DeviceSampler), but never with
// log-probabilities: those need the logits on the host.
func (l *lpSampler) Plain() (sched.Draw, bool) {
	d, ok := l.s.Plain()
	return d, ok && !l.logProbs
}

func (l *lpSampler) Uniform() float64     { return l.s.Uniform() }
func (l *lpSampler) Peek(n int) []float64 { return l.s.Peek(n) }
func (l *lpSampler) Drawn(id int32)       { l.s.Drawn(id) }

func (l *lpSampler) Sample(logits []float32) int32 {
	id := l.s.Sample(logits)
	if l.logProbs {
		l.last.LogProb, l.last.Top = LogProbs(logits, id, l.top)
	}
	return id
}

// Generate runs seq as one sequence of the loop and draws tokens after it
// until a stop token, opts.MaxTokens, the context length, ErrStop from
// OnToken, or ctx is done. seq is the whole sequence: its first opts.Held
// tokens were delivered by earlier calls (a session's history, and a token
// delivered but not run), the rest is the prompt. OnToken receives the
// prompt's tokens and then each new one in order on this goroutine, each
// once it has run through the model, the last new one before when
// generation stops at MaxTokens or the context length (Result.Pending),
// every new one as soon as drawn with OnRouted. Cancelling ctx is seen
// between steps; Generate then returns ctx's error, and Result.Fed and
// Pending say what the sequence holds.
func (l *Loop) Generate(ctx context.Context, seq []int32, opts GenerateOptions) (res Result, err error) {
	held := opts.Held
	if held < 0 || held > len(seq) {
		return res, fmt.Errorf("engine: %d tokens held of a sequence of %d", held, len(seq))
	}
	res.PromptTokens = len(seq) - held
	sampler, err := NewSampler(opts.Sampler)
	if err != nil {
		return res, err
	}
	sampler.Ban(opts.Ban)
	if opts.Constraint != nil { // this sequence's own grammar state, advanced by its draws
		sampler.Constrain(opts.Constraint)
	}
	for _, id := range seq {
		sampler.Accept(id) // the repetition penalty sees the history and the prompt
	}
	lps := &lpSampler{s: sampler, logProbs: opts.LogProbs, top: opts.TopLogProbs}
	ev := &seqEvents{signal: make(chan struct{}, 1)}
	// The loop runs a sequence no further than its caller: a step runs a
	// new token only once OnToken has returned for every token delivered
	// (as a loop that feeds a token, delivers it and feeds the next does),
	// so that cancelling or stopping from the callback ends it at that
	// token, the runner having run no more, and a slow caller (a client
	// reading a stream) holds back its own sequence only. Counted in new
	// tokens: the drawn (on the stepping goroutine) and the delivered
	// whose callback returned. A new token goes out once it has run, so
	// the draw after it comes first (ahead 2); with OnRouted once drawn.
	// Sequences that share steps are not held back: the caller that runs
	// a step is one of them, and a step that waited for each of the
	// others to take its tokens first (on a machine whose cores the step
	// itself keeps busy) would run them a few rows a step.
	var drawnN, deliveredN atomic.Int64
	ahead := int64(2)
	if opts.OnRouted != nil {
		ahead = 1
	}
	stop := slices.Clone(opts.EndOfTurn)
	if opts.EOS >= 0 {
		stop = append(stop, opts.EOS)
	}
	// The prefix cache serves any cached prefix, this sequence's or
	// another's (a shared system prompt, a benchmark's one prompt), with
	// the routing its tokens had: RunReused hands it to OnRun as if they ran.
	req := sched.Request{Prompt: seq, MaxTokens: opts.MaxTokens, Stop: stop, RunReused: true, NoRoutes: !opts.Routes, RoutesFrom: held,
		OnToken: func(id int32) error {
			drawnN.Add(1)
			ev.push(seqEvent{kind: evDrawn, id: id, lp: lps.last})
			return nil
		},
		OnRun: func(pos int, routes []mod.Route) { ev.push(seqEvent{kind: evRan, pos: pos, routes: routes}) },
	}
	if l.runner != nil {
		req.Paused = func() bool { return drawnN.Load()-deliveredN.Load() >= ahead }
	}
	req.OnDone = func(why sched.StopReason) {
		e := seqEvent{kind: evDone}
		// Ended by a step (which holds the turn, and the runner holds this
		// sequence): the runner's own counts over it.
		if l.runner != nil && why != sched.StopCancel && why != sched.StopError {
			e.stats, e.reused = l.runner.RoutingStats(), l.runner.Reused()
		}
		ev.push(e)
	}
	// A greedy draw of the raw logits is the runner's argmax on the device
	// (sched.ArgmaxRunner): no logits read back.
	if !opts.Sampler.Greedy() || opts.LogProbs || len(opts.Ban) > 0 || opts.Constraint != nil {
		req.Sampler = lps
	}
	start := time.Now()
	q, err := l.join(req)
	if err != nil {
		return res, err
	}
	defer l.leave(q)
	defer func() { // ended early: the runner's counts, taken before q leaves
		if res.RoutingStats == nil && l.runner != nil {
			res.RoutingStats = l.runnerStats(q)
		}
	}()

	var (
		drawn    []seqEvent
		first    time.Time // the first draw
		ran      = map[int][]mod.Route{}
		ranTo    = 0    // positions below have run
		next     = held // the next position to deliver
		finished bool
		doneAt   time.Time
		reused   int // the RunnerStepper's
		// With OnRouted a new token goes out once drawn, and its routing
		// once it has run; routedTo is the next new token whose routing
		// is owed.
		early    = opts.OnRouted
		routedTo = len(seq)
	)
	// keep records what the sequence holds when the call ends: the tokens
	// run and delivered, and a last drawn token delivered but not run.
	keep := func(pending bool) {
		all := slices.Clone(seq)
		for _, d := range drawn {
			all = append(all, d.id)
		}
		n := min(ranTo, next)
		res.Fed, res.Pending = all[:n], nil
		if (pending || early != nil) && next > n {
			res.Pending = all[n : n+1]
		} else if n < held { // the old pending token did not run
			res.Pending = all[n:held]
		}
	}
	closedErr := func() error { // Close ended the call: its context's error when that is done too
		if err := ctx.Err(); err != nil {
			return err
		}
		return ErrClosed
	}
	stopped := func(err error) (Result, error) { // ErrStop from OnToken is a clean stop
		if errors.Is(err, ErrStop) {
			res.Stop = StopCallback
			return res, nil
		}
		if l.Closed() {
			return res, closedErr()
		}
		return res, err
	}
	deliver := func(pos int, last bool) (err error) {
		t := Token{Pos: pos}
		if pos < len(seq) {
			t.ID, t.Prompt = seq[pos], true
		} else {
			d := drawn[pos-len(seq)]
			t.ID, t.LogProb, t.Top = d.id, d.lp.LogProb, d.lp.Top
			res.Tokens = append(res.Tokens, d.id)
			defer func() { // once the callback returned, and the generation goes on
				if err == nil {
					deliveredN.Add(1)
				}
			}()
		}
		if !last && opts.Routes && (early == nil || t.Prompt) { // early: a new token's routing goes to OnRouted
			t.Routes = ran[pos]
		}
		if opts.OnToken == nil {
			return nil
		}
		err = l.inCallback(func() error { return opts.OnToken(t) })
		return err
	}
	// routeOut passes early the routing of the tokens delivered that ran.
	routeOut := func() {
		for ; early != nil && routedTo < min(ranTo, next) && !l.Closed(); routedTo++ {
			pos, routes := routedTo, ran[routedTo]
			if !opts.Routes || routes == nil {
				continue
			}
			_ = l.inCallback(func() error { early(pos, routes); return nil })
		}
	}
	for {
		select {
		case <-ctx.Done():
			keep(false)
			return res, ctx.Err()
		case <-ev.signal: // events to take
		default: // none: run a step (this sequence's, or one it waits behind), or wait for one
			if l.runner != nil && l.step() {
				break
			}
			stepped := l.waitStep()
			if l.runner == nil || !l.step() { // a batched loop steps on its own goroutine; a change after waitStep closes stepped
				select {
				case <-ctx.Done():
					keep(false)
					return res, ctx.Err()
				case <-ev.signal:
				case <-stepped:
				}
			}
		}
		for _, e := range ev.take() {
			switch e.kind {
			case evRan:
				ran[e.pos] = e.routes
				if opts.OnRun != nil {
					opts.OnRun(e.pos, e.routes)
				}
			case evDrawn:
				if len(drawn) == 0 {
					first = e.at
				}
				drawn = append(drawn, e)
			case evDone:
				finished, doneAt, res.RoutingStats = true, e.at, e.stats
				reused = e.reused
			}
		}
		for {
			if _, ok := ran[ranTo]; !ok {
				break
			}
			ranTo++
		}
		routeOut() // the tokens that ran since they went out
		limit := ranTo
		if early != nil && ranTo >= len(seq) {
			limit++ // the token drawn by the step that ran the one before it
		}
		for next < limit && next < len(seq)+len(drawn) && !l.Closed() && ctx.Err() == nil {
			err := deliver(next, false)
			next++
			if err != nil {
				keep(false)
				return stopped(err)
			}
			routeOut() // when this goroutine fell behind, the token has run already
		}
		if err := ctx.Err(); err != nil { // seen between tokens
			keep(false)
			return res, err
		}
		if l.Closed() { // by a callback, or by Close after it
			keep(false)
			return res, ErrClosed
		}
		if !finished {
			continue
		}
		if !first.IsZero() {
			res.Prefill = first.Sub(start)
			res.Decode = doneAt.Sub(first)
		}
		res.DecodeSteps = max(0, len(drawn)-1)
		// Reused counts from the sequence's start (the history too), once
		// per admission (a preempted sequence is admitted again).
		res.CachedTokens = min(max(max(q.Reused, reused)-held, 0), res.PromptTokens)
		res.Stop = q.Stop
		switch q.Stop {
		case sched.StopEOS:
		case sched.StopMaxTokens, sched.StopContextFull:
			if next < len(seq)+len(drawn) { // the last drawn token, not run
				if err := deliver(next, true); err != nil {
					next++
					keep(true)
					return stopped(err)
				}
				next++
			}
		case sched.StopError:
			keep(false)
			return res, q.Err
		default: // cancelled by Close
			keep(false)
			return res, closedErr()
		}
		keep(true)
		if err := sampler.Err(); err != nil {
			return res, err
		}
		return res, nil
	}
}
