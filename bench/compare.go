package bench

import (
	"context"
	"fmt"
	"math"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/internal/stats"
)

// CompareResult is a scorer against a reference scorer over the same text
// and windows: the figures llama.cpp's perplexity tool prints with
// --kl-divergence, by which a quantization or a backend is judged.
type CompareResult struct {
	Tokens  int `json:"tokens"`
	Windows int `json:"windows"`
	// NLL and RefNLL are the mean NLL per token of the scorer and of the
	// reference (nats), each with the standard error of its mean.
	NLL       float64 `json:"nll"`
	NLLErr    float64 `json:"nll_stderr"`
	RefNLL    float64 `json:"ref_nll"`
	RefNLLErr float64 `json:"ref_nll_stderr"`
	// DeltaNLL is NLL - RefNLL (llama.cpp's mean ln(PPL(Q)/PPL(base))),
	// DeltaNLLErr its standard error: that of the mean of the tokens'
	// differences, which counts that the two NLLs of a token go together
	// (the same as llama.cpp's sqrt(se² + se_base² - 2 cov)).
	DeltaNLL    float64 `json:"delta_nll"`
	DeltaNLLErr float64 `json:"delta_nll_stderr"`
	// MeanKL is the mean over tokens of KL(reference || scorer) of the
	// next-token distributions (nats), MeanKLErr its standard error, MaxKL
	// the largest.
	MeanKL    float64 `json:"mean_kl"`
	MeanKLErr float64 `json:"mean_kl_stderr"`
	MaxKL     float64 `json:"max_kl"`
	// Top1 is the share of tokens whose most likely next token is the
	// reference's ("same top p"), Top1Err its standard error,
	// sqrt(p(1-p)/(n-1)).
	Top1    float64 `json:"top1_agreement"`
	Top1Err float64 `json:"top1_agreement_stderr"`
}

// Perplexity is exp(NLL), and RefPerplexity exp(RefNLL).
func (r CompareResult) Perplexity() float64    { return math.Exp(r.NLL) }
func (r CompareResult) RefPerplexity() float64 { return math.Exp(r.RefNLL) }

// Compare scores text with sc and with ref in the same windows (as
// Perplexity) and compares their next-token distributions token by token.
// Both scorers give every window's full logits (Score, [n][nVocab]), not
// the losses alone that Perplexity reads from a LossScorer: KL needs the
// whole distribution, and top-k with the rest's mass would only bound it.
// So a window costs two n × nVocab float downloads and that much host
// memory for each scorer. When ctx ends, the windows compared so far stand
// with ctx's error.
func Compare(ctx context.Context, sc, ref engine.Scorer, text []int32, bos int32, window int, progress func(done, total int)) (CompareResult, error) {
	var res CompareResult
	if sc.NVocab() != ref.NVocab() {
		return res, fmt.Errorf("bench: the scorers' vocabularies differ: %d and %d tokens", sc.NVocab(), ref.NVocab())
	}
	if n := min(sc.ContextLen(), ref.ContextLen()); window < 2 || window > n {
		return res, fmt.Errorf("bench: window %d must be in [2, %d] (the context length)", window, n)
	}
	v := sc.NVocab()
	var nll, refNLL, delta, kl, top1 stats.Moments
	err := engine.Windows(ctx, text, bos, window, func(seq, chunk []int32) error {
		want, err := ref.Score(seq)
		if err != nil {
			return fmt.Errorf("reference: %w", err)
		}
		got, err := sc.Score(seq)
		if err != nil {
			return err
		}
		for i, next := range chunk { // logits of position i predict seq[i+1] = chunk[i]
			t := compareToken(want[i*v:(i+1)*v], got[i*v:(i+1)*v], next)
			nll.Add(t.nll)
			refNLL.Add(t.refNLL)
			delta.Add(t.nll - t.refNLL)
			kl.Add(t.kl)
			top1.Add(float64(t.sameTop))
			res.MaxKL = math.Max(res.MaxKL, t.kl)
		}
		res.Windows++
		res.Tokens = nll.N
		res.NLL, res.NLLErr = nll.Mean(), nll.Stderr()
		res.RefNLL, res.RefNLLErr = refNLL.Mean(), refNLL.Stderr()
		res.DeltaNLL, res.DeltaNLLErr = delta.Mean(), delta.Stderr()
		res.MeanKL, res.MeanKLErr = kl.Mean(), kl.Stderr()
		res.Top1 = top1.Mean()
		if top1.N > 1 {
			res.Top1Err = math.Sqrt(res.Top1 * (1 - res.Top1) / float64(top1.N-1))
		}
		if progress != nil {
			progress(res.Tokens, len(text))
		}
		return nil
	})
	return res, err
}

// tokenComparison is one scored token under both scorers.
type tokenComparison struct {
	nll, refNLL float64 // -log p(next) under the scorer and the reference
	kl          float64 // KL(reference || scorer), nats
	sameTop     int     // 1 if the most likely tokens agree
}

// compareToken compares the next-token distributions of one position, in
// float64: one pass for each maximum and normalizer, one for KL.
func compareToken(want, got []float32, next int32) tokenComparison {
	lw, lg := stats.LogSumExp(want), stats.LogSumExp(got)
	var t tokenComparison
	for i := range want {
		a := float64(want[i]) - lw // log p_i, the reference
		b := float64(got[i]) - lg  // log q_i
		t.kl += math.Exp(a) * (a - b)
	}
	t.kl = math.Max(t.kl, 0) // rounding can leave a tiny negative sum
	t.nll, t.refNLL = lg-float64(got[next]), lw-float64(want[next])
	if stats.Argmax(want) == stats.Argmax(got) {
		t.sameTop = 1
	}
	return t
}
