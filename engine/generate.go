package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/mod"
)

// What a generation is asked and what it gives: the options of
// Loop.Generate, the tokens it delivers, its result and timing.

// StopReason says why generation ended: the scheduler's, one type for
// every layer (modrun.StopReason too).
type StopReason = sched.StopReason

const (
	StopEOS         = sched.StopEOS         // the model produced end-of-sequence (or end-of-turn)
	StopMaxTokens   = sched.StopMaxTokens   // the requested number of tokens was produced
	StopContextFull = sched.StopContextFull // the sequence reached the context length
	StopCallback    = sched.StopCallback    // OnToken returned ErrStop
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
	// Held is how many of the sequence's first tokens earlier calls
	// delivered (a session's history, and a token an earlier call drew and
	// delivered without running it, its Result.Pending): OnToken does not
	// see them again, the repetition penalty looks back over them as over
	// the prompt, and a step runner that holds them (or the prefix cache)
	// does not run them again.
	Held int
	// OnToken receives every token in order, each once it has run through
	// the model: the prompt's (Token.Prompt), then each new one. The last
	// new one comes before it runs, when generation stops at MaxTokens or
	// the context length (Result.Pending). ErrStop ends generation with
	// StopCallback; another error ends it with that error.
	OnToken func(Token) error
	// Routes fills Token.Routes from a RoutingTracer runner.
	Routes bool
	// OnRun, when set, sees each token of the sequence that ran (or that
	// the prefix cache served), with its routing (nil untraced), on
	// Generate's goroutine before the token is delivered: the API counts
	// each layer's tokens with it.
	OnRun func(pos int, routes []mod.Route)
	// OnRouted, when set, makes OnToken receive each new token as soon as
	// it is drawn, before it runs (its Routes nil: the first new token then
	// waits for the prompt's last Feed alone, not for its own as well),
	// and OnRouted its routing once it has run (with Routes; nil routes
	// without). A token delivered and not run, when a step fails or the
	// callback stops, is Result.Pending.
	OnRouted func(pos int, routes []mod.Route)
	// LogProbs fills each new token's Token.LogProb, and TopLogProbs its
	// Token.Top (the most likely tokens at its place). The logits are then
	// read back even for greedy decoding.
	LogProbs    bool
	TopLogProbs int
}

// Token is one token of the sequence as OnToken receives it.
type Token struct {
	ID     int32
	Pos    int  // its position in the sequence
	Prompt bool // a token of the prompt, not a new one
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
	// Fed and Pending are the sequence as the call leaves it, for a
	// continuation (whose sequence begins with them, all Held): Fed the
	// tokens that ran and were delivered, Pending a token delivered but
	// not run (the last new one at StopMaxTokens and StopContextFull, and
	// after a failed step or a stop from the callback with OnRouted).
	Fed, Pending []int32
	// CachedTokens is how many of the prompt's tokens the prefix cache
	// served instead of running them.
	CachedTokens int
	// RoutingStats are the step runner's own per-layer counts over the
	// sequence when it ended (a RunnerStepper's runner keeps them even
	// without tracing); nil otherwise.
	RoutingStats []LayerStat
}

// Generate runs prompt as a fresh sequence on r (Reset first) through a
// Loop of its own that steps r (RunnerStepper), for tools and tests that
// hold a bare Runner; r's logits have nVocab entries.
func Generate(ctx context.Context, r Runner, nVocab int, prompt []int32, opts GenerateOptions) (Result, error) {
	b, ok := r.(*Backend)
	if !ok {
		b = &Backend{Runner: r, Name: "runner"}
	}
	l, err := NewLoop(b, LoopOptions{ContextLen: r.ContextLen(), NVocab: nVocab})
	if err != nil {
		return Result{}, err
	}
	defer l.Close()
	return l.Generate(ctx, prompt, opts)
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
