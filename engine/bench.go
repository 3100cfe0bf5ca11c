package engine

import (
	"fmt"
	"math"
	"sort"

	"github.com/modrun/modrun/mod"
)

// BenchOptions size one benchmark.
type BenchOptions struct {
	PromptTokens int // tokens prefilled
	DecodeTokens int // tokens decoded after the prompt
	Repeats      int // runs timed; the median is reported
	// ValidateTokens greedy tokens are checked against the CPU reference
	// before anything is timed, with logits within ValidateTol.
	ValidateTokens int
	ValidateTol    float64
}

// BenchResult is one model on one backend.
type BenchResult struct {
	Backend       string
	PrefillRate   float64 // tokens/s, median over repeats
	DecodeRate    float64 // tokens/s, median over repeats
	MaxLogitDiff  float64 // largest |logit - CPU reference logit| while validating
	RoutedPercent []float64
}

// Bench validates then times backend b running model m: first greedy
// decoding against the CPU reference (same tokens, logits within tolerance;
// a backend that disagrees is not timed), then prefill and decode speeds.
func Bench(b *Backend, m *mod.Model, routing mod.Routing, prompt []int32, o BenchOptions) (BenchResult, error) {
	k, err := NewBenchmark(b, m, routing, prompt, o)
	if err != nil {
		return k.Result(), err
	}
	for i := 0; i < max(1, o.Repeats); i++ {
		if err := k.Time(); err != nil {
			return k.Result(), err
		}
	}
	return k.Result(), nil
}

// Benchmark is one model on one backend, validated against the CPU
// reference and then timed one run at a time, so that a caller comparing
// several can interleave their runs round by round: load on a shared
// machine then falls on every row alike instead of on whichever row ran
// while it lasted.
type Benchmark struct {
	b               *Backend
	prompt          []int32
	o               BenchOptions
	res             BenchResult
	prefill, decode []float64
}

// NewBenchmark checks the options and validates b against the CPU
// reference; a backend that disagrees is an error and is never timed.
func NewBenchmark(b *Backend, m *mod.Model, routing mod.Routing, prompt []int32, o BenchOptions) (*Benchmark, error) {
	k := &Benchmark{b: b, o: o, res: BenchResult{Backend: b.Name}}
	if len(prompt) < o.PromptTokens || o.PromptTokens < 1 {
		return k, fmt.Errorf("engine: bench needs a prompt of %d tokens, got %d", o.PromptTokens, len(prompt))
	}
	k.prompt = prompt[:o.PromptTokens]
	if o.PromptTokens+max(o.DecodeTokens, o.ValidateTokens) > b.ContextLen() {
		return k, fmt.Errorf("engine: %d prompt + %d decoded tokens pass the context length %d", o.PromptTokens, o.DecodeTokens, b.ContextLen())
	}
	ref, err := NewCPU(m, routing)
	if err != nil {
		return k, err
	}
	k.res.MaxLogitDiff, err = validate(b, ref, k.prompt, o)
	return k, err
}

// Time runs the benchmark once: the prompt, then o.DecodeTokens greedy tokens.
func (k *Benchmark) Time() error {
	r, err := Generate(k.b, k.prompt, GenerateOptions{MaxTokens: k.o.DecodeTokens, EOS: -1, Sampler: DefaultSampler()})
	if err != nil {
		return err
	}
	k.prefill, k.decode = append(k.prefill, r.PrefillRate()), append(k.decode, r.DecodeRate())
	return nil
}

// Result gives the medians of the timed runs so far (zero before the first)
// and, for a MoD model, the share of tokens each routed layer took in the last.
func (k *Benchmark) Result() BenchResult {
	res := k.res
	if len(k.decode) > 0 {
		res.PrefillRate, res.DecodeRate = median(k.prefill), median(k.decode)
	}
	if rs, ok := k.b.Runner.(RoutingStatser); ok && len(k.decode) > 0 {
		for _, s := range rs.RoutingStats() {
			res.RoutedPercent = append(res.RoutedPercent, 100*float64(s.Selected)/float64(max(1, s.Seen)))
		}
	}
	return res
}

// validate decodes greedily on both runners in lockstep, feeding the
// reference's token to both, and returns the largest logit difference.
func validate(b Runner, ref Runner, prompt []int32, o BenchOptions) (float64, error) {
	b.Reset()
	ref.Reset()
	got, err := b.Feed(prompt)
	if err != nil {
		return 0, err
	}
	want, err := ref.Feed(prompt)
	if err != nil {
		return 0, err
	}
	var worst float64
	for step := 0; ; step++ {
		for i := range want {
			worst = math.Max(worst, math.Abs(float64(got[i])-float64(want[i])))
		}
		if worst > o.ValidateTol || math.IsNaN(worst) {
			return worst, fmt.Errorf("engine: validation failed at step %d: a logit differs from the CPU reference by %.3g (> %.3g)", step, worst, o.ValidateTol)
		}
		next := argmax(want)
		if g := argmax(got); g != next {
			return worst, fmt.Errorf("engine: validation failed at step %d: greedy token %d, the CPU reference's %d", step, g, next)
		}
		if step == o.ValidateTokens {
			return worst, nil
		}
		if got, err = b.Feed([]int32{next}); err != nil {
			return worst, err
		}
		if want, err = ref.Feed([]int32{next}); err != nil {
			return worst, err
		}
	}
}

func median(x []float64) float64 {
	s := append([]float64(nil), x...)
	sort.Float64s(s)
	return s[len(s)/2]
}
