package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/mod"
)

// ParallelResult is one round of `modrun bench --parallel`: P sequences
// started together on a backend's scheduler (engine/sched over the
// backend's Stepper), each with its own PromptTokens prompt and
// DecodeTokens tokens (greedy unless Options.Sampler).
type ParallelResult struct {
	Parallel int `json:"parallel"`
	// AggregateDecodeRate is every sequence's decoded tokens (after its
	// first) over the time from the first sequence's first token to the
	// last one's end; PerSequenceDecodeRate is the mean of each sequence's
	// own rate.
	AggregateDecodeRate   float64 `json:"aggregate_decode_tokens_per_s"`
	PerSequenceDecodeRate float64 `json:"decode_tokens_per_s_per_sequence"`
	// TimeToFirstToken is the mean time from the start to a sequence's
	// first token, in milliseconds.
	TimeToFirstToken float64 `json:"time_to_first_token_ms"`
	Steps            int     `json:"steps"`
	// ChainedSteps are the steps of Steps that ran in chains, several a
	// submission (MODRUN_CHAIN: the Vulkan backend's batched steps,
	// sched.ChainRunner; at P 1 the runner's own chain runs inside a
	// step, and counts none).
	ChainedSteps int `json:"chained_steps"`
}

// Parallel times P sequences at once through the generation loop a Model
// with Options.Parallel P runs (engine.Loop: at P 1 the runner's own
// steps, as bench times them, above the backend's batched steps), one
// round at a time (Time), so that a caller may interleave it with other
// rows. Close it when done.
type Parallel struct {
	bk       *engine.Backend
	loop     *engine.Loop
	prompts  [][]int32
	o        Options
	rounds   []ParallelResult
	parallel int
	solo     [][]int32 // each prompt's greedy tokens alone on the backend's runner
}

// NewParallel prepares P sequences of m with routing on the backend
// bo names (BackendCPU or BackendVulkan; its context length and batch are
// set here): sequence i's prompt is prompt's
// PromptTokens tokens after BOS rotated and shifted by i, so that no two
// share a prefix or their tokens. batchTokens is --batch-tokens (0: 512).
func NewParallel(m *mod.Model, routing mod.Routing, prompt []int32, o Options, parallel, batchTokens int, bo engine.BackendOptions) (*Parallel, error) {
	if parallel < 1 {
		return nil, fmt.Errorf("--parallel %d: must be 1 or more", parallel)
	}
	if len(prompt) < o.PromptTokens || o.PromptTokens < 2 || o.DecodeTokens < 2 {
		return nil, fmt.Errorf("bench: --parallel needs a prompt of 2 tokens or more (got %d of %d) and 2 decoded or more (got %d)", len(prompt), o.PromptTokens, o.DecodeTokens)
	}
	if bo.Name != engine.BackendCPU && bo.Name != engine.BackendVulkan {
		return nil, fmt.Errorf("bench: --parallel runs on %s or %s, not %s", engine.BackendCPU, engine.BackendVulkan, bo.Name)
	}
	ctx := o.PromptTokens + o.DecodeTokens
	batchTokens = cmp.Or(batchTokens, engine.DefaultUBatch)
	bo.ContextLen, bo.UBatch = ctx, batchTokens // a solo prefill caps its chunks at ctx, a step of P sequences at P ctx
	bk, _, err := engine.OpenBackend(m, routing, bo)
	if err != nil {
		return nil, err
	}
	b := &Parallel{bk: bk, o: o, parallel: parallel}
	for i := range parallel {
		p := append([]int32(nil), prompt[:o.PromptTokens]...)
		for j := 1; j < len(p); j++ { // the prompt after BOS, rotated and shifted by i
			p[j] = int32((int(prompt[1+(j-1+3*i)%(o.PromptTokens-1)]) + i) % m.Config.NVocab)
		}
		b.prompts = append(b.prompts, p)
		// The validation: each sequence's greedy tokens alone, which the
		// batched ones must equal (the equality the tests check, here on
		// the benched model). A sampled bench validates greedy too, as a
		// single stream's does: a draw of the batched step's logits may
		// differ from a draw of the solo run's where their rounding
		// (within the step's tolerance) moves an interval's edge past the
		// uniform number (on a GPU, where the two take other kernels).
		r, err := generate(bk, m.Config.NVocab, p, o.DecodeTokens, engine.DefaultSampler())
		if err != nil {
			bk.Close()
			return nil, err
		}
		b.solo = append(b.solo, r.Tokens)
	}
	b.loop, err = engine.NewLoop(bk, engine.LoopOptions{Parallel: parallel, UBatch: batchTokens, ContextLen: ctx, NVocab: m.Config.NVocab})
	if err != nil {
		bk.Close()
		return nil, err
	}
	// One round untimed, greedy: it checks the tokens, and the first use
	// of each step shape (Vulkan records it and compiles its kernels)
	// falls here; a sampled bench's own first round too, untimed.
	for _, validate := range []bool{true, false} {
		if !validate && o.Sampler == nil {
			break
		}
		if err := b.round(validate); err != nil {
			b.Close()
			return nil, err
		}
	}
	b.rounds = nil
	return b, nil
}

// Time runs one round: every sequence joins at once (a Generate call
// each, as the server's requests do), and the loop steps until all are
// done. Nothing of the last round is reused: the loop forgets it first.
// A greedy round's tokens are checked against each sequence's alone.
func (b *Parallel) Time() error { return b.round(b.o.Sampler == nil) }

// round runs a round, greedy and checked against each sequence's tokens
// alone when validate, else with the bench's sampler.
func (b *Parallel) round(validate bool) error {
	b.loop.Forget()
	before := b.loop.Stats()
	results := make([]engine.Result, b.parallel)
	errs := make([]error, b.parallel)
	var wg, ready sync.WaitGroup
	start := make(chan struct{}) // the calls begin together, as the old rounds' sequences joined a step
	for i, p := range b.prompts {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			ready.Done()
			<-start
			s := b.o.sampler(i)
			if validate {
				s = engine.DefaultSampler()
			}
			results[i], errs[i] = b.loop.Generate(context.Background(), p, engine.GenerateOptions{MaxTokens: b.o.DecodeTokens, EOS: -1, Sampler: s})
		}()
	}
	ready.Wait()
	close(start)
	wg.Wait()
	after := b.loop.Stats()
	res := ParallelResult{Parallel: b.parallel, Steps: after.Steps - before.Steps, ChainedSteps: after.ChainedSteps - before.ChainedSteps}
	// Each sequence's first token came at its Prefill, its last at
	// Prefill+Decode after its Generate began (the loop's own clock, at
	// the draws); the calls began together, within a goroutine's start.
	first := func(r engine.Result) time.Duration { return r.Prefill }
	end := func(r engine.Result) time.Duration { return r.Prefill + r.Decode }
	firstAll, endAll := first(results[0]), end(results[0])
	decoded := 0
	for i, r := range results {
		if errs[i] != nil {
			return errs[i]
		}
		if validate && !slices.Equal(r.Tokens, b.solo[i]) {
			return fmt.Errorf("bench: --parallel %d: sequence %d's tokens differ from its run alone (%v, alone %v): not timed", b.parallel, i, r.Tokens, b.solo[i])
		}
		n := len(r.Tokens) - 1
		decoded += n
		firstAll, endAll = min(firstAll, first(r)), max(endAll, end(r))
		res.PerSequenceDecodeRate += decodeRate(n, r.Decode) / float64(b.parallel)
		res.TimeToFirstToken += float64(first(r).Microseconds()) / 1e3 / float64(b.parallel)
	}
	if !validate && b.o.DecodeTokens > 0 && decoded != b.parallel*(b.o.DecodeTokens-1) {
		return fmt.Errorf("bench: --parallel %d: %d tokens decoded after the first, want %d", b.parallel, decoded, b.parallel*(b.o.DecodeTokens-1))
	}
	res.AggregateDecodeRate = decodeRate(decoded, endAll-firstAll)
	b.rounds = append(b.rounds, res)
	return nil
}

// Result is the round with the median aggregate decode rate.
func (b *Parallel) Result() ParallelResult {
	if len(b.rounds) == 0 {
		return ParallelResult{Parallel: b.parallel}
	}
	rates := make([]float64, len(b.rounds))
	for i, r := range b.rounds {
		rates[i] = r.AggregateDecodeRate
	}
	m := median(rates)
	for _, r := range b.rounds {
		if r.AggregateDecodeRate == m {
			return r
		}
	}
	return b.rounds[0]
}

// Rounds are the timed rounds, in the order run.
func (b *Parallel) Rounds() []ParallelResult { return b.rounds }

// Backend is the backend the sequences run on.
func (b *Parallel) Backend() *engine.Backend { return b.bk }

// Close frees the bench's loop and backend.
func (b *Parallel) Close() {
	b.loop.Close()
	b.bk.Close()
}

// decodeRate is n tokens decoded in d, per second, as engine's Timing
// counts a decode (0 when there is none).
func decodeRate(n int, d time.Duration) float64 {
	return engine.Timing{DecodeSteps: n, Decode: d}.DecodeRate()
}
