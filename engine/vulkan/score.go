package vulkan

import (
	"fmt"

	"github.com/modrun/modrun/vk"
)

// Score runs tokens as one sequence from position 0 (it Resets the runner)
// through the batched prefill with the runner's causal routing and returns
// the logits of every token, [S][nVocab]: perplexity with causal routing
// (router r > 0 or predictor p > 0) on the GPU. With ContextLen and NVocab
// the runner is an engine.Scorer.
func (r *Runner) Score(tokens []int32) ([]float32, error) {
	r.Reset()
	if err := r.check(tokens); err != nil {
		return nil, err
	}
	pf := r.pf
	if pf.logits == nil {
		size := 4 * uint64(pf.ub) * uint64(r.c.NVocab)
		var err error
		if pf.logits, err = r.buffer(size, vk.DeviceLocal); err != nil {
			return nil, fmt.Errorf("vulkan: score: %w", err)
		}
		if pf.host, err = r.buffer(size, vk.HostVisible); err != nil {
			return nil, fmt.Errorf("vulkan: score: %w", err)
		}
	}
	out := make([]float32, 0, len(tokens)*r.c.NVocab)
	err := r.runPrefill(tokens, func(logits []float32) error {
		out = append(out, logits...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// NVocab is the number of logits per token.
func (r *Runner) NVocab() int { return r.c.NVocab }
