package modrun

import (
	"context"
	"fmt"

	"github.com/modrun/modrun/engine"
)

// TokenLogProb is a token and its log-probability (natural log).
type TokenLogProb = engine.TokenLogProb

// MaxTopLogProbs is the most alternatives GenerateOptions.TopLogProbs and
// LogProbs's top take (OpenAI's limit).
const MaxTopLogProbs = 20

// PromptLengthError is Generate's (and Reply's) error for a prompt that
// does not fit: its Tokens after the Held tokens of the session's
// sequence pass the model's ContextLen.
type PromptLengthError struct {
	Tokens, Held, ContextLen int
}

func (e *PromptLengthError) Error() string {
	if e.Held == 0 {
		return fmt.Sprintf("modrun: the prompt has %d tokens, more than the context length %d", e.Tokens, e.ContextLen)
	}
	return fmt.Sprintf("modrun: the prompt has %d tokens; after the session's %d that is more than the context length %d",
		e.Tokens, e.Held, e.ContextLen)
}

// ScoredToken is one token of a scored sequence: its log-probability given
// the tokens before it, and the top most likely tokens at its place.
type ScoredToken struct {
	ID      int32
	LogProb float32
	Top     []TokenLogProb
}

// LogProbs scores tokens as one sequence from its start (tokens[0] is
// usually BOS), teacher-forced with the causal routing generation uses:
// out[i] is tokens[i+1] given tokens[:i+1], with the top most likely tokens
// there (at most MaxTopLogProbs). This is what an evaluation harness's
// log-likelihood asks for (OpenAI's echo with logprobs). It takes the
// runner between two steps of the generation loop; a sequence that was
// running on the runner runs again before its next step.
func (m *Model) LogProbs(ctx context.Context, tokens []int32, top int) ([]ScoredToken, error) {
	switch {
	case len(tokens) < 2:
		return nil, fmt.Errorf("modrun: LogProbs: %d tokens; a token is scored given those before it, so give 2 or more", len(tokens))
	case len(tokens) > m.ctxLen:
		return nil, &PromptLengthError{Tokens: len(tokens), ContextLen: m.ctxLen}
	case top < 0 || top > MaxTopLogProbs:
		return nil, fmt.Errorf("modrun: LogProbs: top %d: must be in [0, %d]", top, MaxTopLogProbs)
	}
	for i, id := range tokens {
		if id < 0 || int(id) >= m.info.NVocab {
			return nil, fmt.Errorf("modrun: LogProbs: token %d at index %d is outside the vocabulary [0, %d)", id, i, m.info.NVocab)
		}
	}
	release, err := m.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	m.loop.RunnerUsed() // the runner runs this sequence: a session's runs again next time
	n := m.info.NVocab
	out := make([]ScoredToken, len(tokens)-1)
	score := func(i int, logits []float32) { // logits [nVocab] after tokens[:i+1]
		lp, best := engine.LogProbs(logits, tokens[i+1], top)
		out[i] = ScoredToken{ID: tokens[i+1], LogProb: lp, Top: best}
	}
	r := m.backend.Runner
	if sc, ok := r.(engine.Scorer); ok { // one batched pass: the CPU and Vulkan runners
		all, err := sc.Score(tokens[:len(tokens)-1]) // [n-1][nVocab]
		if err != nil {
			return nil, fmt.Errorf("modrun: LogProbs: %w", err)
		}
		for i := range out {
			score(i, all[i*n:(i+1)*n])
		}
		return out, nil
	}
	r.Reset() // the reference runner: a token at a time
	for i := range out {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		logits, err := r.Feed(tokens[i : i+1])
		if err != nil {
			return nil, fmt.Errorf("modrun: LogProbs: %w", err)
		}
		score(i, logits)
	}
	return out, nil
}

// Detokenize turns token ids back into text.
func (m *Model) Detokenize(ids []int32) (string, error) {
	if m.isClosed() {
		return "", ErrClosed
	}
	b, err := m.tok.Decode(ids)
	if err != nil {
		return "", fmt.Errorf("modrun: %w", err)
	}
	return string(b), nil
}

// TokenText is the bytes token id adds in the middle of a text ("\n" for
// <0x0A>; nothing for a control token): how a log-probability's
// alternatives are shown.
func (m *Model) TokenText(id int32) ([]byte, error) {
	b, err := m.tok.Text(id)
	if err != nil {
		return nil, fmt.Errorf("modrun: %w", err)
	}
	return b, nil
}
