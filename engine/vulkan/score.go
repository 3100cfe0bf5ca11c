package vulkan

import "fmt"

// Score runs tokens as one sequence from position 0 (it Resets the runner)
// through the batched prefill with the runner's causal routing and returns
// the logits of every token, [S][nVocab]: perplexity with causal routing
// (router r > 0 or predictor p > 0) on the GPU. With ContextLen and NVocab
// the runner is an engine.Scorer.
func (r *Runner) Score(tokens []int32) ([]float32, error) {
	out := make([]float32, 0, len(tokens)*r.c.NVocab)
	err := r.scoreRows(tokens, headLogits, func(logits []float32) error {
		out = append(out, logits...)
		return nil
	})
	return out, err
}

// Losses is Score's negative log-likelihood of each token after the first
// given those before it ([S-1] nats), computed on the device: a float per
// row comes back instead of its nVocab logits. With it the runner is an
// engine.LossScorer.
func (r *Runner) Losses(tokens []int32) ([]float32, error) {
	out := make([]float32, 0, len(tokens))
	err := r.scoreRows(tokens, headLoss, func(loss []float32) error {
		out = append(out, loss...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out[:len(tokens)-1], nil
}

// scoreRows runs tokens from position 0 in prefill chunks ending with head,
// passing each chunk's output to each.
func (r *Runner) scoreRows(tokens []int32, head rowsHead, each func([]float32) error) error {
	r.Reset()
	if err := r.check(tokens); err != nil {
		return err
	}
	if r.trace != nil {
		r.trace = r.trace[:0]
	}
	if _, ok := r.pf.heads[head]; !ok {
		hb, err := r.newHeadBufs(head, r.pf.ub)
		if err != nil {
			return fmt.Errorf("vulkan: score: %w", err)
		}
		r.pf.heads[head] = hb
	}
	return r.runPrefill(tokens, head, each)
}

// NVocab is the number of logits per token.
func (r *Runner) NVocab() int { return r.c.NVocab }
