package engine

import (
	"context"
	"fmt"
	"math"

	"github.com/modrun/modrun/internal/stats"
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

// PerplexityOptions set a scoring run: modrun perplexity's flags, checked
// here so that the command line and the API refuse the same values.
type PerplexityOptions struct {
	// Window is the longest window in tokens, BOS included (--ctx); 0: the
	// model's context length.
	Window int
	// Routing of a MoD model: top-k (eval mode) or causal.
	Routing mod.Routing
	// Capacity, when not nil, overrides the routed fraction of top-k
	// routing (--capacity), in (0, 1]; nil keeps the model's.
	Capacity *float64
}

// Check validates o without the model. A wrong field is an *OptionError.
func (o PerplexityOptions) Check() error {
	if o.Window < 0 || o.Window == 1 {
		return &OptionError{Option: "Window", Value: fmt.Sprint(o.Window), Problem: ": must be at least 2 (BOS and one token to score), or 0: the model's"}
	}
	if c := o.Capacity; c != nil {
		if !(*c > 0 && *c <= 1) {
			return &OptionError{Option: "Capacity", Value: fmt.Sprint(*c), Problem: ": want a fraction in (0, 1]"}
		}
		if o.Routing != mod.RoutingTopK {
			return &OptionError{Option: "Capacity",
				Problem: fmt.Sprintf(" sets the fraction of --routing topk; --routing %s routes by sign, with no fraction", o.Routing)}
		}
	}
	return nil
}

// Apply checks o against m and sets m's capacity: it returns the window
// to score with.
func (o PerplexityOptions) Apply(m *mod.Model) (int, error) {
	if err := o.Check(); err != nil {
		return 0, err
	}
	cfg := &m.Config
	if o.Capacity != nil {
		cfg.Capacity, cfg.CapacityTokens = float32(*o.Capacity), 0 // a fraction, also for a model whose k is a token count
	}
	if o.Window == 0 {
		return cfg.ContextLen, nil
	}
	if o.Window > cfg.ContextLen {
		return 0, &OptionError{Option: "Window", Value: fmt.Sprint(o.Window),
			Problem: fmt.Sprintf(": must be in [2, %d] (the context length of %s)", cfg.ContextLen, m.Path)}
	}
	return o.Window, nil
}

// PerplexityResult is the mean negative log-likelihood of the scored tokens.
type PerplexityResult struct {
	Tokens  int     `json:"tokens"`     // tokens scored
	Windows int     `json:"windows"`    // sequences run
	NLL     float64 `json:"nll"`        // mean NLL per token, in nats
	NLLErr  float64 `json:"nll_stderr"` // the standard error of that mean
}

// Perplexity is exp(NLL).
func (r PerplexityResult) Perplexity() float64 { return math.Exp(r.NLL) }

// Windows calls each with the windows of text: each is BOS followed by the
// next window-1 tokens of the text, and every one of those tokens is
// scored given what precedes it in its window. So each token of the text
// is scored exactly once, and each window is an independent sequence, as
// in training. ctx is checked between windows: when it ends, Windows
// returns its error, and the windows done so far stand. Perplexity scores
// by it; it is exported so that bench.Compare (perplexity --compare)
// scores exactly Perplexity's windows.
func Windows(ctx context.Context, text []int32, bos int32, window int, each func(seq, chunk []int32) error) error {
	if len(text) == 0 {
		return fmt.Errorf("engine: no tokens to score")
	}
	seq := make([]int32, 0, window)
	for lo := 0; lo < len(text); lo += window - 1 {
		if err := ctx.Err(); err != nil {
			return err
		}
		chunk := text[lo:min(lo+window-1, len(text))]
		seq = append(append(seq[:0], bos), chunk...)
		if err := each(seq, chunk); err != nil {
			return fmt.Errorf("engine: window at token %d: %w", lo, err)
		}
	}
	return nil
}

// Perplexity scores text (token ids without BOS) in windows of at most
// window tokens (Windows). A LossScorer computes the losses on its device,
// and only they come back; another scorer's logits are read back and its
// losses summed here in float64. progress, if not nil, is called after
// each window with the tokens scored so far.
func Perplexity(sc Scorer, text []int32, bos int32, window int, progress func(done, total int)) (PerplexityResult, error) {
	return PerplexityContext(context.Background(), sc, text, bos, window, progress)
}

// PerplexityContext is Perplexity that stops when ctx ends (an interrupt):
// the result of the windows scored so far comes back with ctx's error.
func PerplexityContext(ctx context.Context, sc Scorer, text []int32, bos int32, window int, progress func(done, total int)) (PerplexityResult, error) {
	var res PerplexityResult
	if window < 2 || window > sc.ContextLen() {
		return res, fmt.Errorf("engine: window %d must be in [2, %d] (the context length)", window, sc.ContextLen())
	}
	var m stats.Moments
	err := Windows(ctx, text, bos, window, func(seq, chunk []int32) error {
		if ls, ok := lossScorer(sc); ok {
			losses, err := ls.Losses(seq)
			if err != nil {
				return err
			}
			for _, l := range losses { // position i's loss is of seq[i+1] = chunk[i]
				m.Add(float64(l))
			}
		} else {
			logits, err := sc.Score(seq)
			if err != nil {
				return err
			}
			v := sc.NVocab()
			for i, next := range chunk { // logits of position i predict seq[i+1] = chunk[i]
				m.Add(nll(logits[i*v:(i+1)*v], next))
			}
		}
		res.Windows++
		res.Tokens, res.NLL, res.NLLErr = m.N, m.Mean(), m.Stderr()
		if progress != nil {
			progress(res.Tokens, len(text))
		}
		return nil
	})
	return res, err
}

// nll is -log softmax(logits)[target], computed stably in float64.
func nll(logits []float32, target int32) float64 {
	return stats.LogSumExp(logits) - float64(logits[target])
}
