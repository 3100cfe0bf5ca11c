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
)

// ChatTemplates lists the chat template names NewChat takes.
func ChatTemplates() []string { return tokenizer.ChatTemplateNames() }

// Chat is a conversation with a chat model on one Session. Each Reply gets
// the whole conversation so far; the session keeps its KV cache from turn
// to turn, so only what was added since the last reply (the new messages,
// rendered by the chat template) runs through the model.
type Chat struct {
	s    *Session
	tmpl tokenizer.ChatTemplate
	// held is the conversation the session's sequence holds: the messages
	// of the last Reply and its answer. stale says the sequence no longer
	// matches it (a turn failed half-way): the next Reply starts afresh.
	held  []Message
	stale bool
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
}

// ChatResult is what one Reply did.
type ChatResult struct {
	Result
	Reply  string // the assistant's answer, as text
	Prompt string // the text this turn fed (see ChatOptions.OnPrompt)
}

// Reply answers the conversation msgs (usually ending with a user message)
// and streams the answer's tokens to fn, as Session.Generate does (prompt
// tokens first, with Token.Prompt set). Pass the conversation back next
// time with the answer appended as an assistant message and a new user
// message after it: when msgs begins with the conversation the session
// holds, only the rest is fed. Any other msgs start the session afresh.
//
// The answer ends at the model's end of turn (or EOS), opts.MaxTokens,
// the context length, or when ctx is done; it is returned whole (as far as
// it got) in ChatResult.Reply.
func (c *Chat) Reply(ctx context.Context, msgs []Message, opts ChatOptions, fn func(Token) error) (ChatResult, error) {
	if len(msgs) == 0 {
		return ChatResult{}, errors.New("modrun: chat: no messages")
	}
	prompt, fresh, err := c.nextPrompt(msgs)
	if err != nil {
		return ChatResult{}, err
	}
	if fresh {
		if err := c.s.Reset(); err != nil {
			return ChatResult{}, err
		}
		c.held, c.stale = nil, false
	}
	if opts.OnPrompt != nil {
		opts.OnPrompt(prompt)
	}
	// A fresh session adds BOS itself when the vocabulary asks for it:
	// drop the template's own, or the sequence would start with two.
	text := prompt
	if fresh && c.tmpl.BOS != "" && c.s.m.tok.AddBOS() {
		text = strings.TrimPrefix(text, c.tmpl.BOS)
	}
	want, err := c.s.m.tok.EncodeWith(text, tokenizer.EncodeOptions{AddSpecial: fresh, ParseSpecial: true})
	if err != nil {
		return ChatResult{}, fmt.Errorf("modrun: chat prompt: %w", err)
	}
	gen := opts.GenerateOptions
	gen.ParseSpecial = true
	var reply strings.Builder
	promptTokens := 0
	res, err := c.s.Generate(ctx, text, gen, func(tk Token) error {
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
	out := ChatResult{Result: res, Reply: reply.String(), Prompt: prompt}
	if promptTokens < len(want) {
		// The prompt did not run whole: the session's sequence is not
		// the conversation any more.
		c.stale = true
		return out, err
	}
	c.held = append(slices.Clone(msgs), Message{Role: RoleAssistant, Content: out.Reply})
	return out, err
}

// nextPrompt is the text that brings the session's sequence to msgs plus
// the start of the assistant's answer, and whether the session must start
// afresh for it.
func (c *Chat) nextPrompt(msgs []Message) (string, bool, error) {
	full, err := c.tmpl.Render(msgs, true)
	if err != nil {
		return "", false, fmt.Errorf("modrun: chat: %w", err)
	}
	n := len(c.held)
	if c.stale || n == 0 || len(msgs) <= n || !slices.Equal(msgs[:n], c.held) {
		return full, true, nil
	}
	// The sequence holds the rendering of held up to its last answer's
	// text, without what the template writes after an answer (the
	// end-of-turn token the model stopped at was never run).
	before, err := c.tmpl.Render(c.held, false)
	if err != nil || !strings.HasPrefix(full, before) {
		return full, true, nil // the template does not render the conversation incrementally
	}
	closing, err := c.answerClosing()
	if err != nil {
		return full, true, nil
	}
	return closing + full[len(before):], false, nil
}

// answerClosing is what the template writes after an assistant message's
// content (" </s>" for Llama 2, "<|eot_id|>" for Llama 3), found by
// rendering a marker answer.
func (c *Chat) answerClosing() (string, error) {
	const marker = "\x00modrun-answer\x00"
	msgs := append(slices.Clone(c.held[:len(c.held)-1]), Message{Role: RoleAssistant, Content: marker})
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
	c.held, c.stale = nil, false
	return nil
}

// Tokens is the session's sequence, as Session.Tokens.
func (c *Chat) Tokens() ([]int32, error) { return c.s.Tokens() }

// Close ends the chat's session.
func (c *Chat) Close() error { return c.s.Close() }
