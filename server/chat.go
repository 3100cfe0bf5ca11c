package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/modrun/modrun"
)

// Responses, as OpenAI writes them.
type (
	usageJSON struct {
		PromptTokens        int                 `json:"prompt_tokens"`
		CompletionTokens    int                 `json:"completion_tokens"`
		TotalTokens         int                 `json:"total_tokens"`
		PromptTokensDetails promptTokensDetails `json:"prompt_tokens_details"`
	}
	// promptTokensDetails.CachedTokens: of the prompt's tokens, those the
	// prefix cache served instead of running them.
	promptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	}
	chatMessageJSON struct {
		Role      string         `json:"role,omitempty"`
		Content   *string        `json:"content,omitempty"`
		ToolCalls []toolCallJSON `json:"tool_calls,omitempty"`
	}
	chatChoice struct {
		Index        int              `json:"index"`
		Message      *chatMessageJSON `json:"message,omitempty"`
		Delta        *chatMessageJSON `json:"delta,omitempty"`
		LogProbs     *chatLogProbs    `json:"logprobs"`
		FinishReason *string          `json:"finish_reason"`
	}
	chatLogProbs struct {
		Content []chatLogProb `json:"content"`
	}
	chatLogProb struct {
		Token       string        `json:"token"`
		LogProb     float32       `json:"logprob"`
		Bytes       []int         `json:"bytes"`
		TopLogProbs []chatLogProb `json:"top_logprobs"`
	}
	chatResponse = response[chatChoice]
)

// response is a chat or completion response, or a streamed chunk of one:
// OpenAI's envelope around the endpoint's choices.
type response[C any] struct {
	ID      string     `json:"id"`
	Object  string     `json:"object"`
	Created int64      `json:"created"`
	Model   string     `json:"model"`
	Choices []C        `json:"choices"`
	Usage   *usageJSON `json:"usage,omitempty"`
	// MoD is modrun's extension: the tokens' routing (OpenAI's clients
	// ignore it).
	MoD *modChunk `json:"mod,omitempty"`
}

// modChunk carries tokens' routing decisions in a streamed chunk: Layers
// (the routed blocks, in the first chunk) and, per token, each routed
// layer's score and whether the token went through it.
type modChunk struct {
	Layers []int      `json:"layers,omitempty"`
	Tokens []modToken `json:"tokens"`
	// Routed is the routing of tokens sent in earlier chunks before they
	// ran (on a model whose requests share steps a token goes out as soon
	// as it is drawn): their positions, and routes.
	Routed []modRouted `json:"routed,omitempty"`
}

type modRouted struct {
	Pos    int        `json:"pos"`
	Routes []modRoute `json:"routes"`
}

type modToken struct {
	ID     int32      `json:"id"`
	Pos    int        `json:"pos"`
	Text   string     `json:"text"`
	Prompt bool       `json:"prompt,omitempty"`
	Routes []modRoute `json:"routes"` // [routed layers]; empty for a token not run yet
}

type modRoute struct {
	Score    float32 `json:"score"`
	Selected bool    `json:"selected"`
}

func modTokens(toks []modrun.Token) []modToken {
	out := make([]modToken, 0, len(toks))
	for _, t := range toks {
		out = append(out, modToken{ID: t.ID, Pos: t.Pos, Text: t.Text, Prompt: t.Prompt, Routes: modRoutes(t.Routes)})
	}
	return out
}

func modRoutes(rs []modrun.Route) []modRoute {
	out := make([]modRoute, 0, len(rs))
	for _, r := range rs {
		out = append(out, modRoute{Score: r.Score, Selected: r.Selected})
	}
	return out
}

// chatRoles are the roles the templates render; "developer" is OpenAI's
// newer name for system.
var chatRoles = map[string]string{"system": modrun.RoleSystem, "developer": modrun.RoleSystem, "user": modrun.RoleUser, "assistant": modrun.RoleAssistant}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request, m *modrun.Model) (served, error) {
	start := time.Now()
	var req chatRequest
	if err := decode(r.Body, &req); err != nil {
		return served{}, err
	}
	if err := s.checkModel(req.Model); err != nil {
		return served{}, err
	}
	opts, err := req.genOptions(s.info, 0, 1) // OpenAI's chat refuses max_tokens 0
	if err != nil {
		return served{}, err
	}
	if err := req.applyFormat(&opts); err != nil {
		return served{}, err
	}
	if len(req.Messages) == 0 {
		return served{}, badRequest("messages", "invalid_value", "messages is empty: give at least one message")
	}
	msgs := make([]modrun.Message, len(req.Messages))
	for i, msg := range req.Messages {
		role, ok := chatRoles[msg.Role]
		if !ok && msg.Role != "tool" { // tool messages: toolMessages below
			return served{}, badRequest(fmt.Sprintf("messages[%d].role", i), "invalid_value", "messages[%d].role %q: the chat template knows system, user and assistant", i, msg.Role)
		}
		msgs[i] = modrun.Message{Role: role, Content: string(msg.Content)}
	}
	if req.TopLogProbs != nil {
		opts.TopLogProbs = *req.TopLogProbs
		if err := checkOptions(opts, "top_logprobs"); err != nil {
			return served{}, err
		}
		if !req.LogProbs { // OpenAI's rule; the API fills TopLogProbs only with LogProbs too
			return served{}, badRequest("top_logprobs", "invalid_value", "top_logprobs needs logprobs: true")
		}
	}
	opts.LogProbs = req.LogProbs
	chat, err := m.NewChat(s.cfg.ChatTemplate)
	if err != nil {
		return served{}, badRequest("messages", "no_chat_template", "%v (start the server with --chat-template NAME)", err)
	}
	defer chat.Close()
	tools, err := req.planTools(chat.Template())
	if err != nil {
		return served{}, err
	}
	if len(req.Tools) > 0 || usesTools(req.Messages) {
		format, ok := toolFormats[chat.Template()]
		if !ok {
			return served{}, badRequest("messages", "unsupported_template", "tool calls and tool messages: the chat template %q has no tool-call format (llama3 and chatml have)", chat.Template())
		}
		if msgs, err = toolMessages(format, req.Tools, req.Messages); err != nil {
			return served{}, err
		}
	}
	if tools != nil {
		if opts.Grammar, err = tools.grammar(); err != nil {
			return served{}, err
		}
	}

	ctx, cancel := s.requestContext(r)
	defer cancel()
	release, err := s.admit(ctx)
	if err != nil {
		return served{}, s.runError(ctx, err, "messages")
	}
	defer release()

	resp := chatResponse{ID: newID("chatcmpl"), Object: "chat.completion", Created: time.Now().Unix(), Model: s.cfg.ModelName}
	g := &generation{metrics: s.metrics, start: start, hook: s.tokenHook}
	var promptToks []modrun.Token
	g.onPrompt = func(t modrun.Token) { promptToks = append(promptToks, t) }
	var stream *sse
	var calls *callParser // the streamed answer's tool calls
	if req.Stream {
		stream = newSSE(w)
		opts.OnRouted = g.routed // each token out once drawn
		first := true
		g.emit = func(p piece) error {
			if first {
				first = false
				if err := stream.send(s.chatChunk(resp, &chatMessageJSON{Role: modrun.RoleAssistant, Content: ptr("")}, nil, nil, promptToks, nil, true)); err != nil {
					return err
				}
			}
			return stream.send(s.chatChunk(resp, &chatMessageJSON{Content: ptr(p.text)}, s.chatLogProbs(m, p.tokens, req.LogProbs), nil, p.tokens, p.routed, false))
		}
		if tools != nil {
			g.emit, calls = tools.stream(g.emit, func(delta *chatMessageJSON, p piece) error {
				if first {
					first = false
					delta.Role = modrun.RoleAssistant
				}
				if delta.Role == "" && len(delta.ToolCalls) == 0 && len(s.info.RoutedLayers) == 0 {
					return nil // a call's markup: nothing to say (a MoD model's chunk carries the tokens' routing)
				}
				return stream.send(s.chatChunk(resp, delta, s.chatLogProbs(m, p.tokens, req.LogProbs), nil, p.tokens, p.routed, false))
			})
		}
	}
	res, err := chat.Reply(ctx, msgs, modrun.ChatOptions{GenerateOptions: opts}, g.token)
	if err != nil && g.prompt == 0 && ctx.Err() == nil {
		if e := s.runError(ctx, err, "messages"); e != err {
			return served{prompt: g.prompt, completion: g.newToks}, e
		}
		return served{prompt: g.prompt, completion: g.newToks}, badRequest("messages", "invalid_value", "%v", err) // the template refused the conversation
	}
	if err != nil {
		return s.failed(g, stream, s.runError(ctx, err, "messages"))
	}
	reason, err := g.finish(res.Result)
	if err != nil {
		return g.served(), s.runError(ctx, err, "messages")
	}
	usage, used := g.usage(res.Result), g.served()
	if calls != nil && len(calls.calls) > 0 && reason == "stop" {
		reason = "tool_calls"
	}
	if stream == nil {
		text := g.out.text
		msg := &chatMessageJSON{Role: modrun.RoleAssistant, Content: &text}
		if tools != nil {
			if msg.ToolCalls = tools.answer(text); len(msg.ToolCalls) > 0 {
				msg.Content = nil
				if reason == "stop" {
					reason = "tool_calls"
				}
			}
		}
		resp.Choices = []chatChoice{{Message: msg,
			LogProbs: s.chatLogProbs(m, g.out.tokens, req.LogProbs), FinishReason: &reason}}
		resp.Usage = usage
		writeJSON(w, http.StatusOK, resp)
		return used, nil
	}
	if g.newToks == 0 { // nothing streamed: the role chunk still comes
		if err := stream.send(s.chatChunk(resp, &chatMessageJSON{Role: modrun.RoleAssistant, Content: ptr("")}, nil, nil, promptToks, nil, true)); err != nil {
			return used, nil
		}
	}
	if stream.send(s.chatChunk(resp, &chatMessageJSON{}, nil, &reason, nil, g.takeLate(), false)) != nil {
		return used, nil
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		last := resp
		last.Object, last.Choices, last.Usage = "chat.completion.chunk", []chatChoice{}, usage
		if stream.send(last) != nil {
			return used, nil
		}
	}
	_ = stream.done()
	return used, nil
}

// chatChunk is one streamed chunk: a delta, its tokens' log-probabilities
// and routing, or the finish reason.
func (s *Server) chatChunk(base chatResponse, delta *chatMessageJSON, lp *chatLogProbs, finish *string, toks, late []modrun.Token, first bool) chatResponse {
	c := base
	c.Object = "chat.completion.chunk"
	c.Choices = []chatChoice{{Delta: delta, LogProbs: lp, FinishReason: finish}}
	c.MoD = s.modChunk(toks, late, first)
	return c
}

// modChunk is the routing of toks for a chunk, and of the tokens sent
// before that ran since (late); nil for a dense model.
func (s *Server) modChunk(toks, late []modrun.Token, first bool) *modChunk {
	if len(s.info.RoutedLayers) == 0 || (len(toks) == 0 && len(late) == 0 && !first) {
		return nil
	}
	c := &modChunk{Tokens: modTokens(toks)}
	if first {
		c.Layers = s.info.RoutedLayers
	}
	for _, t := range late {
		c.Routed = append(c.Routed, modRouted{Pos: t.Pos, Routes: modRoutes(t.Routes)})
	}
	return c
}

func (s *Server) chatLogProbs(m *modrun.Model, toks []modrun.Token, want bool) *chatLogProbs {
	if !want {
		return nil
	}
	out := &chatLogProbs{Content: []chatLogProb{}}
	for _, t := range toks {
		lp := tokenLogProb(m, t.ID, t.LogProb)
		lp.TopLogProbs = []chatLogProb{}
		for _, alt := range t.TopLogProbs {
			lp.TopLogProbs = append(lp.TopLogProbs, tokenLogProb(m, alt.ID, alt.LogProb))
		}
		out.Content = append(out.Content, lp)
	}
	return out
}

func tokenLogProb(m *modrun.Model, id int32, lp float32) chatLogProb {
	b, _ := m.TokenText(id) // ids the model drew are in its vocabulary
	bs := make([]int, len(b))
	for i, c := range b {
		bs[i] = int(c)
	}
	return chatLogProb{Token: string(b), LogProb: lp, Bytes: bs}
}

func ptr[T any](v T) *T { return &v }

// newID is a response id: prefix, the time, and a counter.
func newID(prefix string) string {
	return fmt.Sprintf("%s-%x%04x", prefix, time.Now().UnixNano(), idCounter.Add(1)&0xffff)
}
