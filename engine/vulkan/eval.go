package vulkan

import (
	"fmt"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
)

// Eval mode (DESIGN.md §3, the training semantics): a sequence of S tokens
// from position 0, each routed layer taking the top k = mod.TopKCount(S)
// tokens by router score, and the logits of every token (or, for scoring,
// every token's loss of the next). It is the batched prefill's graph
// (prefill.go) with two settings of a Runner in eval mode (openRunner with
// top-k routing): the routed layers' selector is top-k (topk, gather, the
// block on the k rows, mod_residual) instead of causal, and attention runs
// among the window's rows with no KV cache. The chunk is the whole window
// (UBatch is the context length); a window's recording is made at its
// first length and replayed with new token ids.

// Evaluator runs eval-mode forward passes of one model on a Vulkan device.
// Like the device, it is not safe for concurrent use. Close it before the
// device.
type Evaluator struct {
	r *Runner // in eval mode
}

// NewEvaluator uploads m's weights to dev for eval mode. opts.ContextLen caps
// S (0: the model's context length); with opts.Profile every dispatch is
// timed (Profile); opts.Trace keeps each window's routing (Routes). m may
// be closed afterwards.
func NewEvaluator(dev *vk.Device, m *mod.Model, opts Options) (*Evaluator, error) {
	r, err := openRunner(dev, m, mod.RoutingTopK, opts)
	if err != nil {
		return nil, err
	}
	return &Evaluator{r: r}, nil
}

// Profile is the GPU time per kernel summed over every sequence run since
// NewEvaluator, largest first (Options.Profile; nil without it).
func (e *Evaluator) Profile() []ProfileEntry { return e.r.Profile() }

// ContextLen is the longest sequence Eval takes.
func (e *Evaluator) ContextLen() int { return e.r.ctx }

// NVocab is the number of logits per token.
func (e *Evaluator) NVocab() int { return e.r.c.NVocab }

// Score is Eval: with ContextLen and NVocab, the evaluator is an
// engine.Scorer in eval mode.
func (e *Evaluator) Score(tokens []int32) ([]float32, error) { return e.Eval(tokens) }

// Eval runs tokens as one sequence from position 0 and returns the logits
// of every token, [S][nVocab].
func (e *Evaluator) Eval(tokens []int32) ([]float32, error) {
	out, err := e.r.Score(tokens)
	if err != nil {
		return nil, fmt.Errorf("vulkan: eval of %d tokens: %w", len(tokens), err)
	}
	return out, nil
}

// Losses runs tokens as one sequence from position 0 and returns, for each
// token after the first, its negative log-likelihood given those before it
// ([S-1] nats: -log softmax(logits of token i)[tokens[i+1]]), computed on
// the device: S floats come back instead of S·nVocab logits. With it the
// evaluator is an engine.LossScorer.
func (e *Evaluator) Losses(tokens []int32) ([]float32, error) {
	out, err := e.r.Losses(tokens)
	if err != nil {
		return nil, fmt.Errorf("vulkan: eval of %d tokens: %w", len(tokens), err)
	}
	return out, nil
}

// Routes is, with Options.Trace, what each routed layer did with each
// token of the last sequence: its router score and whether top-k took it.
func (e *Evaluator) Routes() [][]mod.Route { return e.r.Routes() }

// Close waits for the device and frees every GPU object the evaluator made.
func (e *Evaluator) Close() { e.r.Close() }
