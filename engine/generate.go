package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/modrun/modrun/mod"
)

// The generation loop: the one that the API (modrun.Session.Generate, and
// through it the command line) and bench run, so that bench times what
// users run.

// StopReason says why generation ended.
type StopReason string

const (
	StopEOS         StopReason = "eos"          // the model produced end-of-sequence (or end-of-turn)
	StopMaxTokens   StopReason = "max-tokens"   // the requested number of tokens was produced
	StopContextFull StopReason = "context-full" // the sequence reached the context length
	StopCallback    StopReason = "stopped"      // OnToken returned ErrStop
)

// ErrStop, returned by OnToken, ends generation without an error.
var ErrStop = errors.New("stop")

// GenerateOptions control one generation.
type GenerateOptions struct {
	MaxTokens int   // new tokens at most; 0 = until EOS or the context is full
	EOS       int32 // end-of-sequence id; negative = none
	// EndOfTurn lists more ids that end generation as EOS does, such as
	// Llama 3's <|eot_id|> (tokenizer.Tokenizer.EndOfGeneration).
	EndOfTurn []int32
	Sampler   SamplerOptions
	// Ban lists ids the sampler never draws (Sampler.Ban): the API's
	// IgnoreEOS bans the end-of-generation tokens.
	Ban []int32
	// Constraint, when set, restricts the new tokens to those it allows
	// (Sampler.Constrain): a grammar. The runner then gives its logits
	// even for greedy decoding.
	Constraint Constraint
	// Chunk is the most prompt tokens one Feed runs (Backend.PromptChunk);
	// 0 = the whole prompt at once. Cancelling is seen between chunks.
	Chunk int
	// Pending are tokens that an earlier call drew and delivered without
	// running them (its Result.Pending): they run before the prompt, and
	// OnToken does not see them again.
	Pending []int32
	// History are the tokens the runner's sequence holds already: the
	// repetition penalty looks back over them as over the prompt.
	History []int32
	// OnToken receives every token in order, each once it has run through
	// the model: the prompt's (Token.Prompt), then each new one. The last
	// new one comes before it runs, when generation stops at MaxTokens or
	// the context length (Result.Pending). ErrStop ends generation with
	// StopCallback; another error ends it with that error.
	OnToken func(Token) error
	// Routes fills Token.Routes from a RoutingTracer runner.
	Routes bool
	// OnRouted, when set, makes OnToken receive each new token as soon as
	// it is drawn, before it runs (its Routes nil: the first new token then
	// waits for the prompt's last Feed alone, not for its own as well),
	// and OnRouted its routing once it has run (with Routes; nil routes
	// without). A token delivered and not run, when a Feed fails or the
	// callback stops, is Result.Pending.
	OnRouted func(pos int, routes []mod.Route)
	// LogProbs fills each new token's Token.LogProb, and TopLogProbs its
	// Token.Top (the most likely tokens at its place). The logits are then
	// read back even for greedy decoding.
	LogProbs    bool
	TopLogProbs int
	// BeforeFeed runs before each Feed: the API makes the runner hold its
	// session's sequence again (a token callback may have run another
	// session on it), and refuses a model closed meanwhile.
	BeforeFeed func() error
	// AfterFeed sees each Feed's tokens and error (non-finite logits
	// included), and generation goes on with the error it returns: the API
	// records the tokens its session ran.
	AfterFeed func(tokens []int32, err error) error
}

// Token is one token of the sequence as OnToken receives it.
type Token struct {
	ID     int32
	Pos    int  // its position in the sequence
	Prompt bool // a token of the prompt (or of Pending), not a new one
	// Routes says what each routed layer did with the token (with
	// GenerateOptions.Routes); nil for a token that has not run.
	Routes []mod.Route
	// LogProb is a new token's log-probability and Top the most likely
	// tokens where it was drawn (GenerateOptions.LogProbs, TopLogProbs).
	LogProb float32
	Top     []TokenLogProb
}

// Timing is how long the two phases of a generation took, and how many
// tokens each ran.
type Timing struct {
	PromptTokens int           // tokens of the prompt run (BOS included)
	Prefill      time.Duration // running the prompt and choosing the first token
	Decode       time.Duration // producing the rest
	DecodeSteps  int           // forward passes in Decode: one per new token after the first
}

// PrefillRate and DecodeRate are tokens per second.
func (t Timing) PrefillRate() float64 { return rate(t.PromptTokens, t.Prefill) }
func (t Timing) DecodeRate() float64  { return rate(t.DecodeSteps, t.Decode) }

func rate(n int, d time.Duration) float64 {
	if d <= 0 || n <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Result is what Generate produced and how fast.
type Result struct {
	Timing
	Tokens []int32 // the new tokens delivered (not the prompt), EOS excluded
	Stop   StopReason
	// Pending is the last new token when generation stopped before running
	// it (StopMaxTokens, StopContextFull): a continuation runs it first
	// (GenerateOptions.Pending).
	Pending []int32
}

// Generate starts a fresh sequence on r (Reset) and continues it with
// prompt (Continue).
func Generate(ctx context.Context, r Runner, prompt []int32, opts GenerateOptions) (Result, error) {
	r.Reset()
	return Continue(ctx, r, prompt, opts)
}

// Continue runs opts.Pending and prompt after the tokens r holds, then
// draws tokens until EOS, MaxTokens, the context length, ErrStop from
// OnToken, or ctx is done (seen before each Feed: between the prompt's
// chunks and between tokens; it returns ctx's error). With a pure greedy
// sampler and a GreedyFeeder it lets the runner take the argmax.
func Continue(ctx context.Context, r Runner, prompt []int32, opts GenerateOptions) (res Result, err error) {
	res.PromptTokens = len(prompt)
	toRun := append(slices.Clone(opts.Pending), prompt...)
	pos := r.Pos()
	switch n := r.ContextLen(); {
	case len(toRun) == 0:
		return res, fmt.Errorf("engine: empty prompt (add BOS to start from nothing)")
	case pos == 0 && len(toRun) > n:
		return res, fmt.Errorf("engine: the prompt has %d tokens, more than the context length %d", len(toRun), n)
	case pos+len(toRun) > n:
		return res, fmt.Errorf("engine: the prompt has %d tokens; after the sequence's %d that is more than the context length %d", len(toRun), pos, n)
	}
	sampler, err := NewSampler(opts.Sampler)
	if err != nil {
		return res, err
	}
	sampler.Ban(opts.Ban)
	if opts.Constraint != nil {
		sampler.Constrain(opts.Constraint)
	}
	for _, id := range opts.History {
		sampler.Accept(id)
	}
	inner := unwrap(r)
	greedy, argmax := inner.(GreedyFeeder)
	argmax = argmax && opts.Sampler.Greedy() && !opts.LogProbs && len(opts.Ban) == 0 && opts.Constraint == nil
	tracer, _ := inner.(RoutingTracer)
	// feed runs tokens; with sample it also chooses the next token (and
	// with opts.LogProbs sets nextLP to its log-probabilities).
	var nextLP Token
	feed := func(tokens []int32, sample bool) (next int32, routes [][]mod.Route, err error) {
		if err := ctx.Err(); err != nil {
			return 0, nil, err
		}
		if opts.BeforeFeed != nil {
			if err := opts.BeforeFeed(); err != nil {
				return 0, nil, err
			}
		}
		if argmax {
			next, err = greedy.FeedArgmax(tokens) // the same token, and no logits to read back
		} else {
			var logits []float32
			if logits, err = r.Feed(tokens); err == nil && !mod.Finite(logits) {
				err = mod.NonFinite(pos + len(tokens) - 1)
			} else if err == nil && sample {
				next = sampler.Sample(logits)
				err = sampler.Err()
				if opts.LogProbs {
					nextLP.LogProb, nextLP.Top = LogProbs(logits, next, opts.TopLogProbs)
				}
			}
		}
		if opts.AfterFeed != nil {
			err = opts.AfterFeed(tokens, err)
		}
		if err != nil {
			return 0, nil, err
		}
		pos += len(tokens)
		if opts.Routes && tracer != nil {
			routes = tracer.Routes()
		}
		return next, routes, nil
	}
	deliver := func(id int32, pos int, prompt bool, routes []mod.Route) error {
		if opts.OnToken == nil {
			return nil
		}
		return opts.OnToken(Token{ID: id, Pos: pos, Prompt: prompt, Routes: routes})
	}
	var idLP Token // id's log-probabilities (nextLP when id was drawn)
	deliverNew := func(id int32, pos int, routes []mod.Route) error {
		if opts.OnToken == nil {
			return nil
		}
		return opts.OnToken(Token{ID: id, Pos: pos, Routes: routes, LogProb: idLP.LogProb, Top: idLP.Top})
	}
	stopped := func(err error) (Result, error) { // ErrStop from OnToken is a clean stop
		if errors.Is(err, ErrStop) {
			res.Stop = StopCallback
			return res, nil
		}
		return res, err
	}

	start := time.Now()
	chunk := opts.Chunk
	if chunk <= 0 {
		chunk = len(toRun)
	}
	var id int32
	for i := 0; i < len(toRun); i += chunk {
		part := toRun[i:min(i+chunk, len(toRun))]
		for _, tok := range part {
			sampler.Accept(tok) // the repetition penalty sees the prompt
		}
		next, routes, err := feed(part, i+chunk >= len(toRun))
		if err != nil {
			return res, err
		}
		for j, tok := range part {
			if i+j < len(opts.Pending) {
				continue // delivered by the call that drew it
			}
			if err := deliver(tok, pos-len(part)+j, true, routeAt(routes, j)); err != nil {
				return stopped(err)
			}
		}
		id, idLP = next, nextLP
	}
	res.Prefill = time.Since(start)
	start = time.Now()
	defer func() { res.Decode = time.Since(start) }()
	for {
		if (opts.EOS >= 0 && id == opts.EOS) || slices.Contains(opts.EndOfTurn, id) {
			res.Stop = StopEOS
			return res, nil
		}
		res.Tokens = append(res.Tokens, id)
		full := pos >= r.ContextLen()
		if full || (opts.MaxTokens > 0 && len(res.Tokens) >= opts.MaxTokens) {
			res.Stop = StopMaxTokens
			if full {
				res.Stop = StopContextFull
			}
			res.Pending = []int32{id}
			return stopped(deliverNew(id, pos, nil))
		}
		if opts.OnRouted != nil { // delivered before it runs
			res.Pending = []int32{id} // until it has run
			if err := deliverNew(id, pos, nil); err != nil {
				return stopped(err)
			}
		}
		next, routes, err := feed([]int32{id}, true)
		if err != nil {
			if opts.OnRouted == nil {
				res.Tokens = res.Tokens[:len(res.Tokens)-1] // not delivered
			}
			return res, err
		}
		res.DecodeSteps++
		if opts.OnRouted != nil {
			res.Pending = nil
			opts.OnRouted(pos-1, routeAt(routes, 0))
		} else if err := deliverNew(id, pos-1, routeAt(routes, 0)); err != nil {
			return stopped(err)
		}
		id, idLP = next, nextLP
	}
}

// routeAt is token i's routes of a Feed's, a copy (nil past them).
func routeAt(routes [][]mod.Route, i int) []mod.Route {
	if i >= len(routes) {
		return nil
	}
	return slices.Clone(routes[i])
}

// unwrap is the runner inside a Backend (whose embedded Runner interface
// hides its runner's other methods): bench runs a Backend, and must take
// the argmax on the device as the API does, not Feed and a sampler over
// every logit.
func unwrap(r Runner) Runner {
	if b, ok := r.(*Backend); ok {
		return b.Runner
	}
	return r
}
