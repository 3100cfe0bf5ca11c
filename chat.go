package modrun

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/modrun/modrun/tokenizer"
)

// Message is one turn of a conversation: Role is "system", "user" or
// "assistant".
type Message = tokenizer.Message

// The roles of a Message.
const (
	RoleSystem    = tokenizer.RoleSystem
	RoleUser      = tokenizer.RoleUser
	RoleAssistant = tokenizer.RoleAssistant
	RoleIPython   = tokenizer.RoleIPython // a tool's result, on the llama3 template
)

// ChatTemplates lists the chat template names NewChat takes.
func ChatTemplates() []string { return tokenizer.ChatTemplateNames() }

// Chat is a conversation with a chat model on one Session. Each Reply gets
// the whole conversation so far; the session keeps its KV cache from turn
// to turn, so only what was added since the last reply (the new messages,
// rendered by the chat template) runs through the model. When a turn would
// not fit in the context, the oldest turns are dropped (the system message
// stays) and the rest runs again: see ChatResult.Dropped. A Chat is used
// by one goroutine at a time.
//
// The template's markup is encoded as control tokens; the content of the
// messages is always plain text ("<|eot_id|>" typed by a user is text, not
// the end of a turn), the system message's too unless
// ChatOptions.SpecialSystem says otherwise.
type Chat struct {
	s    *Session
	tmpl tokenizer.ChatTemplate
	// held is the conversation the session's sequence holds: the messages
	// of the last Reply and its answer, of which the dropped messages after
	// the leading system ones were left out (the context was full). stale
	// says the sequence no longer matches it (a turn failed half-way): the
	// next Reply starts afresh.
	held    []Message
	dropped int
	stale   bool
}

// NewChat starts a conversation on a new session. template names the chat
// template (ChatTemplates lists them); "" takes the one the model file
// carries (tokenizer.chat_template), recognised by its family.
func (m *Model) NewChat(template string) (*Chat, error) {
	tmpl, err := tokenizer.ChatTemplateFromGGUF(m.m.File, m.tok, template)
	if err != nil {
		return nil, fmt.Errorf("modrun: %s: %w", m.info.Path, err)
	}
	return &Chat{s: m.NewSession(), tmpl: tmpl}, nil
}

// Template is the name of the chat template in use.
func (c *Chat) Template() string { return c.tmpl.Name }

// ChatOptions control one Reply.
type ChatOptions struct {
	GenerateOptions
	// OnPrompt, when set, receives the text this turn feeds the model (the
	// template's rendering of the new messages, special tokens written
	// out) before the model runs it.
	OnPrompt func(prompt string)
	// OnShift, when set, is told before the turn runs that the context was
	// full and the oldest dropped messages were left out (ChatResult.Dropped).
	OnShift func(dropped int)
	// SpecialSystem reads special-token text in the system message, such
	// as "<|eot_id|>", as those tokens. The other messages' content is
	// plain text always. (GenerateOptions.ParseSpecial has no effect here.)
	SpecialSystem bool
}

// ChatResult is what one Reply did.
type ChatResult struct {
	Result
	Reply  string // the assistant's answer, as text
	Prompt string // the text this turn fed (see ChatOptions.OnPrompt)
	// Dropped is how many messages at the start of the conversation, after
	// its leading system messages, the session no longer holds. Shifted
	// says this turn dropped them: it would not have fitted in the context
	// with room for an answer, so the oldest messages were dropped (a
	// question with its answer at a time) until the rest took at most half
	// the context, and the system messages and the most recent turns ran
	// again from the start.
	Dropped int
	Shifted bool
}

// ErrTurnTooLong is returned by Reply when the system messages and the
// last message alone do not fit in the context. The chat is unchanged: the
// next Reply goes on from the conversation it held.
var ErrTurnTooLong = errors.New("modrun: chat: the turn does not fit in the context")

// Reply answers the conversation msgs (usually ending with a user message)
// and streams the answer's tokens to fn, as Session.Generate does (prompt
// tokens first, with Token.Prompt set). Pass the conversation back next
// time with the answer appended as an assistant message and a new user
// message after it: when msgs begins with the conversation the session
// holds, only the rest is fed. Any other msgs start the session afresh.
//
// The answer ends at the model's end of turn (or EOS), opts.MaxTokens,
// one of opts.Stop (not part of the answer), the context length, or when
// ctx is done; it is returned whole (as far as it got) in ChatResult.Reply.
func (c *Chat) Reply(ctx context.Context, msgs []Message, opts ChatOptions, fn func(Token) error) (ChatResult, error) {
	if len(msgs) == 0 {
		return ChatResult{}, errors.New("modrun: chat: no messages")
	}
	turn, err := c.plan(msgs, opts)
	if err != nil {
		return ChatResult{}, err
	}
	if turn.fresh {
		if err := c.s.Reset(); err != nil {
			return ChatResult{}, err
		}
		c.held, c.dropped, c.stale = nil, 0, false
	}
	if turn.fresh && turn.dropped > 0 && opts.OnShift != nil {
		opts.OnShift(turn.dropped)
	}
	if opts.OnPrompt != nil {
		opts.OnPrompt(turn.prompt.Text)
	}
	gen := opts.GenerateOptions
	gen.ParseSpecial = true
	gen.plain = turn.prompt.PlainSpans(opts.SpecialSystem)
	var reply strings.Builder
	promptTokens := 0
	res, err := c.s.Generate(ctx, turn.prompt.Text, gen, func(tk Token) error {
		if tk.Prompt {
			promptTokens++
		} else {
			reply.WriteString(tk.Text)
		}
		if fn == nil {
			return nil
		}
		return fn(tk)
	})
	reply.WriteString(res.Tail)
	out := ChatResult{Result: res, Reply: reply.String(), Prompt: turn.prompt.Text, Dropped: turn.dropped, Shifted: turn.fresh && turn.dropped > 0}
	if promptTokens < turn.tokens || res.Stop == StopString {
		// The prompt did not run whole, or the session holds what was
		// drawn past a stop string: its sequence is not the conversation
		// any more, and the next Reply runs it afresh.
		c.stale = true
		return out, err
	}
	c.held, c.dropped = append(slices.Clone(msgs), Message{Role: RoleAssistant, Content: out.Reply}), turn.dropped
	return out, err
}

// chatTurn is what one Reply feeds: the prompt, its length in tokens,
// whether the session starts afresh for it, and the messages left out.
type chatTurn struct {
	prompt  tokenizer.ChatPrompt
	tokens  int
	fresh   bool
	dropped int
}

// plan is the turn that brings the session to msgs: the rest after what
// it holds, or when that does not fit with room for an answer, msgs with
// the fewest oldest turns left out that do, from the start.
func (c *Chat) plan(msgs []Message, opts ChatOptions) (chatTurn, error) {
	ctxLen := c.s.m.ctxLen
	room := ctxLen / 4 // room kept for the answer: MaxTokens, at most a quarter of the context
	if opts.MaxTokens > 0 {
		room = min(room, opts.MaxTokens)
	}
	start := 0 // messages already left out: a long chat does not render its whole past again
	if c.continues(msgs) {
		start = c.dropped
		have, err := c.s.Tokens()
		if err != nil {
			return chatTurn{}, err
		}
		turn, err := c.rest(msgs, opts.SpecialSystem)
		if err != nil {
			return chatTurn{}, err
		}
		if !turn.fresh && len(have)+turn.tokens+room <= ctxLen {
			return turn, nil
		}
	}
	system := 0
	for system < len(msgs)-1 && msgs[system].Role == RoleSystem {
		system++
	}
	// From the start, the whole conversation if it fits with room for the
	// answer; if not, the oldest turns are dropped until what is kept takes
	// at most half the context, so that the next turns go on without
	// running it all again (llama.cpp's context shift discards half too).
	var last chatTurn
	for drop := start; system+drop < len(msgs); drop = nextDrop(msgs, system, drop) {
		turn, err := c.whole(msgs, system, drop, opts.SpecialSystem)
		if err != nil {
			return chatTurn{}, err
		}
		if (drop == start && turn.tokens+room <= ctxLen) || turn.tokens <= ctxLen/2 {
			return turn, nil
		}
		last = turn
	}
	if last.tokens <= ctxLen { // it fits, with less room for the answer
		return last, nil
	}
	return chatTurn{}, fmt.Errorf("%w: with the system message it has %d tokens, and the context length is %d", ErrTurnTooLong, last.tokens, ctxLen)
}

// nextDrop is the next count of messages to leave out after the system
// ones: through the next user message's answer, so that what is kept
// starts with a user message; the last message always stays.
func nextDrop(msgs []Message, system, drop int) int {
	drop++
	for system+drop < len(msgs)-1 && msgs[system+drop].Role != RoleUser {
		drop++
	}
	if system+drop >= len(msgs) {
		return len(msgs) // done
	}
	return drop
}

// continues says whether msgs goes on from the conversation the session
// holds.
func (c *Chat) continues(msgs []Message) bool {
	n := len(c.held)
	return !c.stale && n > 0 && len(msgs) > n && slices.Equal(msgs[:n], c.held)
}

// kept is msgs without the drop messages after the first system ones.
func kept(msgs []Message, system, drop int) []Message {
	return append(slices.Clone(msgs[:system]), msgs[system+drop:]...)
}

// whole renders msgs, drop messages left out after the system ones, for a
// fresh session.
func (c *Chat) whole(msgs []Message, system, drop int, specialSystem bool) (chatTurn, error) {
	p, err := c.tmpl.RenderPrompt(kept(msgs, system, drop), true)
	if err != nil {
		return chatTurn{}, fmt.Errorf("modrun: chat: %w", err)
	}
	return c.encoded(chatTurn{prompt: p, fresh: true, dropped: drop}, specialSystem)
}

// encoded counts the turn's tokens.
func (c *Chat) encoded(turn chatTurn, specialSystem bool) (chatTurn, error) {
	ids, err := c.s.m.tok.EncodeWith(turn.prompt.Text, turn.prompt.Options(turn.fresh, specialSystem))
	if err != nil {
		return chatTurn{}, fmt.Errorf("modrun: chat prompt: %w", err)
	}
	turn.tokens = len(ids)
	return turn, nil
}

// rest is the turn that brings the session's sequence from the held
// conversation to msgs plus the start of the assistant's answer; it is
// fresh when the template does not render the conversation incrementally.
func (c *Chat) rest(msgs []Message, specialSystem bool) (chatTurn, error) {
	system := 0
	for system < len(c.held) && c.held[system].Role == RoleSystem {
		system++
	}
	if c.dropped == 0 {
		system = 0
	}
	full, err := c.tmpl.RenderPrompt(kept(msgs, system, c.dropped), true)
	if err != nil {
		return chatTurn{}, fmt.Errorf("modrun: chat: %w", err)
	}
	// The sequence holds the rendering of held up to its last answer's
	// text, without what the template writes after an answer (the
	// end-of-turn token the model stopped at was never run).
	held := kept(c.held, system, c.dropped)
	before, err := c.tmpl.Render(held, false)
	if err != nil || !strings.HasPrefix(full.Text, before) {
		return chatTurn{fresh: true}, nil
	}
	closing, err := c.answerClosing(held)
	if err != nil {
		return chatTurn{fresh: true}, nil
	}
	return c.encoded(chatTurn{prompt: full.Slice(len(before)).Prepend(closing), dropped: c.dropped}, specialSystem)
}

// answerClosing is what the template writes after an assistant message's
// content (" </s>" for Llama 2, "<|eot_id|>" for Llama 3), found by
// rendering a marker in place of held's last answer.
func (c *Chat) answerClosing(held []Message) (string, error) {
	const marker = "\x00modrun-answer\x00"
	msgs := append(slices.Clone(held[:len(held)-1]), Message{Role: RoleAssistant, Content: marker})
	text, err := c.tmpl.Render(msgs, false)
	if err != nil {
		return "", err
	}
	i := strings.LastIndex(text, marker)
	if i < 0 {
		return "", errors.New("modrun: chat template drops the answer")
	}
	return text[i+len(marker):], nil
}

// Reset forgets the conversation; the next Reply starts afresh.
func (c *Chat) Reset() error {
	if err := c.s.Reset(); err != nil {
		return err
	}
	c.held, c.dropped, c.stale = nil, 0, false
	return nil
}

// Tokens is the session's sequence, as Session.Tokens.
func (c *Chat) Tokens() ([]int32, error) { return c.s.Tokens() }

// Close ends the chat's session.
func (c *Chat) Close() error { return c.s.Close() }
