package modrun

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/engine/grammar"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/tokenizer"
)

// Session is one sequence: a prompt, the tokens generated after it, and
// whatever later Generate calls add, until Reset. Its methods may be
// called from any goroutine, but one at a time: a call while another of
// the same session runs (a Generate, or any call from that Generate's
// token callback) returns ErrBusy.
type Session struct {
	m      *Model
	busy   atomic.Bool
	closed atomic.Bool
	// The rest is touched only by the call that set busy.
	fed     []int32 // every token the runner has run for this session, in order
	pending []int32 // the last token drawn and delivered but not run yet (0 or 1)
	dec     *tokenizer.StreamDecoder
	// Per routed layer, the tokens of the sequence that went through,
	// counted up to position counted.
	layers  []LayerStat
	counted int
}

// ErrBusy is returned by a Session's methods while another call of the
// same session runs: a Generate, or from inside Generate's callback.
var ErrBusy = errors.New("modrun: the session is generating (one call at a time)")

// enter marks the session busy for one call of its methods, or says why it
// cannot be: ErrClosed (the session or its model is closed) or ErrBusy.
func (s *Session) enter() (leave func(), err error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if !s.busy.CompareAndSwap(false, true) {
		return nil, ErrBusy
	}
	if s.closed.Load() || s.m.isClosed() {
		s.busy.Store(false)
		return nil, ErrClosed
	}
	return func() { s.busy.Store(false) }, nil
}

// NewSession starts an empty sequence.
func (m *Model) NewSession() *Session {
	return &Session{m: m, dec: m.tok.NewStreamDecoder()}
}

// Token is one token of the sequence, as Generate delivers it.
type Token struct {
	ID   int32
	Text string // its text; a character split over byte tokens comes whole with its last one
	Pos  int    // its position in the session's sequence
	// Prompt is true for the tokens of the prompt (BOS included), false for
	// generated ones.
	Prompt bool
	// LogProb is a new token's log-probability under the model (the raw
	// logits' log-softmax, before sampling) and TopLogProbs the most likely
	// tokens where it was drawn, with GenerateOptions.LogProbs and
	// TopLogProbs; zero and nil otherwise, and for prompt tokens.
	LogProb     float32
	TopLogProbs []TokenLogProb
	// Routes says, for each routed layer in order, what that layer did with
	// the token. It is nil for a dense model, with Options.NoRoutes, for a
	// new token with GenerateOptions.OnRouted (which receives it), and
	// for the last token of a generation: a drawn token runs through the model only when the next
	// one is computed (the following Generate call of the session runs it).
	Routes []Route
}

// Route is what one routed layer did with one token (DESIGN.md §3): its
// Layer; the Score that decided, the router's r with RoutingRouter, the
// predictor's p with RoutingPredictor (colour maps use it); and whether
// the token went through the block (Selected, Score > 0): attention and
// MLP ran on it and it holds an entry in the layer's KV cache. Otherwise it
// skipped the block on the residual stream.
type Route = mod.Route

// GenerateOptions control one Generate call. The zero value is greedy
// decoding until EOS or the context is full.
type GenerateOptions struct {
	MaxTokens int // new tokens at most; 0 = until EOS or the context is full

	// Stop ends the generation at the first of these strings in the new
	// tokens' text (Result.Stop is StopString): fn never sees it nor what
	// follows; the token it starts in comes with its Text cut before it.
	// A token whose text may begin one reaches fn once the next ones show
	// whether it does (stop.go).
	Stop []string

	// Sampling, in llama.cpp's order: repetition penalty, top-k, top-p,
	// min-p, temperature. Zero values mean off.
	Temperature   float32 // 0 = greedy (argmax)
	TopK          int     // keep the k most likely tokens; 0 = all
	TopP          float32 // keep the smallest set with probability >= p; 0 (or 1) = all
	MinP          float32 // drop tokens less likely than MinP times the most likely
	RepeatPenalty float32 // > 1 penalises the last RepeatLastN tokens; 0 (or 1) = off
	RepeatLastN   int     // tokens the penalties look at; 0 = 64, negative = none
	// FrequencyPenalty (per occurrence) and PresencePenalty (once) are
	// subtracted from the logits of the last RepeatLastN tokens, as
	// OpenAI's and llama.cpp's are; 0 = off.
	FrequencyPenalty float32
	PresencePenalty  float32
	LogitBias        map[int32]float32 // added to those tokens' logits first (OpenAI's logit_bias)
	Seed             uint64            // the same seed, options and model give the same tokens
	// Sampler, when set, is used as it is instead of the fields above: every
	// option explicit, none read as a default (the command line passes its
	// flags' this way, checked once by SamplerOptions.Check).
	Sampler *SamplerOptions

	// LogProbs fills each new Token's LogProb, and TopLogProbs (at most
	// MaxTopLogProbs) its TopLogProbs. Greedy decoding then reads the
	// logits back from the device.
	LogProbs    bool
	TopLogProbs int

	// IgnoreEOS never draws the end-of-generation tokens (EOS, end of
	// turn): their logits count as -Inf, as llama.cpp's ignore_eos has it,
	// so generation runs to MaxTokens or the context's end. Log-probabilities
	// stay the raw logits'.
	IgnoreEOS bool

	// Grammar, when set, constrains the new tokens to its language
	// (ParseGrammar, JSONSchemaGrammar): each token keeps the text a prefix
	// of a sentence, and the generation ends only where a sentence does.
	// GrammarGBNF is the same given as GBNF text, compiled by the call.
	// The grammar starts at this call's first new token; with MaxTokens or
	// the context's end a sentence may be left unfinished (Result.Stop
	// says so).
	Grammar     *Grammar
	GrammarGBNF string

	// OnRouted, when set, changes when Generate's fn sees a new token: as
	// soon as it is drawn, before it runs through the model, with its
	// Routes nil; OnRouted then receives the token's routing once it has
	// run (on Generate's goroutine, after fn had the token; not on a model
	// opened with NoRoutes). A server's first token then waits for the
	// prompt's step alone, not for the next step as well. The last new
	// token never runs, as without it. The prompt's tokens come as before.
	OnRouted func(pos int, routes []Route)

	// PromptTokens, when not nil, is the prompt as token ids, run as they
	// are (no BOS added); Generate's prompt text must then be "".
	PromptTokens []int32

	// ParseSpecial reads control tokens written in the prompt, such as
	// "<|eot_id|>", as those tokens (a chat template's prompt needs it);
	// otherwise the prompt is plain text.
	ParseSpecial bool
	// plain are the prompt's stretches that stay plain text even with
	// ParseSpecial: a chat's message content (Chat.Reply sets them).
	plain []tokenizer.Span
}

// SamplerOptions are the sampler's options with nothing left to a default
// (GenerateOptions.Sampler): engine's, which the command line's flags fill.
type SamplerOptions = engine.SamplerOptions

// StopReason says why a generation ended.
type StopReason = engine.StopReason

// The reasons a generation ends without an error.
const (
	StopEOS         = engine.StopEOS         // the model produced end-of-sequence or end-of-turn (not delivered)
	StopMaxTokens   = engine.StopMaxTokens   // MaxTokens were generated
	StopContextFull = engine.StopContextFull // the sequence reached the context length
	StopCallback    = engine.StopCallback    // the callback returned ErrStop
	// StopString: one of GenerateOptions.Stop ended the generation (the
	// one type of end reason has the root's own value too).
	StopString StopReason = "stop-string"
)

// ErrNonFinite is wrapped by Generate's error when the model's logits hold
// a NaN or an infinity ("non-finite logits at token N"): a broken weight
// (modrun inspect --check names them) or an overflow. No backend hides one
// behind an ordinary-looking token.
var ErrNonFinite = mod.ErrNonFinite

// ErrStop, returned by Generate's callback, ends the generation without an
// error.
var ErrStop = engine.ErrStop

// Result is what one Generate call did and how fast: its Timing
// (PromptTokens, Prefill, Decode, DecodeSteps; PrefillRate and DecodeRate)
// and the rest.
type Result struct {
	Timing
	Stop   StopReason
	Tokens int // new tokens delivered (with Stop, also those drawn past the stop string, which fn never sees)
	// CachedTokens is how many of the prompt's tokens (PromptTokens) the
	// prefix cache served instead of running them (Options.PrefixCache or
	// Parallel above 1); they are delivered to fn all the same.
	CachedTokens int
	// Layers counts, per routed layer, the tokens of the session's
	// sequence that went through it (Selected) of those it saw (Seen).
	Layers []LayerStat
	// Tail is text held back because the generation ended inside a UTF-8
	// character (rare): the Text of the tokens, then Tail, is the whole.
	Tail string
}

// Timing is how long the two phases of a generation took: PromptTokens
// (the prompt's tokens run, BOS included) in Prefill (running the prompt
// and choosing the first token), DecodeSteps (forward passes, one per new
// token after the first) in Decode (producing the rest); PrefillRate and
// DecodeRate are tokens per second.
type Timing = engine.Timing

// LayerStat is how many tokens one routed layer processed.
type LayerStat struct {
	Layer          int
	Selected, Seen int
}

// Generate runs prompt after the session's sequence (a fresh session
// starts with BOS when the tokenizer asks for one) and generates until
// EOS, opts.MaxTokens, the context length, one of opts.Stop, ErrStop from
// fn, or ctx is done. fn receives every token in order: first the prompt's, then each
// new one once it has run through the model (so its Routes are known),
// the last new one with its Routes nil (with opts.OnRouted: each new one
// once drawn). fn runs on Generate's goroutine;
// an error from it other than ErrStop ends Generate with that error.
//
// Cancelling ctx stops Generate within one token (in the prompt, within one
// batch: Options.UBatch on Vulkan and the CPU, 32 tokens on the reference);
// it returns ctx's error, and the session holds the tokens run so far
// (Tokens): a later Generate continues after them, with more prompt or none.
// The loop is engine's (engine.Loop), the one bench times and the server
// runs.
func (s *Session) Generate(ctx context.Context, prompt string, opts GenerateOptions, fn func(Token) error) (Result, error) {
	if ctx == nil {
		return Result{}, errors.New("modrun: Generate: nil context (context.Background() is the one that never ends)")
	}
	leave, err := s.enter()
	if err != nil {
		return Result{}, err
	}
	defer leave() // after the stop matcher's last tokens went to fn
	opts, fn, stops, err := withStops(opts, fn)
	if err != nil {
		return Result{}, err
	}
	return stops.finish(s.generate(ctx, prompt, opts, fn))
}

// generate checks the options and the prompt, then runs them.
func (s *Session) generate(ctx context.Context, prompt string, opts GenerateOptions, fn func(Token) error) (Result, error) {
	so, g, err := opts.check()
	if err != nil {
		return Result{}, err
	}
	constraint, err := s.m.constraint(g)
	if err != nil {
		return Result{}, err
	}
	ids, err := s.promptTokens(prompt, opts)
	if err != nil {
		return Result{}, err
	}
	if len(ids) == 0 && len(s.pending) == 0 {
		if len(s.fed) == 0 {
			return Result{}, fmt.Errorf("modrun: the prompt is empty and there is nothing to continue from; give some text")
		}
		// The last call stopped before it drew a token (cancelled in its
		// prompt): run the last token again to draw one (the runner holds
		// it, but not its logits: the loop runs the sequence up to it again).
		s.pending = []int32{s.fed[len(s.fed)-1]}
		s.fed = s.fed[:len(s.fed)-1]
	}
	if have := len(s.fed) + len(s.pending); have+len(ids) > s.m.ctxLen {
		return Result{}, &PromptLengthError{Tokens: len(ids), Held: have, ContextLen: s.m.ctxLen}
	}
	return s.run(ctx, ids, so, constraint, opts, fn)
}

// run runs the session's sequence and ids as one sequence of the
// model's generation loop (engine.Loop): the tokens the session holds
// first (not delivered again; the runner or the prefix cache may hold
// them), then ids and the new tokens, each delivered to fn on this
// goroutine with its text.
func (s *Session) run(ctx context.Context, ids []int32, so engine.SamplerOptions, constraint *grammar.Matcher, opts GenerateOptions, fn func(Token) error) (Result, error) {
	var fnErr error // fn's own error, returned as it is
	eo := engine.GenerateOptions{
		MaxTokens: opts.MaxTokens, EOS: -1, EndOfTurn: s.m.tok.EndOfGeneration(), Sampler: so, Ban: s.banned(opts),
		LogProbs: opts.LogProbs, TopLogProbs: opts.TopLogProbs, Held: len(s.fed) + len(s.pending), Routes: fn != nil && !s.m.noRoutes,
		OnRun: s.count,
		OnToken: func(t engine.Token) error {
			text, err := s.dec.Push(t.ID)
			if err != nil {
				return fmt.Errorf("modrun: %w", err)
			}
			if fn == nil {
				return nil
			}
			fnErr = fn(Token{ID: t.ID, Text: string(text), Pos: t.Pos, Prompt: t.Prompt, Routes: t.Routes, LogProb: t.LogProb, TopLogProbs: t.Top})
			return fnErr
		},
	}
	if constraint != nil { // this sequence's own grammar state, advanced by its draws
		eo.Constraint = constraint
	}
	if opts.OnRouted != nil && fn != nil {
		eo.OnRouted = opts.OnRouted
	}
	er, err := s.m.loop.Generate(ctx, slices.Concat(s.fed, s.pending, ids), eo)
	s.fed, s.pending = er.Fed, er.Pending
	res := Result{Timing: er.Timing, Stop: er.Stop, Tokens: len(er.Tokens), CachedTokens: er.CachedTokens, Tail: string(s.dec.Flush())}
	res.Layers = slices.Clone(s.layers) // counted from the routing of each token run
	if er.RoutingStats != nil {         // the runner's own counts over the sequence (it holds it alone)
		res.Layers = nil
		for _, st := range er.RoutingStats {
			res.Layers = append(res.Layers, LayerStat(st))
		}
	}
	switch {
	case err == nil, err == fnErr, errors.Is(err, ctx.Err()):
		return res, err
	case errors.Is(err, engine.ErrClosed):
		return res, ErrClosed
	}
	return res, fmt.Errorf("modrun: %w", err)
}

// promptTokens is the prompt as token ids: opts.PromptTokens as given, or
// the text encoded (BOS first in a fresh session when the vocabulary asks).
func (s *Session) promptTokens(prompt string, opts GenerateOptions) ([]int32, error) {
	if opts.PromptTokens == nil {
		ids, err := s.m.tok.EncodeWith(prompt, tokenizer.EncodeOptions{AddSpecial: len(s.fed) == 0 && len(s.pending) == 0, ParseSpecial: opts.ParseSpecial, Plain: opts.plain})
		if err != nil {
			return nil, fmt.Errorf("modrun: prompt: %w", err)
		}
		return ids, nil
	}
	if prompt != "" {
		return nil, errors.New("modrun: a prompt of text and of PromptTokens both: give one")
	}
	for i, id := range opts.PromptTokens {
		if id < 0 || int(id) >= s.m.info.NVocab {
			return nil, fmt.Errorf("modrun: PromptTokens: token %d at index %d is outside the vocabulary [0, %d)", id, i, s.m.info.NVocab)
		}
	}
	return slices.Clone(opts.PromptTokens), nil
}

// banned is what the sampler never draws: with IgnoreEOS, the
// end-of-generation tokens.
func (s *Session) banned(opts GenerateOptions) []int32 {
	if !opts.IgnoreEOS {
		return nil
	}
	return s.m.tok.EndOfGeneration()
}

// Tokens is the session's sequence: every token run or delivered since the
// last Reset, the prompt's included.
func (s *Session) Tokens() ([]int32, error) {
	leave, err := s.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	return append(append([]int32(nil), s.fed...), s.pending...), nil
}

// Reset empties the session's sequence; the next Generate starts afresh.
// It never waits for another session's Generate.
func (s *Session) Reset() error {
	leave, err := s.enter()
	if err != nil {
		return err
	}
	defer leave()
	s.fed, s.pending = nil, nil
	s.dec = s.m.tok.NewStreamDecoder()
	s.layers, s.counted = nil, 0
	return nil
}

// Close ends the session; its methods return ErrClosed after. It returns
// ErrBusy while Generate runs (cancel its context first), and never waits
// for another session's Generate.
func (s *Session) Close() error {
	leave, err := s.enter()
	if err != nil {
		return err
	}
	defer leave()
	s.closed.Store(true)
	s.fed, s.pending = nil, nil
	return nil
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
