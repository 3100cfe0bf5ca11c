package engine

import (
	"fmt"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/mod"
)

// Runner runs one sequence of a model on some backend, in generate mode
// (causal routing). It has what Generate needs.
type Runner interface {
	// Feed runs tokens after those already fed and returns the logits of
	// the last one [nVocab].
	Feed(tokens []int32) ([]float32, error)
	// Pos is the number of tokens fed since the last Reset.
	Pos() int
	// ContextLen is the longest sequence the runner takes.
	ContextLen() int
	// Reset starts a new sequence.
	Reset()
}

// GreedyFeeder is a Runner that can take the argmax of the logits itself:
// Feed followed by greedy sampling, without reading the logits back.
// Generate uses it when the sampler is pure greedy.
type GreedyFeeder interface {
	// FeedArgmax runs tokens like Feed and returns the index of the last
	// one's largest logit, ties to the lower index (as the sampler's argmax).
	FeedArgmax(tokens []int32) (int32, error)
}

// GreedyChainer is a GreedyFeeder that runs several greedy tokens in one
// go, each the argmax after the one before, without the host between them
// (Vulkan: one submission, engine/vulkan/chain.go). The RunnerStepper keeps
// the tokens ahead of the sequence and hands them out as its steps come,
// and Truncates the runner back where the sequence went otherwise (a stop
// token, a stop string, the end of a request).
type GreedyChainer interface {
	// ChainSteps is the most tokens FeedArgmaxChain runs (1: no chain).
	ChainSteps() int
	// FeedArgmaxChain runs token, then up to n-1 tokens more, each the
	// argmax after the token before, and returns their argmaxes (the
	// first is FeedArgmax([]int32{token})'s), one for each token the
	// runner now holds more: n of them, or fewer where the runner runs
	// shorter chains or met non-finite logits.
	FeedArgmaxChain(token int32, n int) ([]int32, error)
}

// DrawFeeder is a GreedyFeeder that can also draw a token at a
// temperature itself (Vulkan on a GPU profile: argmax_wide's draw,
// docs/sampling-cost.md), so that a plain sampled token (Sampler.Plain)
// reads 4 bytes back, not the logits, as a greedy one does.
type DrawFeeder interface {
	// DrawsOnDevice says whether FeedDraw draws (false: it fails).
	DrawsOnDevice() bool
	// FeedDraw runs tokens like Feed and returns the token drawn from the
	// last one's logits at temperature temp (above 0) with the uniform
	// number u in [0, 1): the first id whose running sum of weights
	// exp((l - max) / temp) passes u times their total (Sampler.drawAll),
	// in the device's float32, over the tokens d's filters keep (top-p,
	// min-p: Sampler.keep's, in id order); d.Temp above 0.
	FeedDraw(tokens []int32, d sched.Draw, u float64) (int32, error)
}

// DrawChainer is a DrawFeeder that chains draws as a GreedyChainer chains
// argmaxes (Vulkan: the chain's steps each with their own draw
// parameters): FeedDrawChain runs token, then up to n-1 tokens more, each
// drawn after the one before, ids[i] with the uniform number us[i]
// (FeedArgmaxChain's contract otherwise). The RunnerStepper draws ahead
// with the numbers the sequence's sampler will hand out next
// (sched.DeviceSampler.Peek), and serves a later row only where the row's
// number is the one drawn with.
type DrawChainer interface {
	FeedDrawChain(token int32, n int, d sched.Draw, us []float64) ([]int32, error)
}

// Truncater is a Runner that can drop its last tokens: after Truncate(p) it
// holds the first p, as though only they were fed since Reset. It may
// refuse a p it cannot go back to (the caller then runs the tokens again).
type Truncater interface {
	Truncate(p int) error
}

// LayerStat is how many tokens one routed layer processed.
type LayerStat struct {
	Layer          int
	Selected, Seen int
}

// RoutingStatser is a Runner that reports, per routed layer, how many tokens
// went through since the last Reset.
type RoutingStatser interface {
	RoutingStats() []LayerStat
}

// RoutingTracer is a Runner that reports, token by token, what its routed
// layers did during the last Feed (or FeedArgmax) call.
type RoutingTracer interface {
	// Routes is [tokens of the last Feed][routed layers, in layer order];
	// nil for a dense model or a runner opened without tracing.
	Routes() [][]mod.Route
}

// CPU runs a model with the pure-Go reference forward pass of package mod.
type CPU struct {
	s     *mod.State
	ctx   int       // ContextLen when set (BackendOptions.ContextLen), else the model's
	trace mod.Trace // of the last Feed: the routing decisions, for Routes
}

// NewCPU returns a CPU runner with causal routing r (mod.RoutingRouter or
// mod.RoutingPredictor; dense models ignore it).
func NewCPU(m *mod.Model, r mod.Routing) (*CPU, error) {
	if r == mod.RoutingTopK {
		return nil, fmt.Errorf("engine: generation needs causal routing (router or predictor), not top-k")
	}
	s, err := m.NewState(r)
	if err != nil {
		return nil, err
	}
	c := &CPU{s: s}
	s.Trace = &c.trace // free: Forward computes the scores anyway
	return c, nil
}

func (c *CPU) Feed(tokens []int32) ([]float32, error) {
	if n := c.ContextLen(); c.s.Pos()+len(tokens) > n {
		return nil, fmt.Errorf("engine: %d tokens after %d would pass the context length %d", len(tokens), c.s.Pos(), n)
	}
	return c.s.Forward(tokens, false)
}

func (c *CPU) Pos() int { return c.s.Pos() }
func (c *CPU) Reset()   { c.s.Reset() }
func (c *CPU) ContextLen() int {
	if c.ctx > 0 {
		return c.ctx
	}
	return c.s.Model().Config.ContextLen
}

// RoutingStats reports the routed layers' counts.
func (c *CPU) RoutingStats() []LayerStat {
	var out []LayerStat
	for _, l := range c.s.Model().Config.RoutedLayers() {
		out = append(out, LayerStat{Layer: l, Selected: c.s.Selected[l], Seen: c.s.Seen[l]})
	}
	return out
}

// Routes reports the routing of the last Feed's tokens, from mod's trace.
func (c *CPU) Routes() [][]mod.Route {
	layers := c.trace.Layers
	if len(layers) == 0 {
		return nil
	}
	predictor := c.s.Routing() == mod.RoutingPredictor
	out := make([][]mod.Route, len(layers[0].RouterLogits))
	for i := range out {
		out[i] = make([]mod.Route, len(layers))
	}
	for j, lt := range layers {
		scores := lt.RouterLogits
		if predictor {
			scores = lt.PredictorLogits
		}
		first := c.s.Pos() - len(out) // the position of the call's first token
		for i, s := range scores {
			out[i][j] = mod.Route{Layer: lt.Layer, Score: s}
		}
		for _, p := range lt.Selected {
			out[p-first][j].Selected = true
		}
	}
	return out
}
