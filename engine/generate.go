package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/modrun/modrun/mod"
)

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
	// OnToken is called with each new token as soon as it is drawn.
	OnToken func(id int32) error
}

// Result is what Generate produced and how fast.
type Result struct {
	Tokens       []int32 // the new tokens (not the prompt), EOS excluded
	Stop         StopReason
	PromptTokens int
	Prefill      time.Duration // time to feed the prompt and choose the first token
	Decode       time.Duration // time to produce the rest
	DecodeSteps  int           // forward passes in Decode: one per token after the first
}

// PrefillRate and DecodeRate are tokens per second.
func (r Result) PrefillRate() float64 { return rate(r.PromptTokens, r.Prefill) }
func (r Result) DecodeRate() float64  { return rate(r.DecodeSteps, r.Decode) }

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// Generate feeds the prompt to a fresh sequence and draws tokens until EOS,
// MaxTokens, or the context length. With a pure greedy sampler and a
// GreedyFeeder it lets the runner take the argmax.
func Generate(r Runner, prompt []int32, opts GenerateOptions) (res Result, err error) {
	res.PromptTokens = len(prompt)
	if len(prompt) == 0 {
		return res, fmt.Errorf("engine: empty prompt (add BOS to start from nothing)")
	}
	if len(prompt) > r.ContextLen() {
		return res, fmt.Errorf("engine: the prompt has %d tokens, more than the context length %d", len(prompt), r.ContextLen())
	}
	sampler, err := NewSampler(opts.Sampler)
	if err != nil {
		return res, err
	}
	for _, id := range prompt {
		sampler.Accept(id)
	}
	next := func(tokens []int32) (int32, error) { // feed, then draw the next token
		logits, err := r.Feed(tokens)
		if err != nil {
			return 0, err
		}
		if !mod.Finite(logits) {
			return 0, fmt.Errorf("engine: %w", mod.NonFinite(r.Pos()-1))
		}
		return sampler.Sample(logits), nil
	}
	if g, ok := greedyFeeder(r); ok && pureGreedy(opts.Sampler) {
		next = g.FeedArgmax // the same token, and no logits to read back
	}
	r.Reset()
	start := time.Now()
	id, err := next(prompt)
	if err != nil {
		return res, err
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
		if opts.OnToken != nil {
			if err := opts.OnToken(id); errors.Is(err, ErrStop) {
				res.Stop = StopCallback
				return res, nil
			} else if err != nil {
				return res, err
			}
		}
		if opts.MaxTokens > 0 && len(res.Tokens) >= opts.MaxTokens {
			res.Stop = StopMaxTokens
			return res, nil
		}
		if r.Pos() >= r.ContextLen() {
			res.Stop = StopContextFull
			return res, nil
		}
		if id, err = next([]int32{id}); err != nil {
			return res, err
		}
		res.DecodeSteps++
	}
}

// pureGreedy says whether o draws the argmax of the raw logits: temperature
// 0 and no repetition penalty (top-k, top-p and min-p keep the argmax).
// greedyFeeder is r as a GreedyFeeder, looking through a Backend (whose
// embedded Runner interface hides its runner's other methods): bench runs
// a Backend, and must time the loop the API runs, not Feed and a sampler
// over every logit.
func greedyFeeder(r Runner) (GreedyFeeder, bool) {
	if b, ok := r.(*Backend); ok {
		r = b.Runner
	}
	g, ok := r.(GreedyFeeder)
	return g, ok
}

func pureGreedy(o SamplerOptions) bool {
	return o.Temperature == 0 && o.RepeatPenalty == 1
}
