package sched

import (
	"fmt"
	"slices"

	"github.com/modrun/modrun/mod"
)

// Layout is what the scheduler needs to know of a model.
type Layout struct {
	DenseLayers  int // layers whose cache holds every token (one shared table)
	RoutedLayers int // routed layers, each with a compact cache of its own
	ContextLen   int // the longest sequence
	NVocab       int // logits per row
}

// Row is one token of a step: the sequence it belongs to, its position
// there, and whether its logits are wanted (a sequence's last row when it
// samples next). A step's rows of one sequence are consecutive, in
// position order.
type Row struct {
	Seq    *Seq
	Pos    int
	Token  int32
	Logits bool
	// Argmax (with Logits, for an ArgmaxRunner only): the logits serve
	// only a greedy draw, so the runner gives their argmax instead of them.
	Argmax bool
	// Draw and U (with Argmax, for a DrawRunner only): the runner draws
	// the token at temperature Draw.Temp (above 0) with the uniform number
	// U in [0, 1) instead (DeviceSampler), as engine.Sampler draws: the
	// first token whose running sum of weights exp((l - max) / Temp), in
	// id order over the tokens Draw's filters keep, passes U times their
	// total.
	Draw
	U float64
}

// Draw is a draw's parameters on a DrawRunner: the temperature, and the
// filters a device applies (engine.Sampler's, in its order): top-k TopK
// above 0 (the TopK most likely tokens, the lower ids first among equal
// ones; at least the vocabulary: all), top-p TopP in (0, 1) (the most
// likely tokens up to that probability at temperature 1, and those equal
// to the last) and min-p MinP above 0 (the tokens at least MinP times as
// likely as the best); each else none. The zero value is the argmax.
type Draw struct {
	Temp, TopP, MinP float32
	TopK             int
}

// StepRunner runs one forward pass over a step's rows on some backend: the
// products once over every row, RoPE at each row's position, each row's
// keys and values written into its sequence's pages (Seq.Dense at the
// row's position; a routed layer's Seq.Routed[j] at its Len, which the
// runner advances for each row the layer selects), attention over the
// row's own sequence only. The scheduler has reserved the pages: room for
// every row in every table. The pages' memory is the runner's.
type StepRunner interface {
	Layout() Layout
	// Step returns the logits of the rows with Logits set, [k][nVocab] in
	// row order (the runner may reuse their memory at the next Step), and
	// every row's routing [rows][routed layers] (nil for a dense model).
	Step(rows []Row, blockTokens int) (logits []float32, routes [][]mod.Route, err error)
	// CopyPage copies page src's entries into page dst (copy-on-write).
	CopyPage(dst, src int32)
}

// ArgmaxRunner is a StepRunner that can draw a greedy row's token itself
// (on its device), so that the logits of such a row need not reach the
// host: the scheduler sets Row.Argmax on the rows of greedy sequences that
// do not keep their logits, and calls StepArgmax instead of Step.
type ArgmaxRunner interface {
	StepRunner
	// StepArgmax is Step, but for the rows with Argmax set it gives ids,
	// one per such row in row order: the first index of the row's largest
	// logit (a DrawRunner's row with Temp above 0: the token drawn), or
	// ArgmaxNonFinite when a logit is NaN or infinite. logits
	// holds the other rows with Logits set, [k][nVocab] in row order.
	StepArgmax(rows []Row, blockTokens int) (logits []float32, ids []int32, routes [][]mod.Route, err error)
}

// DrawRunner is an ArgmaxRunner that can also draw a sampled row's token
// itself (Row.Temp, Row.U), where DrawsOnDevice says so: the scheduler
// then sets Argmax on the rows of sequences whose Sampler is a
// DeviceSampler with a plain draw, and the row's id in StepArgmax is the
// draw's (ArgmaxNonFinite as for the argmax).
type DrawRunner interface {
	ArgmaxRunner
	DrawsOnDevice() bool
}

// DeviceSampler is a Sampler whose draws a DrawRunner may make
// (docs/sampling-cost.md): a plain draw at a temperature, from a uniform
// number the sampler hands out before the step.
type DeviceSampler interface {
	Sampler
	// Plain gives the parameters of the sampler's draws when each is
	// plain: no filter but top-k, top-p and min-p, no penalty, bias, ban or
	// constraint, nothing that reads the logits but the draw itself (ok
	// false otherwise). It does not change for a sequence.
	Plain() (d Draw, ok bool)
	// Uniform takes the uniform number in [0, 1) the next draw uses, as
	// Sample would have taken it.
	Uniform() float64
	// Peek gives the numbers the next n Uniform calls will, without
	// taking them: a runner that draws a sequence's next steps ahead in
	// one go (engine.RunnerStepper's chain) serves a later row its token
	// only where the row's U is the one it drew with.
	Peek(n int) []float64
	// Drawn gives the sampler the token the runner drew with it, as
	// Sample would have accepted it.
	Drawn(id int32)
}

// ArgmaxNonFinite is an ArgmaxRunner's id for a row whose logits are not
// all finite.
const ArgmaxNonFinite int32 = -1

// Sampler draws a sequence's next token (engine.Sampler is one).
type Sampler interface{ Sample(logits []float32) int32 }

// StopReason says why a sequence ended (engine.StopReason's values, and
// the scheduler's own).
type StopReason string

const (
	StopEOS         StopReason = "eos"
	StopMaxTokens   StopReason = "max-tokens"
	StopContextFull StopReason = "context-full"
	StopCallback    StopReason = "stopped"   // OnToken returned an error
	StopCancel      StopReason = "cancelled" // Scheduler.Cancel
	StopError       StopReason = "error"     // Seq.Err says which
)

// Request is one sequence to run.
type Request struct {
	Prompt    []int32
	MaxTokens int     // new tokens at most; 0 = until a stop token or the context is full
	Stop      []int32 // tokens that end the sequence (EOS, end of turn); not delivered
	Sampler   Sampler // nil = greedy (argmax, ties to the lower id)
	// OnToken receives each new token when it is drawn; an error ends the
	// sequence (StopCallback, Seq.Err holds it).
	OnToken func(id int32) error
	// OnRun sees each token once it has run (its position, and its routing
	// [routed layers], nil for a dense model), OnDone the sequence's end
	// and why (Seq.Stop: OnDone may run before the caller of Add has the
	// Seq, on the goroutine of whoever steps);
	// both run on the stepping goroutine, between steps: they must not
	// block.
	OnRun  func(pos int, routes []mod.Route)
	OnDone func(why StopReason)
	// ReuseAtMost bounds the prompt tokens the prefix cache may serve
	// (tokens served so do not run: no OnRun, unless RunReused); 0 = as
	// many as it holds, negative = none.
	ReuseAtMost int
	// RunReused gives OnRun each prompt token the prefix cache serves,
	// with the routing it had when it ran (the cache keeps it), before any
	// row of the sequence runs: for a caller that owes the prompt's routing.
	RunReused bool
	// KeepLogits and KeepRoutes keep the logits of each draw and the
	// routing of each token run (tests compare them with a solo run).
	KeepLogits, KeepRoutes bool
	// NoRoutes says the caller wants no row's routing, RoutesFrom none
	// before that position (a continuation's tokens delivered before): a
	// step runner for which fetching it costs (the runner's own steps on
	// a GPU) may leave those nil (Seq.WantsRoutes).
	NoRoutes   bool
	RoutesFrom int
	// Paused, when set, holds the sequence back while it decodes and
	// Paused returns true (its caller is behind with the tokens drawn): it
	// takes no row, keeps its pages, and does not count as waiting for
	// them. Runnable says whether a step would run anything. A sequence
	// is never held back while another waits to start (at MaxSeqs): it
	// runs on to its end and makes room, so that a caller that waits for
	// that other sequence (a token callback that generates) is not waited
	// for in turn.
	Paused func() bool
}

// Seq is one sequence in the scheduler.
type Seq struct {
	ID     int
	Dense  Table   // every dense layer's entries, one per position
	Routed []Table // [routed layers] each layer's compact cache

	req    Request
	tokens []int32 // the prompt, then each drawn token once it is to run
	fed    int     // tokens whose keys and values the tables hold
	out    []int32
	done   bool
	hashes []uint64 // chain hash of each full block fed
	// routes is the routing of the tokens fed since the last full block
	// (a routed model's; [positions][routed layers]), for its cache entry.
	routes [][]mod.Route

	Stop        StopReason
	Err         error
	Logits      [][]float32   // with KeepLogits: [draws][nVocab]
	Routes      [][]mod.Route // with KeepRoutes: [positions][routed layers], nil where reused
	Waits       int           // steps it was left out of for want of pages
	Preemptions int           // times its pages were taken and it ran again from the start
	Reused      int           // prompt tokens taken from the prefix cache instead of run
	Ran         int           // rows it ran (recomputed ones included)
}

// WantsRoutes says whether the caller wants the routing of the token at
// pos (Request.NoRoutes, RoutesFrom).
func (q *Seq) WantsRoutes(pos int) bool { return !q.req.NoRoutes && pos >= q.req.RoutesFrom }

// DrawsLeft is how many more tokens the sequence may draw before
// MaxTokens ends it (the next draw included), -1 without MaxTokens.
func (q *Seq) DrawsLeft() int {
	if q.req.MaxTokens <= 0 {
		return -1
	}
	return max(0, q.req.MaxTokens-len(q.out))
}

// Tokens are the new tokens drawn, stop tokens excluded.
func (q *Seq) Tokens() []int32 { return q.out }

// Sampler is the sequence's Request.Sampler (nil: greedy).
func (q *Seq) Sampler() Sampler { return q.req.Sampler }

// Done says whether the sequence has ended.
func (q *Seq) Done() bool { return q.done }

// Options size a Scheduler.
type Options struct {
	BlockTokens int  // entries per page; 0 = 16
	Pages       int  // the pool's size in pages (PagesFor sizes it)
	BatchTokens int  // rows per step at most (--batch-tokens); 0 = 512
	MaxSeqs     int  // sequences running at once; 0 = no limit (the rest queue)
	PrefixCache bool // keep full token blocks for reuse by later sequences
}

// PagesFor is how many pages hold seqs sequences of ctx tokens each in
// the worst case (every routed layer selecting every token).
func PagesFor(l Layout, seqs, ctx, blockTokens int) int {
	blocks := (ctx + blockTokens - 1) / blockTokens
	return seqs * blocks * (l.DenseLayers + l.RoutedLayers)
}

// Stats count what the scheduler did.
type Stats struct {
	Steps, Rows     int
	Waits           int // sequence-steps left out for want of pages
	Preemptions     int
	ReusedTokens    int // prompt tokens served from the prefix cache
	PrefixEvictions int
	MaxPagesInUse   int
	FinishedSeqs    int
	SharedSteps     int // steps that ran rows of two sequences or more
	MaxSeqsInStep   int
	Chains          int // runs of several steps in one go (ChainRunner)
	ChainedSteps    int // the steps they ran (counted in Steps too)
}

// Scheduler runs sequences in steps over one StepRunner. It is not safe
// for concurrent use: one goroutine adds, cancels and steps.
type Scheduler struct {
	run     StepRunner
	lay     Layout
	opts    Options
	pool    *Pool
	prefix  *prefixCache
	queue   []*Seq // added, not yet running
	active  []*Seq // running, in the order they started
	nextID  int
	stats   Stats
	rows    []Row
	picks   []pick       // a step's draws (greedyPicks, sampledPicks)
	sampled []int        // the sampled picks' places (sampledPicks)
	argmax  ArgmaxRunner // run, when it draws greedy rows itself
	drawer  bool         // run is a DrawRunner that draws on its device
	chain   ChainRunner  // run, when it chains decode steps
	// Arriving, when set, says whether a sequence is about to be added
	// (a caller waits to add one): no chain of steps then (ChainRunner),
	// whose length the newcomer's start would wait for.
	Arriving func() bool
}

// New is a scheduler over run with o's sizes.
func New(run StepRunner, o Options) (*Scheduler, error) {
	if o.BlockTokens == 0 {
		o.BlockTokens = 16
	}
	if o.BatchTokens == 0 {
		o.BatchTokens = 512
	}
	if o.BatchTokens < 0 || o.MaxSeqs < 0 || o.BlockTokens < 0 {
		return nil, fmt.Errorf("sched: --batch-tokens %d, parallel %d and block size %d must not be negative", o.BatchTokens, o.MaxSeqs, o.BlockTokens)
	}
	pool, err := NewPool(o.Pages, o.BlockTokens)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{run: run, lay: run.Layout(), opts: o, pool: pool}
	s.argmax, _ = run.(ArgmaxRunner)
	if d, ok := run.(DrawRunner); ok {
		s.drawer = d.DrawsOnDevice()
	}
	if c, ok := run.(ChainRunner); ok && c.ChainSteps() > 1 {
		s.chain = c
	}
	if o.PrefixCache {
		s.prefix = newPrefixCache()
	}
	return s, nil
}

// Pool is the scheduler's page pool.
func (s *Scheduler) Pool() *Pool { return s.pool }

// Stats is what the scheduler did so far.
func (s *Scheduler) Stats() Stats { return s.stats }

// Busy says whether a sequence is running or queued.
func (s *Scheduler) Busy() bool { return len(s.active)+len(s.queue) > 0 }

// Runnable says whether a step would run a row: a running sequence not
// paused (Request.Paused), or a queued one that may start.
func (s *Scheduler) Runnable() bool {
	if len(s.queue) > 0 && (s.opts.MaxSeqs == 0 || len(s.active) < s.opts.MaxSeqs) {
		return true
	}
	return slices.ContainsFunc(s.active, func(q *Seq) bool { return !s.paused(q) })
}

// paused says whether q decodes and its caller holds it back (never while
// a sequence waits to start: Request.Paused).
func (s *Scheduler) paused(q *Seq) bool {
	return q.req.Paused != nil && len(s.queue) == 0 && len(q.tokens)-q.fed == 1 && q.req.Paused()
}

// CachedPages is how many pages the prefix cache holds.
func (s *Scheduler) CachedPages() int {
	if s.prefix == nil {
		return 0
	}
	return s.prefix.pages()
}

// ClearPrefix empties the prefix cache.
func (s *Scheduler) ClearPrefix() {
	for s.prefix != nil && s.prefix.evict(s.pool) {
	}
}

// Add queues a sequence; it starts at a coming step.
func (s *Scheduler) Add(req Request) (*Seq, error) {
	l := s.lay
	switch {
	case len(req.Prompt) == 0:
		return nil, fmt.Errorf("sched: empty prompt (add BOS to start from nothing)")
	case len(req.Prompt) > l.ContextLen:
		return nil, fmt.Errorf("sched: the prompt has %d tokens, more than the context length %d", len(req.Prompt), l.ContextLen)
	case req.MaxTokens < 0:
		return nil, fmt.Errorf("sched: max tokens %d must not be negative", req.MaxTokens)
	}
	for i, t := range req.Prompt {
		if t < 0 || int(t) >= l.NVocab {
			return nil, fmt.Errorf("sched: token %d at index %d is outside the vocabulary [0, %d)", t, i, l.NVocab)
		}
	}
	longest := l.ContextLen
	if req.MaxTokens > 0 {
		longest = min(longest, len(req.Prompt)+req.MaxTokens)
	}
	// A sequence alone must fit, with one more block per table for a step's
	// reservation and a copied page.
	if need := PagesFor(l, 1, longest+2*s.opts.BlockTokens, s.opts.BlockTokens); need > s.pool.Pages() {
		return nil, fmt.Errorf("sched: a sequence of up to %d tokens may need %d KV pages, more than the KV budget's %d pages (raise the budget, modrun.Options.KVBudget, or lower the context length)", longest, need, s.pool.Pages())
	}
	q := &Seq{ID: s.nextID, req: req, tokens: slices.Clone(req.Prompt)}
	s.nextID++
	q.Dense.Width = max(1, l.DenseLayers)
	q.Routed = make([]Table, l.RoutedLayers)
	for j := range q.Routed {
		q.Routed[j].Width = 1
	}
	s.queue = append(s.queue, q)
	return q, nil
}

// Cancel ends q at once (StopCancel) and frees its pages; a finished
// sequence is left as it is.
func (s *Scheduler) Cancel(q *Seq) {
	if !q.done {
		s.finish(q, StopCancel, nil)
	}
}

// finish ends q: its pages go back to the pool now.
func (s *Scheduler) finish(q *Seq, why StopReason, err error) {
	q.done, q.Stop, q.Err = true, why, err
	s.free(q)
	s.active = slices.DeleteFunc(s.active, func(a *Seq) bool { return a == q })
	s.queue = slices.DeleteFunc(s.queue, func(a *Seq) bool { return a == q })
	s.stats.FinishedSeqs++
	if q.req.OnDone != nil {
		q.req.OnDone(why)
	}
}

// CancelAll ends every running and queued sequence with err (StopError),
// or StopCancel when err is nil.
func (s *Scheduler) CancelAll(err error) {
	why := StopCancel
	if err != nil {
		why = StopError
	}
	for _, q := range append(slices.Clone(s.active), s.queue...) {
		s.finish(q, why, err)
	}
}

// free gives back every page q holds and forgets what it ran: it runs
// again from its first token (a preemption).
func (s *Scheduler) free(q *Seq) {
	q.Dense.release(s.pool)
	for j := range q.Routed {
		q.Routed[j].release(s.pool)
	}
	q.fed, q.hashes, q.routes = 0, q.hashes[:0], q.routes[:0]
}

// admit starts queued sequences while the parallel limit allows, each
// taking the longest cached prefix of its tokens (all but the last, which
// must run to give logits).
func (s *Scheduler) admit() {
	for len(s.queue) > 0 && (s.opts.MaxSeqs == 0 || len(s.active) < s.opts.MaxSeqs) {
		q := s.queue[0]
		s.queue = s.queue[1:]
		s.active = append(s.active, q)
		s.reuse(q)
	}
}

// reuse points q's tables at the cache's pages for the longest cached
// prefix of its tokens.
func (s *Scheduler) reuse(q *Seq) {
	if s.prefix == nil || q.fed > 0 || q.req.ReuseAtMost < 0 {
		return
	}
	bt := s.pool.blockTokens
	most := (len(q.tokens) - 1) / bt
	if q.req.ReuseAtMost > 0 {
		most = min(most, q.req.ReuseAtMost/bt)
	}
	chain := s.prefix.lookup(q.tokens, bt, most)
	if len(chain) == 0 {
		return
	}
	e, blocks := chain[len(chain)-1], len(chain)
	q.Dense.share(s.pool, e.dense, blocks*bt)
	for j := range q.Routed {
		q.Routed[j].share(s.pool, e.routed[j].Pages, e.routed[j].Len)
	}
	var parent uint64
	for b := range blocks {
		parent = chainHash(parent, q.tokens[b*bt:(b+1)*bt])
		q.hashes = append(q.hashes, parent)
	}
	q.fed = blocks * bt
	q.Reused += q.fed
	s.stats.ReusedTokens += q.fed
	if q.req.RunReused && q.req.OnRun != nil {
		for b, e := range chain {
			for i := range bt {
				var rt []mod.Route
				if e.routes != nil {
					rt = slices.Clone(e.routes[i])
				}
				q.req.OnRun(b*bt+i, rt)
			}
		}
	}
}

// Step runs one forward pass over the running sequences: a row for each
// decoding one, then prompt chunks of those still prefilling, up to
// BatchTokens rows. A sequence whose pages cannot be had waits (when none
// can, the latest started is preempted). It returns false when no
// sequence is running or queued, or every running one is paused.
func (s *Scheduler) Step() (bool, error) {
	s.admit()
	if len(s.active) == 0 {
		return false, nil
	}
	rows, counts := s.plan()
	if len(rows) == 0 && !slices.ContainsFunc(s.active, func(q *Seq) bool { return !s.paused(q) }) {
		return false, nil // every running sequence is paused: nothing to run
	}
	for tries := 0; len(rows) == 0; tries++ { // every sequence waits: take the latest one's pages
		victim := s.preemptable()
		if victim == nil || tries > len(s.active) {
			err := fmt.Errorf("sched: no sequence can run and none holds pages (%d free of %d)", s.pool.Free(), s.pool.Pages())
			s.CancelAll(err)
			return true, err
		}
		s.free(victim)
		victim.Preemptions++
		s.stats.Preemptions++
		rows, counts = s.plan()
	}
	s.stats.Steps++
	s.stats.Rows += len(rows)
	seqs := 1
	for i := 1; i < len(rows); i++ {
		if rows[i].Seq != rows[i-1].Seq {
			seqs++
		}
	}
	if seqs > 1 {
		s.stats.SharedSteps++
	}
	s.stats.MaxSeqsInStep = max(s.stats.MaxSeqsInStep, seqs)
	s.stats.MaxPagesInUse = max(s.stats.MaxPagesInUse, s.pool.Pages()-s.pool.Free())
	var (
		logits []float32
		ids    []int32
		routes [][]mod.Route
		err    error
	)
	s.uniforms(rows)
	if n := s.chainLen(rows); n > 1 {
		s.stepChain(rows, counts, n)
		return true, nil
	}
	if s.argmax != nil {
		logits, ids, routes, err = s.argmax.StepArgmax(rows, s.pool.blockTokens)
		if err == nil {
			err = s.checkArgmax(rows, logits, ids)
		}
	} else {
		logits, routes, err = s.run.Step(rows, s.pool.blockTokens)
	}
	if err != nil { // the backend failed: every sequence of the step ends with its error
		for i, r := range rows {
			if i == 0 || rows[i-1].Seq != r.Seq {
				s.finish(r.Seq, StopError, err)
			}
		}
		return true, nil
	}
	s.after(rows, counts, logits, ids, routes)
	return true, nil
}

// onRunner says whether q's next token is drawn by the step runner: the
// argmax of a greedy sequence on an ArgmaxRunner, a DeviceSampler's plain
// draw on a DrawRunner that draws; never where the logits are kept.
func (s *Scheduler) onRunner(q *Seq) bool {
	if s.argmax == nil || q.req.KeepLogits {
		return false
	}
	if q.req.Sampler == nil {
		return true
	}
	ds, ok := q.req.Sampler.(DeviceSampler)
	if !ok || !s.drawer {
		return false
	}
	_, plain := ds.Plain()
	return plain
}

// uniforms gives each of the step's Argmax rows of a DeviceSampler its
// temperature and uniform number, taken from the sampler once the step's
// rows are final (plan may run again when a sequence is preempted).
func (s *Scheduler) uniforms(rows []Row) {
	for i := range rows {
		r := &rows[i]
		r.Draw, r.U = Draw{}, 0
		if !r.Argmax || r.Seq.req.Sampler == nil {
			continue
		}
		ds := r.Seq.req.Sampler.(DeviceSampler) // onRunner
		r.Draw, _ = ds.Plain()
		r.U = ds.Uniform()
	}
}

// plan packs the step's rows and reserves their pages; counts are the
// routed tables' lengths before the step, per row's sequence.
func (s *Scheduler) plan() ([]Row, map[*Seq][]int) {
	rows := s.rows[:0]
	counts := map[*Seq][]int{}
	budget := s.opts.BatchTokens
	take := func(q *Seq) {
		s.reuse(q) // a preempted sequence may find its prefix cached
		n := min(len(q.tokens)-q.fed, budget)
		if n <= 0 {
			return
		}
		if !s.reserve(q, n) {
			q.Waits++
			s.stats.Waits++
			return
		}
		c := make([]int, len(q.Routed))
		for j := range q.Routed {
			c[j] = q.Routed[j].Len
		}
		counts[q] = c
		onRunner := s.onRunner(q)
		for i := range n {
			p := q.fed + i
			last := i == n-1 && p == len(q.tokens)-1
			rows = append(rows, Row{Seq: q, Pos: p, Token: q.tokens[p], Logits: last, Argmax: last && onRunner})
		}
		budget -= n
	}
	for _, q := range s.active { // decoding sequences first: a row each
		if len(q.tokens)-q.fed == 1 && !s.paused(q) {
			take(q)
		}
	}
	for _, q := range s.active {
		if len(q.tokens)-q.fed > 1 {
			take(q)
		}
	}
	s.rows = rows
	return rows, counts
}

// reserve takes the pages q's next n rows may write (evicting cached
// prefixes when the pool is short); false when the pool cannot give them.
func (s *Scheduler) reserve(q *Seq, n int) bool {
	need := func() int {
		k := q.Dense.need(s.pool, q.fed+n)
		for j := range q.Routed {
			k += q.Routed[j].need(s.pool, q.Routed[j].Len+n)
		}
		return k
	}
	for need() > s.pool.Free() {
		if s.prefix == nil || !s.prefix.evict(s.pool) {
			return false
		}
		s.stats.PrefixEvictions++
	}
	q.Dense.reserve(s.pool, q.fed+n, s.run.CopyPage)
	for j := range q.Routed {
		q.Routed[j].reserve(s.pool, q.Routed[j].Len+n, s.run.CopyPage)
	}
	return true
}

// preemptable is the latest started running sequence that holds pages.
func (s *Scheduler) preemptable() *Seq {
	for i := len(s.active) - 1; i >= 0; i-- {
		if q := s.active[i]; len(q.Dense.Pages) > 0 || slices.ContainsFunc(q.Routed, func(t Table) bool { return len(t.Pages) > 0 }) {
			return q
		}
	}
	return nil
}

// after books a step's results: each sequence's fed tokens and tables, its
// routing, its full blocks into the prefix cache, and a drawn token for
// each sequence that gave logits.
func (s *Scheduler) after(rows []Row, counts map[*Seq][]int, logits []float32, ids []int32, routes [][]mod.Route) {
	nv, k, d := s.lay.NVocab, 0, 0 // k: the draws, d: the logits rows
	picks := s.greedyPicks(rows, logits, ids)
	s.sampledPicks(picks, logits, drawWorkers())
	for lo := 0; lo < len(rows); {
		q := rows[lo].Seq
		hi := lo + 1
		for hi < len(rows) && rows[hi].Seq == q {
			hi++
		}
		if routes != nil {
			s.book(q, rows[lo:hi], counts[q], routes[lo:hi])
		} else {
			s.book(q, rows[lo:hi], counts[q], nil)
		}
		if r := rows[hi-1]; r.Logits {
			var row []float32 // an Argmax row's logits stay on the runner
			if !r.Argmax {
				row = logits[d*nv : (d+1)*nv]
				d++
			}
			s.draw(q, row, picks[k])
			k++
		}
		lo = hi
	}
}

// book advances q past its rows: the dense table's length, the routed
// tables' unused pages back, the routes kept, and each block the rows
// completed added to the prefix cache.
func (s *Scheduler) book(q *Seq, rows []Row, base []int, routes [][]mod.Route) {
	bt := s.pool.blockTokens
	q.fed += len(rows)
	q.Ran += len(rows)
	q.Dense.Len = q.fed
	for j := range q.Routed {
		q.Routed[j].trim(s.pool)
	}
	if q.req.OnRun != nil {
		for i, r := range rows {
			var rt []mod.Route
			if routes != nil {
				rt = slices.Clone(routes[i])
			}
			q.req.OnRun(r.Pos, rt)
		}
	}
	if routes != nil && s.prefix != nil { // the open block's routing, for its cache entry
		for i := range rows {
			q.routes = append(q.routes, slices.Clone(routes[i]))
		}
	}
	if q.req.KeepRoutes && routes != nil {
		for i, r := range rows {
			for len(q.Routes) <= r.Pos {
				q.Routes = append(q.Routes, nil)
			}
			q.Routes[r.Pos] = slices.Clone(routes[i])
		}
	}
	for b := len(q.hashes); (b+1)*bt <= q.fed; b++ {
		var parent uint64
		if b > 0 {
			parent = q.hashes[b-1]
		}
		h := chainHash(parent, q.tokens[b*bt:(b+1)*bt])
		q.hashes = append(q.hashes, h)
		if s.prefix == nil {
			continue
		}
		var blockRoutes [][]mod.Route // the block's routing: the first bt of the open ones
		if len(q.routes) >= bt {
			blockRoutes = q.routes[:bt:bt]
			q.routes = q.routes[bt:]
		}
		// Each routed layer's entries below the block's end: those before
		// the step, and the step's rows before it that the layer took.
		end := (b + 1) * bt
		c := slices.Clone(base)
		for i, r := range rows {
			if r.Pos >= end {
				break
			}
			for j := range c {
				if routes[i][j].Selected {
					c[j]++
				}
			}
		}
		s.prefix.add(s.pool, h, parent, q.tokens[b*bt:end], q.Dense.Pages[:(b+1)*q.Dense.Width], q.Routed, c, blockRoutes)
	}
}
