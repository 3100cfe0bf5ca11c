package engine

import (
	"fmt"
	"math"

	"github.com/modrun/modrun/mod"
)

// Scorer returns the logits of every token of a sequence, teacher-forced:
// in eval mode (top-k routing per sequence, the training semantics) or with
// causal routing.
type Scorer interface {
	Score(tokens []int32) ([]float32, error) // [n][nVocab]
	ContextLen() int
	NVocab() int
}

// LossScorer is a Scorer that also computes the loss on its device: the
// negative log-likelihood of each token after the first given those before
// it ([n-1] nats), so a window's n floats come back instead of its n·nVocab
// logits (the Vulkan scorers). Perplexity uses it when it is there.
type LossScorer interface {
	Losses(tokens []int32) ([]float32, error)
}

// lossScorer is sc as a LossScorer, looking through a ScorerBackend (whose
// embedded Scorer interface hides its scorer's other methods).
func lossScorer(sc Scorer) (LossScorer, bool) {
	if b, ok := sc.(*ScorerBackend); ok {
		sc = b.Scorer
	}
	ls, ok := sc.(LossScorer)
	return ls, ok
}

// CPUScorer scores with the CPU reference.
type CPUScorer struct {
	m     *mod.Model
	state *mod.State
}

// NewCPUScorer returns a scorer of m. Top-k routing is eval mode; router or
// predictor routing scores each window as generation would see it.
func NewCPUScorer(m *mod.Model, r mod.Routing) (*CPUScorer, error) {
	s, err := m.NewState(r)
	if err != nil {
		return nil, err
	}
	return &CPUScorer{m: m, state: s}, nil
}

func (c *CPUScorer) Score(tokens []int32) ([]float32, error) {
	c.state.Reset()
	return c.state.Forward(tokens, true)
}
func (c *CPUScorer) ContextLen() int { return c.m.Config.ContextLen }
func (c *CPUScorer) NVocab() int     { return c.m.Config.NVocab }

// PerplexityResult is the mean negative log-likelihood of the scored tokens.
type PerplexityResult struct {
	Tokens  int     // tokens scored
	Windows int     // sequences run
	NLL     float64 // mean NLL per token, in nats
}

// Perplexity is exp(NLL).
func (r PerplexityResult) Perplexity() float64 { return math.Exp(r.NLL) }

// Perplexity scores text (token ids without BOS) in windows of at most
// window tokens: each window is BOS followed by the next window-1 tokens of
// the text, and every one of those tokens is scored given what precedes it
// in its window. So each token of the text is scored exactly once, and each
// window is an independent sequence, as in training. A LossScorer computes
// the losses on its device; another scorer's logits are read back and its
// losses summed here in float64. progress, if not nil,
// is called after each window with the tokens scored so far.
func Perplexity(sc Scorer, text []int32, bos int32, window int, progress func(done, total int)) (PerplexityResult, error) {
	var res PerplexityResult
	if window < 2 || window > sc.ContextLen() {
		return res, fmt.Errorf("engine: window %d must be in [2, %d] (the context length)", window, sc.ContextLen())
	}
	if len(text) == 0 {
		return res, fmt.Errorf("engine: no tokens to score")
	}
	var total float64
	seq := make([]int32, 0, window)
	for lo := 0; lo < len(text); lo += window - 1 {
		chunk := text[lo:min(lo+window-1, len(text))]
		seq = append(append(seq[:0], bos), chunk...)
		if ls, ok := lossScorer(sc); ok {
			losses, err := ls.Losses(seq)
			if err != nil {
				return res, fmt.Errorf("engine: window at token %d: %w", lo, err)
			}
			for _, l := range losses { // position i's loss is of seq[i+1] = chunk[i]
				total += float64(l)
			}
		} else {
			logits, err := sc.Score(seq)
			if err != nil {
				return res, fmt.Errorf("engine: window at token %d: %w", lo, err)
			}
			v := sc.NVocab()
			for i, next := range chunk { // logits of position i predict seq[i+1] = chunk[i]
				total += nll(logits[i*v:(i+1)*v], next)
			}
		}
		res.Tokens += len(chunk)
		res.Windows++
		if progress != nil {
			progress(res.Tokens, len(text))
		}
	}
	res.NLL = total / float64(res.Tokens)
	return res, nil
}

// nll is -log softmax(logits)[target], computed stably in float64.
func nll(logits []float32, target int32) float64 {
	return logSumExp(logits) - float64(logits[target])
}
