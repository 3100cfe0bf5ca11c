package server

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync"
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
	completionResponse = response[completionChoice]
)

// completions answers POST /v1/completions: a prompt of text or token ids
// (run as given), or an array of them, each its own sequence run
// concurrently (in shared steps on a model opened with Parallel) and its
// own choice, indexed as the prompts are. With echo the prompt comes back
// first, with its own tokens' log-probabilities when logprobs is set
// (what an evaluation harness's log-likelihood needs; max_tokens 0 then
// generates nothing).
func (s *Server) completions(w http.ResponseWriter, r *http.Request, m *modrun.Model) (served, error) {
	start := time.Now()
	var req completionRequest
	if err := decode(r.Body, &req); err != nil {
		return served{}, err
	}
	if err := s.checkModel(req.Model); err != nil {
		return served{}, err
	}
	opts, err := req.genOptions(s.info, 16, 0) // OpenAI's default for completions; 0 scores an echoed prompt
	if err != nil {
		return served{}, err
	}
	n := req.Prompt.count()
	if err := req.applyFormat(&opts); err != nil {
		return served{}, err
	}
	switch {
	case n == 0:
		return served{}, badRequest("prompt", "invalid_value", "prompt is missing: give a string, an array of token ids, or an array of one of those")
	case n > 1 && req.Stream:
		return served{}, badRequest("prompt", "invalid_value", "%d prompts with stream: this server streams one prompt per request (send the prompts without stream, or one request each)", n)
	}
	if req.LogProbs != nil {
		opts.LogProbs, opts.TopLogProbs = true, *req.LogProbs
		if err := checkOptions(opts, "logprobs"); err != nil { // the legacy logprobs is the number of alternatives
			return served{}, err
		}
	}
	prompts := make([][]int32, n)
	for i := range prompts {
		if prompts[i], err = s.promptIDs(m, req.Prompt, i, opts.MaxTokens); err != nil {
			return served{}, err
		}
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	if req.Stream {
		return s.completeStream(ctx, w, m, &req, opts, prompts[0], start)
	}
	choices, usage, err := s.completeAll(ctx, m, &req, opts, prompts, start)
	used := served{prompt: usage.PromptTokens, completion: usage.CompletionTokens}
	if err != nil {
		return used, s.runError(ctx, err, "prompt")
	}
	writeJSON(w, http.StatusOK, completionResponse{ID: newID("cmpl"), Object: "text_completion", Created: time.Now().Unix(),
		Model: s.cfg.ModelName, Choices: choices, Usage: usage})
	return used, nil
}

// promptIDs is prompt i's token ids, checked against the vocabulary and
// the context; an error names it as prompt[i] when there are several.
func (s *Server) promptIDs(m *modrun.Model, p prompt, i, maxTokens int) ([]int32, error) {
	name := "prompt"
	if p.count() > 1 {
		name = fmt.Sprintf("prompt[%d]", i)
	}
	var ids []int32
	if p.isIDs {
		if ids = p.ids[i]; len(ids) == 0 {
			return nil, badRequest("prompt", "invalid_value", "%s is an empty array of token ids", name)
		}
	} else {
		var err error
		if ids, err = m.Tokenize(p.texts[i], true); err != nil {
			return nil, badRequest("prompt", "invalid_value", "%s: %v", name, err)
		}
	}
	for j, id := range ids {
		if id < 0 || int(id) >= s.info.NVocab {
			return nil, badRequest("prompt", "invalid_value", "%s[%d]: token %d is outside the vocabulary [0, %d)", name, j, id, s.info.NVocab)
		}
	}
	if n := len(ids); n > s.info.ContextLen || (n == s.info.ContextLen && maxTokens > 0) {
		return nil, badRequest("prompt", "context_length_exceeded", "%s has %d tokens; the context length is %d", name, n, s.info.ContextLen)
	}
	return ids, nil
}

// completeAll runs the prompts concurrently: up to Config.Parallel
// workers, each holding a generation slot while it takes prompts in turn.
// The first worker waits in the queue as any request does (503 when it is
// full); the others only take slots free at the start, so an array never
// fails, nor waits, where one prompt would not. Usage sums the prompts'.
func (s *Server) completeAll(ctx context.Context, m *modrun.Model, req *completionRequest, opts modrun.GenerateOptions, prompts [][]int32, start time.Time) ([]completionChoice, *usageJSON, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	choices := make([]completionChoice, len(prompts))
	usages := make([]usageJSON, len(prompts))
	next := make(chan int, len(prompts))
	for i := range prompts {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for w := range min(len(prompts), s.cfg.Parallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			admit := s.admit
			if w > 0 { // the others' slots are a bonus (worker 0 alone does all): free ones only
				admit = s.tryAdmit
			}
			release, err := admit(ctx)
			if err != nil {
				if w == 0 {
					cancel(err)
				}
				return
			}
			defer release()
			for i := range next {
				o := opts
				if req.Seed == nil {
					o.Seed += uint64(i) // a fresh draw for each prompt, not n copies of one
				}
				c, u, err := s.completeOne(ctx, m, req, o, prompts[i], start)
				c.Index = i
				choices[i], usages[i] = c, u
				if err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	total := &usageJSON{}
	for _, u := range usages {
		total.PromptTokens += u.PromptTokens
		total.CompletionTokens += u.CompletionTokens
		total.PromptTokensDetails.CachedTokens += u.PromptTokensDetails.CachedTokens
	}
	total.TotalTokens = total.PromptTokens + total.CompletionTokens
	if err := context.Cause(ctx); err != nil {
		return nil, total, err
	}
	return choices, total, nil
}

// completeOne runs one prompt, not streamed: its choice and usage (the
// tokens counted so far when it fails).
func (s *Server) completeOne(ctx context.Context, m *modrun.Model, req *completionRequest, opts modrun.GenerateOptions, ids []int32, start time.Time) (completionChoice, usageJSON, error) {
	var echo string
	var err error
	if req.Echo {
		if echo, err = m.Detokenize(ids); err != nil {
			return completionChoice{}, usageJSON{}, badRequest("prompt", "invalid_value", "%v", err)
		}
	}
	var lps *completionLogProbs
	if req.Echo && req.LogProbs != nil {
		if lps, err = promptLogProbs(ctx, m, ids, opts.TopLogProbs); err != nil {
			return completionChoice{}, usageJSON{}, err
		}
	}
	g := &generation{metrics: s.metrics, start: start, hook: s.tokenHook}
	var res modrun.Result
	if opts.MaxTokens > 0 {
		opts.PromptTokens = ids
		sess := m.NewSession()
		defer sess.Close()
		if res, err = sess.Generate(ctx, "", opts, g.token); err != nil {
			g.count(0)
			return completionChoice{}, *g.usage(res), err
		}
	} else {
		g.prompt = len(ids)
		res.Stop = modrun.StopMaxTokens
	}
	reason, err := g.finish(res)
	if err != nil {
		return completionChoice{}, *g.usage(res), err
	}
	choice := completionChoice{Text: echo + g.out.text, FinishReason: &reason}
	if req.LogProbs != nil {
		choice.LogProbs = joinLPs(lps, completionLPs(m, g.out.tokens, true, len(echo)))
	}
	return choice, *g.usage(res), nil
}

// completeStream runs one prompt streamed: the echo (and its logprobs)
// with the first chunk, a chunk per piece, the finish, and the usage when
// stream_options asks.
func (s *Server) completeStream(ctx context.Context, w http.ResponseWriter, m *modrun.Model, req *completionRequest, opts modrun.GenerateOptions, ids []int32, start time.Time) (served, error) {
	var echo string
	var err error
	if req.Echo {
		if echo, err = m.Detokenize(ids); err != nil {
			return served{}, badRequest("prompt", "invalid_value", "%v", err)
		}
	}
	release, err := s.admit(ctx)
	if err != nil {
		return served{}, s.runError(ctx, err, "prompt")
	}
	defer release()

	var lps *completionLogProbs
	if req.Echo && req.LogProbs != nil {
		if lps, err = promptLogProbs(ctx, m, ids, opts.TopLogProbs); err != nil {
			return served{}, s.runError(ctx, err, "prompt")
		}
	}
	resp := completionResponse{ID: newID("cmpl"), Object: "text_completion", Created: time.Now().Unix(), Model: s.cfg.ModelName}
	g := &generation{metrics: s.metrics, start: start, hook: s.tokenHook}
	stream := newSSE(w)
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
	var res modrun.Result
	if opts.MaxTokens > 0 {
		opts.PromptTokens = ids
		sess := m.NewSession()
		defer sess.Close()
		res, err = sess.Generate(ctx, "", opts, g.token)
		if err != nil {
			return s.failed(g, stream, s.runError(ctx, err, "prompt"))
		}
	} else {
		g.prompt = len(ids)
		res.Stop = modrun.StopMaxTokens
	}
	reason, err := g.finish(res)
	if err != nil {
		return g.served(), s.runError(ctx, err, "prompt")
	}
	usage, used := g.usage(res), g.served()
	if g.newToks == 0 && echo != "" { // nothing generated: the echo still comes
		c := resp
		c.Choices = []completionChoice{{Text: echo, LogProbs: lps}}
		if stream.send(c) != nil {
			return used, nil
		}
	}
	c := resp
	c.Choices = []completionChoice{{Text: "", FinishReason: &reason}}
	c.MoD = s.modChunk(nil, g.takeLate(), false)
	if stream.send(c) != nil {
		return used, nil
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		c.Choices, c.Usage = []completionChoice{}, usage
		if stream.send(c) != nil {
			return used, nil
		}
	}
	_ = stream.done()
	return used, nil
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
