package server

import (
	"context"
	"math"
	"net/http"
	"time"

	"github.com/modrun/modrun"
)

type (
	completionChoice struct {
		Index        int                 `json:"index"`
		Text         string              `json:"text"`
		LogProbs     *completionLogProbs `json:"logprobs"`
		FinishReason *string             `json:"finish_reason"`
	}
	// completionLogProbs is the legacy completions' logprobs: one entry
	// per token; a token with no log-probability (the first of an echoed
	// prompt) has null ones.
	completionLogProbs struct {
		Tokens        []string             `json:"tokens"`
		TokenLogProbs []*float32           `json:"token_logprobs"`
		TopLogProbs   []map[string]float32 `json:"top_logprobs"`
		TextOffset    []int                `json:"text_offset"`
	}
	completionResponse struct {
		ID      string             `json:"id"`
		Object  string             `json:"object"`
		Created int64              `json:"created"`
		Model   string             `json:"model"`
		Choices []completionChoice `json:"choices"`
		Usage   *usageJSON         `json:"usage,omitempty"`
		MoD     *modChunk          `json:"mod,omitempty"`
	}
)

// completions answers POST /v1/completions: a prompt of text or token ids
// (run as given), and with echo the prompt comes back first, with its own
// tokens' log-probabilities when logprobs is set (what an evaluation
// harness's log-likelihood needs; max_tokens 0 then generates nothing).
func (s *Server) completions(w http.ResponseWriter, r *http.Request, m *modrun.Model) error {
	start := time.Now()
	var req completionRequest
	if err := decode(r.Body, &req); err != nil {
		return err
	}
	opts, err := req.genOptions(s.info, s.cfg.ModelName, 16) // OpenAI's default for completions
	if err != nil {
		return err
	}
	if err := req.applyFormat(&opts); err != nil {
		return err
	}
	switch {
	case req.Prompt.count == 0:
		return badRequest("prompt", "invalid_value", "prompt is missing: give a string or an array of token ids")
	case req.Prompt.count > 1:
		return badRequest("prompt", "invalid_value", "%d prompts: this server takes one prompt per request", req.Prompt.count)
	case req.Prompt.isIDs && len(req.Prompt.ids) == 0:
		return badRequest("prompt", "invalid_value", "prompt is an empty array of token ids")
	}
	top := 0
	if req.LogProbs != nil {
		if *req.LogProbs < 0 || *req.LogProbs > modrun.MaxTopLogProbs {
			return badRequest("logprobs", "invalid_value", "logprobs %d: must be in [0, %d]", *req.LogProbs, modrun.MaxTopLogProbs)
		}
		top = *req.LogProbs
		opts.LogProbs, opts.TopLogProbs = true, top
	}
	ids := req.Prompt.ids
	if !req.Prompt.isIDs {
		if ids, err = m.Tokenize(req.Prompt.text, true); err != nil {
			return badRequest("prompt", "invalid_value", "%v", err)
		}
	}
	for i, id := range ids {
		if id < 0 || int(id) >= s.info.NVocab {
			return badRequest("prompt", "invalid_value", "prompt[%d]: token %d is outside the vocabulary [0, %d)", i, id, s.info.NVocab)
		}
	}
	if n := len(ids); n > s.info.ContextLen || (n == s.info.ContextLen && opts.MaxTokens > 0) {
		return badRequest("prompt", "context_length_exceeded", "the prompt has %d tokens; the context length is %d", n, s.info.ContextLen)
	}
	var echo string
	if req.Echo {
		if echo, err = m.Detokenize(ids); err != nil {
			return badRequest("prompt", "invalid_value", "%v", err)
		}
	}

	ctx, cancel := s.requestContext(r)
	defer cancel()
	release, err := s.admit(ctx)
	if err != nil {
		return s.runError(ctx, err, "prompt")
	}
	defer release()

	var lps *completionLogProbs
	if req.Echo && req.LogProbs != nil {
		if lps, err = promptLogProbs(ctx, m, ids, top); err != nil {
			return s.runError(ctx, err, "prompt")
		}
	}
	resp := completionResponse{ID: newID("cmpl"), Object: "text_completion", Created: time.Now().Unix(), Model: s.cfg.ModelName}
	g := &generation{stops: req.Stop, metrics: s.metrics, start: start, hook: s.tokenHook}
	var stream *sse
	if req.Stream {
		stream = newSSE(w)
		opts.OnRouted = g.routed // each token out once drawn
		var promptToks []modrun.Token
		g.onPrompt = func(t modrun.Token) { promptToks = append(promptToks, t) }
		first := true
		g.emit = func(p piece) error {
			c := resp
			c.Choices = []completionChoice{{Text: p.text, LogProbs: completionLPs(m, p.tokens, req.LogProbs != nil, len(echo))}}
			if first {
				c.Choices[0].Text = echo + p.text
				c.Choices[0].LogProbs = joinLPs(lps, c.Choices[0].LogProbs)
				c.MoD = s.modChunk(append(promptToks, p.tokens...), p.routed, true)
				first = false
			} else {
				c.MoD = s.modChunk(p.tokens, p.routed, false)
			}
			return stream.send(c)
		}
	}
	var res modrun.Result
	if opts.MaxTokens > 0 {
		opts.PromptTokens = ids
		sess := m.NewSession()
		defer sess.Close()
		res, err = sess.Generate(ctx, "", opts, g.token)
		if err != nil {
			return s.failed(r, g, stream, s.runError(ctx, err, "prompt"))
		}
	} else {
		g.prompt = len(ids)
		res.Stop = modrun.StopMaxTokens
	}
	u := requestUsage(r.Context())
	u.prompt, u.completion = g.prompt, g.newToks
	reason, err := g.finish(res)
	if err != nil {
		return s.runError(ctx, err, "prompt")
	}
	usage := g.usage(res)
	if stream == nil {
		choice := completionChoice{Text: echo + g.out.text, FinishReason: &reason}
		if req.LogProbs != nil {
			choice.LogProbs = joinLPs(lps, completionLPs(m, g.out.tokens, true, len(echo)))
		}
		resp.Choices, resp.Usage = []completionChoice{choice}, usage
		writeJSON(w, http.StatusOK, resp)
		return nil
	}
	if g.newToks == 0 && echo != "" { // nothing generated: the echo still comes
		c := resp
		c.Choices = []completionChoice{{Text: echo, LogProbs: lps}}
		if stream.send(c) != nil {
			return nil
		}
	}
	c := resp
	c.Choices = []completionChoice{{Text: "", FinishReason: &reason}}
	c.MoD = s.modChunk(nil, g.takeLate(), false)
	if stream.send(c) != nil {
		return nil
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		c.Choices, c.Usage = []completionChoice{}, usage
		if stream.send(c) != nil {
			return nil
		}
	}
	_ = stream.done()
	return nil
}

// promptLogProbs is the echoed prompt's logprobs: each token's given those
// before it, the first's null (nothing precedes it).
func promptLogProbs(ctx context.Context, m *modrun.Model, ids []int32, top int) (*completionLogProbs, error) {
	out := &completionLogProbs{}
	offset := 0
	add := func(id int32, lp *float32, alts []modrun.TokenLogProb) {
		text := tokenText(m, id)
		out.Tokens = append(out.Tokens, text)
		out.TokenLogProbs = append(out.TokenLogProbs, lp)
		// The first token's alternatives are {} rather than null: OpenAI's
		// Go client drops a top_logprobs array that holds a null.
		out.TopLogProbs = append(out.TopLogProbs, topLogProbs(m, alts))
		out.TextOffset = append(out.TextOffset, offset)
		offset += len(text)
	}
	add(ids[0], nil, nil)
	if len(ids) < 2 {
		return out, nil
	}
	scored, err := m.LogProbs(ctx, ids, top)
	if err != nil {
		return nil, err
	}
	for _, st := range scored {
		add(st.ID, finite(st.LogProb), st.Top)
	}
	// The echoed text drops the space SentencePiece puts before the first
	// word (" Once" is "Once" at the start): offsets count in that text.
	if echo, err := m.Detokenize(ids); err == nil {
		for i, o := range out.TextOffset {
			out.TextOffset[i] = max(0, o-(offset-len(echo)))
		}
	}
	return out, nil
}

// completionLPs is the legacy logprobs of generated tokens (nil unless
// wanted), their text offsets counted after offset bytes (the echo).
func completionLPs(m *modrun.Model, toks []modrun.Token, want bool, offset int) *completionLogProbs {
	if !want {
		return nil
	}
	out := &completionLogProbs{Tokens: []string{}, TokenLogProbs: []*float32{}, TopLogProbs: []map[string]float32{}, TextOffset: []int{}}
	for _, t := range toks {
		out.Tokens = append(out.Tokens, t.Text)
		out.TokenLogProbs = append(out.TokenLogProbs, finite(t.LogProb))
		out.TopLogProbs = append(out.TopLogProbs, topLogProbs(m, t.TopLogProbs))
		out.TextOffset = append(out.TextOffset, offset)
		offset += len(t.Text)
	}
	return out
}

// joinLPs is a's entries then b's (either may be nil).
func joinLPs(a, b *completionLogProbs) *completionLogProbs {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return &completionLogProbs{Tokens: append(a.Tokens, b.Tokens...), TokenLogProbs: append(a.TokenLogProbs, b.TokenLogProbs...),
		TopLogProbs: append(a.TopLogProbs, b.TopLogProbs...), TextOffset: append(a.TextOffset, b.TextOffset...)}
}

func topLogProbs(m *modrun.Model, alts []modrun.TokenLogProb) map[string]float32 {
	out := make(map[string]float32, len(alts))
	for _, a := range alts {
		text := tokenText(m, a.ID)
		if _, ok := out[text]; !ok { // two tokens of one text: the likelier
			out[text] = a.LogProb
		}
	}
	return out
}

func tokenText(m *modrun.Model, id int32) string {
	b, _ := m.TokenText(id) // checked against the vocabulary before
	return string(b)
}

// finite is lp, or nil for a token of probability 0 (-Inf has no JSON).
func finite(lp float32) *float32 {
	if math.IsInf(float64(lp), 0) || math.IsNaN(float64(lp)) {
		return nil
	}
	return &lp
}
