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
	res := BenchResult{Backend: b.Name}
	if len(prompt) < o.PromptTokens || o.PromptTokens < 1 {
		return res, fmt.Errorf("engine: bench needs a prompt of %d tokens, got %d", o.PromptTokens, len(prompt))
	}
	prompt = prompt[:o.PromptTokens]
	if o.PromptTokens+max(o.DecodeTokens, o.ValidateTokens) > b.ContextLen() {
		return res, fmt.Errorf("engine: %d prompt + %d decoded tokens pass the context length %d", o.PromptTokens, o.DecodeTokens, b.ContextLen())
	}
	ref, err := NewCPU(m, routing)
	if err != nil {
		return res, err
	}
	if res.MaxLogitDiff, err = validate(b, ref, prompt, o); err != nil {
		return res, err
	}
	var prefill, decode []float64
	for i := 0; i < max(1, o.Repeats); i++ {
		r, err := Generate(b, prompt, GenerateOptions{MaxTokens: o.DecodeTokens, EOS: -1, Sampler: DefaultSampler()})
		if err != nil {
			return res, err
		}
		prefill, decode = append(prefill, r.PrefillRate()), append(decode, r.DecodeRate())
	}
	res.PrefillRate, res.DecodeRate = median(prefill), median(decode)
	if rs, ok := b.Runner.(RoutingStatser); ok {
		for _, s := range rs.RoutingStats() {
			res.RoutedPercent = append(res.RoutedPercent, 100*float64(s.Selected)/float64(max(1, s.Seen)))
		}
	}
	return res, nil
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
