package modrun

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/engine/grammar"
	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/mod"
)

// batcher runs the sessions of a Model in shared steps (Options.Parallel >
// 1 or PrefixCache; DESIGN.md §8): one goroutine steps an engine/sched
// scheduler over the backend's step runner (engine.StepperOf: cpu.Stepper, vulkan.Stepper)
// while any sequence runs, and
// each Generate joins as one sequence. A session's next Generate is a new
// sequence whose tokens begin with everything the session holds: the
// prefix cache serves the full 16-token blocks of that history (it is
// never fed again), and only the tail of the last block and the new
// tokens run. Under memory pressure the cache may have evicted them, and
// they run again: the same tokens, at the cost of a prefill.
type batcher struct {
	mu sync.Mutex // guards everything below, and the scheduler
	// cond wakes the stepping goroutine (work or closing) and Close (no
	// Generate left, or a callback running).
	cond      *sync.Cond
	s         *sched.Scheduler
	closed    bool
	inflight  int // batched Generate calls running
	callbacks int // token callbacks running
	exited    chan struct{}
	// turn, when not nil, is the model's turn on its runner, which each
	// step takes: Vulkan's step runner shares the runner's device and
	// scratch, so a step and LogProbs must not run at once.
	turn chan struct{}
}

// newBatcher steps backend's step runner; turn is the model's turn on the
// runner (Model.turn), which a step on Vulkan takes.
func newBatcher(backend *engine.Backend, opts Options, ctxLen int, turn chan struct{}) (*batcher, error) {
	parallel := max(opts.Parallel, 1)
	st, err := engine.StepperOf(backend, parallel) // the backend runner's weights, shared
	if err != nil {
		return nil, fmt.Errorf("modrun: %w", err)
	}
	const bt = 16
	pages := sched.PagesFor(st.Layout(), parallel, ctxLen+2*bt, bt)
	if opts.KVBudget > 0 {
		pages = int(opts.KVBudget / int64(st.PageBytes(bt)))
		if pages < 1 {
			return nil, fmt.Errorf("modrun: KV budget %d bytes holds no %d-byte page", opts.KVBudget, st.PageBytes(bt))
		}
	}
	if err := st.Reserve(pages, bt); err != nil {
		return nil, fmt.Errorf("modrun: %w", err)
	}
	batchTokens := opts.UBatch
	if most := st.MaxRows(); most > 0 { // Vulkan: the runner's batch scratch
		batchTokens = min(cmp.Or(batchTokens, most), most)
	}
	s, err := sched.New(st, sched.Options{BlockTokens: bt, Pages: pages, BatchTokens: batchTokens, MaxSeqs: parallel, PrefixCache: true})
	if err != nil {
		return nil, fmt.Errorf("modrun: %w", err)
	}
	b := &batcher{s: s, exited: make(chan struct{})}
	if backend.Name != BackendCPU {
		b.turn = turn
	}
	b.cond = sync.NewCond(&b.mu)
	go b.loop()
	return b, nil
}

// loop steps while a sequence runs or waits; sequences join and leave
// between steps (Add and Cancel take mu).
func (b *batcher) loop() {
	defer close(b.exited)
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		for !b.closed && !b.s.Busy() {
			b.cond.Wait()
		}
		if b.closed {
			return
		}
		if b.turn != nil {
			b.turn <- struct{}{}
		}
		_, _ = b.s.Step() // a failed step ends its sequences with the error (Seq.Err)
		if b.turn != nil {
			<-b.turn
		}
		b.mu.Unlock()     // let joins and cancels in: a step is shorter than the
		runtime.Gosched() // mutex's 1 ms before it hands over to a waiter
		b.mu.Lock()
	}
}

// close waits for the batched Generate calls to end (unless a token
// callback runs: Close from one closes at once), ends every sequence and
// stops the stepping goroutine.
func (b *batcher) close() {
	b.mu.Lock()
	for b.inflight > 0 && b.callbacks == 0 && !b.closed {
		b.cond.Wait()
	}
	b.closed = true
	b.s.CancelAll(nil)
	b.cond.Broadcast()
	b.mu.Unlock()
	<-b.exited
}

func (b *batcher) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// join adds a sequence; ErrClosed once the model is closing.
func (b *batcher) join(req sched.Request) (*sched.Seq, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	q, err := b.s.Add(req)
	if err != nil {
		return nil, fmt.Errorf("modrun: %w", err)
	}
	b.inflight++
	b.cond.Broadcast()
	return q, nil
}

// leave ends q (when it runs still) and counts its Generate out.
func (b *batcher) leave(q *sched.Seq) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.s.Cancel(q)
	b.inflight--
	b.cond.Broadcast()
}

// inCallback brackets a token callback, for close.
func (b *batcher) inCallback(fn func() error) error {
	b.mu.Lock()
	b.callbacks++
	b.cond.Broadcast()
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.callbacks--
		b.mu.Unlock()
	}()
	return fn()
}

// seqEvent is what the stepping goroutine tells a batched Generate: a
// token ran (ran), a token was drawn (drawn), or the sequence ended (done).
type seqEvent struct {
	kind   int // evRan, evDrawn, evDone
	pos    int
	routes []mod.Route
	id     int32
	lp     engine.Token // a drawn token's log-probabilities
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

// lpSampler is a session's sampler, with the drawn token's
// log-probabilities taken from the same logits.
type lpSampler struct {
	s        *engine.Sampler
	logProbs bool
	top      int
	last     engine.Token
}

func (l *lpSampler) Sample(logits []float32) int32 {
	id := l.s.Sample(logits)
	if l.logProbs {
		l.last.LogProb, l.last.Top = engine.LogProbs(logits, id, l.top)
	}
	return id
}

// generateBatched is Generate on the batcher: the session's sequence plus
// ids as one scheduler sequence, its tokens delivered to fn on this
// goroutine in order, each once it has run (the last new one before).
func (s *Session) generateBatched(ctx context.Context, ids []int32, so engine.SamplerOptions, constraint *grammar.Matcher, opts GenerateOptions, fn func(Token) error) (Result, error) {
	b := s.m.batch
	held := len(s.fed) + len(s.pending)
	seq := slices.Concat(s.fed, s.pending, ids)
	sampler, err := engine.NewSampler(so)
	if err != nil {
		return Result{}, err
	}
	sampler.Ban(s.banned(opts))
	if constraint != nil { // this sequence's own grammar state, advanced by its draws
		sampler.Constrain(constraint)
	}
	for _, id := range seq {
		sampler.Accept(id) // the repetition penalty sees the history and the prompt
	}
	lps := &lpSampler{s: sampler, logProbs: opts.LogProbs, top: opts.TopLogProbs}
	ev := &seqEvents{signal: make(chan struct{}, 1)}
	// The prefix cache serves any cached prefix, this session's or
	// another's (a shared system prompt, a benchmark's one prompt), with
	// the routing its tokens had: RunReused hands it to OnRun as if they ran.
	req := sched.Request{Prompt: seq, MaxTokens: opts.MaxTokens, Stop: s.m.tok.EndOfGeneration(), Sampler: lps, RunReused: true,
		OnToken: func(id int32) error { ev.push(seqEvent{kind: evDrawn, id: id, lp: lps.last}); return nil },
		OnRun:   func(pos int, routes []mod.Route) { ev.push(seqEvent{kind: evRan, pos: pos, routes: routes}) },
		OnDone:  func() { ev.push(seqEvent{kind: evDone}) },
	}
	q, err := b.join(req)
	if err != nil {
		return Result{}, err
	}
	defer b.leave(q)

	start := time.Now()
	res := Result{Timing: Timing{PromptTokens: len(ids)}}
	var drawn []seqEvent
	ran := map[int][]mod.Route{}
	ranTo := len(s.fed) // positions below have run
	next := held        // the next position to deliver
	finished := false
	routesOn := fn != nil && !s.m.noRoutes
	// With OnRouted a new token goes out once drawn, and its routing once
	// it has run; routedTo is the next new token whose routing is owed.
	early, routedTo := s.onRouted(opts, fn), len(seq)
	// keep records what the session holds when the call ends: the tokens
	// run and delivered, and a last drawn token delivered but not run.
	keep := func(pending bool) {
		all := seq
		for _, d := range drawn {
			all = append(all, d.id)
		}
		n := min(ranTo, next)
		s.fed = slices.Clone(all[:n])
		s.pending = nil
		if (pending || early != nil) && next > n {
			s.pending = []int32{all[n]}
		} else if n < held { // the old pending token did not run
			s.pending = slices.Clone(all[n:held])
		}
	}
	deliver := func(pos int, last bool) error {
		var id int32
		t := Token{Pos: pos}
		if pos < len(seq) {
			id, t.Prompt = seq[pos], true
		} else {
			d := drawn[pos-len(seq)]
			id, t.LogProb, t.TopLogProbs = d.id, d.lp.LogProb, d.lp.Top
			res.Tokens++
		}
		if !last && routesOn && (early == nil || t.Prompt) { // early: a new token's routing goes to OnRouted
			t.Routes = ran[pos]
		}
		text, err := s.dec.Push(id)
		if err != nil {
			return fmt.Errorf("modrun: %w", err)
		}
		if fn == nil {
			return nil
		}
		t.ID, t.Text = id, string(text)
		return b.inCallback(func() error { return s.m.lendDuring(func() error { return fn(t) }) })
	}
	// routeOut passes early the routing of the tokens delivered that ran.
	routeOut := func() {
		for ; early != nil && routedTo < min(ranTo, next) && !b.isClosed(); routedTo++ {
			pos, routes := routedTo, ran[routedTo]
			_ = b.inCallback(func() error { early(pos, routes); return nil })
		}
	}
	for {
		select {
		case <-ctx.Done():
			keep(false)
			return res, ctx.Err()
		case <-ev.signal:
		}
		for _, e := range ev.take() {
			switch e.kind {
			case evRan:
				ran[e.pos] = e.routes
				s.count(e.pos, e.routes)
			case evDrawn:
				if len(drawn) == 0 {
					res.Prefill = time.Since(start)
				}
				drawn = append(drawn, e)
			case evDone:
				finished = true
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
		for next < limit && next < len(seq)+len(drawn) && !b.isClosed() && ctx.Err() == nil {
			err := deliver(next, false)
			next++
			if err != nil {
				keep(false)
				return s.stopped(res, err)
			}
			routeOut() // when this goroutine fell behind, the token has run already
		}
		if b.isClosed() { // by a callback, or by Close after it
			keep(false)
			return res, ErrClosed
		}
		if err := ctx.Err(); err != nil { // seen between tokens, as the loop of the runner sees it
			keep(false)
			return res, err
		}
		if !finished {
			continue
		}
		res.Decode = time.Since(start) - res.Prefill
		res.DecodeSteps = max(0, res.Tokens-1)
		// Reused counts from the sequence's start (the session's history
		// too), once per admission (a preempted sequence is admitted again).
		res.CachedTokens = min(max(q.Reused-held, 0), len(ids))
		switch q.Stop {
		case sched.StopEOS:
			res.Stop = StopEOS
		case sched.StopMaxTokens, sched.StopContextFull:
			res.Stop = StopMaxTokens
			if q.Stop == sched.StopContextFull {
				res.Stop = StopContextFull
			}
			if next < len(seq)+len(drawn) { // the last drawn token, not run
				if err := deliver(next, true); err != nil {
					next++
					keep(true)
					return s.stopped(res, err)
				}
				next++
			}
		case sched.StopError:
			keep(false)
			return res, fmt.Errorf("modrun: %w", q.Err)
		default: // cancelled by Close
			keep(false)
			return res, ErrClosed
		}
		keep(true)
		res.Tail = string(s.dec.Flush())
		res.Layers = slices.Clone(s.layers)
		if err := sampler.Err(); err != nil {
			return res, fmt.Errorf("modrun: %w", err)
		}
		return res, nil
	}
}

// stopped ends a batched Generate whose callback returned err: ErrStop is
// a clean stop.
func (s *Session) stopped(res Result, err error) (Result, error) {
	res.Layers = slices.Clone(s.layers)
	if errors.Is(err, ErrStop) {
		res.Stop = StopCallback
		return res, nil
	}
	if s.m.batch.isClosed() {
		return res, ErrClosed
	}
	return res, err
}

// count adds a token's routing to the session's per-layer counts, once per
// position of its sequence.
func (s *Session) count(pos int, routes []mod.Route) {
	if pos < s.counted || routes == nil {
		return
	}
	s.counted = pos + 1
	if s.layers == nil {
		for _, r := range routes {
			s.layers = append(s.layers, LayerStat{Layer: r.Layer})
		}
	}
	for j, r := range routes {
		s.layers[j].Seen++
		if r.Selected {
			s.layers[j].Selected++
		}
	}
}
