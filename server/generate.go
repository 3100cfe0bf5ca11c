package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/modrun/modrun"
)

// piece is text ready to go out and the new tokens it comes from (the last
// one's text cut short by a stop string; Result.Tail has none).
type piece struct {
	text   string
	tokens []modrun.Token
	routed []modrun.Token // the routing of tokens sent before, once they ran (Pos and Routes)
}

// generation is one request's run of the model, shared by chat and
// completions: it counts tokens and hands each piece to emit as it comes.
// The request's stop strings are the API's (GenerateOptions.Stop): it
// keeps them, and what may begin one, from the tokens until it is clear.
type generation struct {
	emit     func(piece) error  // nil: collect in out
	onPrompt func(modrun.Token) // each prompt token, for the routing map
	metrics  *metrics
	start    time.Time // the request's arrival, for time to first token
	hook     func()    // Server.tokenHook

	late    []modrun.Token // the routing of tokens sent before it was known
	out     piece          // everything emitted, when emit is nil
	prompt  int
	newToks int
	last    time.Time
	counted bool // in /metrics (count)
}

// token is the API's callback: it runs on the generating goroutine.
func (g *generation) token(t modrun.Token) error {
	g.metrics.routes(t.Routes)
	g.metrics.kv(t.Pos)
	if t.Prompt {
		g.prompt++
		if g.onPrompt != nil {
			g.onPrompt(t)
		}
		return nil
	}
	now := time.Now()
	if g.newToks == 0 {
		g.metrics.ttft.Observe(now.Sub(g.start).Seconds())
	} else {
		g.metrics.interToken.Observe(now.Sub(g.last).Seconds())
	}
	g.last = now
	g.newToks++
	err := g.send(piece{text: t.Text, tokens: []modrun.Token{t}})
	if g.hook != nil {
		g.hook()
	}
	return err
}

// routed is the API's OnRouted: a new token's routing once it has run
// (the token went out before, as soon as it was drawn). It goes with the
// next piece.
func (g *generation) routed(pos int, routes []modrun.Route) {
	g.metrics.routes(routes)
	g.late = append(g.late, modrun.Token{Pos: pos, Routes: routes})
}

// takeLate is the routing owed for tokens already sent, for a last chunk.
func (g *generation) takeLate() []modrun.Token {
	late := g.late
	g.late = nil
	return late
}

func (g *generation) send(p piece) error {
	if g.emit == nil {
		g.out.text += p.text
		g.out.tokens = append(g.out.tokens, p.tokens...)
		return nil
	}
	p.routed = g.takeLate()
	return g.emit(p)
}

// finish sends what is left after the API returned (res.Tail) and says
// why the generation ended, as OpenAI's finish_reason.
func (g *generation) finish(res modrun.Result) (string, error) {
	if res.Tail != "" {
		if err := g.send(piece{text: res.Tail}); err != nil {
			return "", err
		}
	}
	// The tokens drawn past a stop string never came to token(); they
	// were generated all the same.
	g.newToks = max(g.newToks, res.Tokens)
	g.count(res.CachedTokens)
	return finishReason(res.Stop), nil
}

// finishReason is OpenAI's finish_reason for why a generation ended: "stop"
// at the model's end or a stop string, "length" at max_tokens or the
// context's end.
func finishReason(why modrun.StopReason) string {
	switch why {
	case modrun.StopEOS, modrun.StopString:
		return "stop"
	default:
		return "length"
	}
}

// count adds the generation's tokens to /metrics, once: when it finished,
// or when it failed (a client gone mid-stream ran its tokens all the same).
func (g *generation) count(cached int) {
	if !g.counted {
		g.counted = true
		g.metrics.tokens(g.prompt, g.newToks, cached)
	}
}

// served is the request's tokens so far, for its log line.
func (g *generation) served() served { return served{prompt: g.prompt, completion: g.newToks} }

// usage is the request's usage object once res is in.
func (g *generation) usage(res modrun.Result) *usageJSON {
	return &usageJSON{PromptTokens: g.prompt, CompletionTokens: g.newToks, TotalTokens: g.prompt + g.newToks,
		PromptTokensDetails: promptTokensDetails{CachedTokens: res.CachedTokens}}
}

// runError turns the API's error of a run into the request's: a prompt
// that does not fit is the client's (400, naming param), a client gone or
// a shutdown is errClientGone, the rest a 500.
func (s *Server) runError(ctx context.Context, err error, param string) error {
	var pl *modrun.PromptLengthError
	switch {
	case errors.As(err, &pl), errors.Is(err, modrun.ErrTurnTooLong):
		return badRequest(param, "context_length_exceeded", "%s: %s", param, strings.TrimPrefix(err.Error(), "modrun: "))
	case s.stop.Err() != nil:
		return &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down",
			Message: "the server is shutting down: the request was cancelled after the grace period (--shutdown-timeout)"}
	case ctx.Err() != nil, errors.Is(err, errClientGone):
		return errClientGone
	}
	return err
}

// failed ends a request whose run failed after it began: the tokens so
// far go to its log line, and a stream already started gets an error
// event (its status is 200 already; the log line says 499 when the client
// went away, 503 when the shutdown cancelled it).
func (s *Server) failed(g *generation, stream *sse, err error) (served, error) {
	used := g.served()
	g.count(0)
	if stream == nil || !stream.started {
		return used, err
	}
	used.status = http.StatusInternalServerError
	var ae *apiError
	switch {
	case errors.Is(err, errClientGone):
		used.status = 499
	case errors.As(err, &ae):
		used.status = ae.Status
	}
	stream.failed(err)
	return used, nil
}
