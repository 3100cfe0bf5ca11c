package tokenizer

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/modrun/modrun/gguf"
)

// Chat templates. A GGUF file carries its model's Jinja chat template in
// tokenizer.chat_template; rather than run Jinja, modrun recognises the
// common families and renders each as its published template does, with
// Hugging Face's settings (trim_blocks, lstrip_blocks): the same text,
// bos_token and eos_token included. The tests compare with text rendered by
// Python's jinja2 from those templates, and with llama.cpp's expected
// strings (tests/test-chat-template.cpp).

// KeyChatTemplate is the GGUF key of a model's Jinja chat template.
const KeyChatTemplate = "tokenizer.chat_template"

// The roles a Message may have.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	// RoleIPython is Llama 3.1's role of a tool's result (the llama3
	// family only).
	RoleIPython = "ipython"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string // RoleSystem, RoleUser or RoleAssistant
	Content string
}

// ChatTemplate renders a conversation as one family's template does.
type ChatTemplate struct {
	Name string // one of ChatTemplateNames
	// BOS and EOS are the text of bos_token and eos_token, which some
	// templates write into the prompt ("<s>", "<|begin_of_text|>"); encode
	// the prompt with EncodeOptions.ParseSpecial so they become tokens.
	BOS, EOS string
	render   func(c ChatTemplate, p *promptBuilder, msgs []Message, addGenerationPrompt bool) error
}

// ChatPrompt is a rendered conversation: its Text, and where in it each
// message's content lies. Encode it with ChatPrompt.Options: the
// template's markup becomes control tokens, the content stays plain text,
// so "<|eot_id|>" typed by a user is never the end of a turn.
type ChatPrompt struct {
	Text    string
	Content []MessageSpan // in order, apart
}

// MessageSpan is where the content of a message with Role lies in a
// ChatPrompt's text.
type MessageSpan struct {
	Span
	Role string
}

// PlainSpans are the content spans that must stay plain text: all of them,
// or with specialSystem all but the system message's (a system prompt the
// caller wrote, and trusts, may hold control tokens).
func (p ChatPrompt) PlainSpans(specialSystem bool) []Span {
	var out []Span
	for _, c := range p.Content {
		if !(specialSystem && c.Role == RoleSystem) {
			out = append(out, c.Span)
		}
	}
	return out
}

// Options are the encode options for the prompt: control tokens parsed in
// the markup only (see PlainSpans), BOS added with addSpecial.
func (p ChatPrompt) Options(addSpecial, specialSystem bool) EncodeOptions {
	return EncodeOptions{AddSpecial: addSpecial, ParseSpecial: true, Plain: p.PlainSpans(specialSystem)}
}

// Slice is the prompt's text from byte from on, with the spans that lie
// there (cut at from), shifted to match.
func (p ChatPrompt) Slice(from int) ChatPrompt {
	out := ChatPrompt{Text: p.Text[from:]}
	for _, c := range p.Content {
		if c.End <= from {
			continue
		}
		c.Start = max(c.Start, from) - from
		c.End -= from
		out.Content = append(out.Content, c)
	}
	return out
}

// Prepend is the prompt with markup text before it.
func (p ChatPrompt) Prepend(markup string) ChatPrompt {
	out := ChatPrompt{Text: markup + p.Text}
	for _, c := range p.Content {
		c.Start += len(markup)
		c.End += len(markup)
		out.Content = append(out.Content, c)
	}
	return out
}

// promptBuilder writes a ChatPrompt: markup as it is, content with its span.
type promptBuilder struct {
	b     strings.Builder
	spans []MessageSpan
}

func (p *promptBuilder) markup(s string) { p.b.WriteString(s) }

func (p *promptBuilder) content(role, s string) {
	start := p.b.Len()
	p.b.WriteString(s)
	if len(s) > 0 {
		p.spans = append(p.spans, MessageSpan{Span{start, p.b.Len()}, role})
	}
}

// part is a stretch of a rendering: content of a message with role, or
// markup when role is "".
type part struct{ role, text string }

// stripped writes parts as pyStrip of their concatenation would read, each
// part keeping its kind.
func (p *promptBuilder) stripped(parts ...part) {
	isSpace := func(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1C && r <= 0x1F) }
	for i := range parts { // leading whitespace, over empty parts
		parts[i].text = strings.TrimLeftFunc(parts[i].text, isSpace)
		if parts[i].text != "" {
			break
		}
	}
	for i := len(parts) - 1; i >= 0; i-- {
		parts[i].text = strings.TrimRightFunc(parts[i].text, isSpace)
		if parts[i].text != "" {
			break
		}
	}
	for _, pt := range parts {
		if pt.role == "" {
			p.markup(pt.text)
		} else {
			p.content(pt.role, pt.text)
		}
	}
}

// chatFamily is one template family: how to recognise its Jinja text and
// how to render it.
type chatFamily struct {
	name   string
	about  string
	detect func(jinja string) bool
	render func(c ChatTemplate, p *promptBuilder, msgs []Message, addGenerationPrompt bool) error
}

// chatFamilies are tried in order on a file's template: ChatML's and Llama
// 3's markers are unambiguous, "[INST]" also appears in Mistral's templates
// (which render close to Llama 2's), and Zephyr's <|user|> comes last.
var chatFamilies = []chatFamily{
	{"chatml", "ChatML: <|im_start|>role ... <|im_end|> (OpenHermes, Qwen)", func(j string) bool {
		return strings.Contains(j, "<|im_start|>")
	}, renderChatML},
	{"llama3", "Llama 3: <|start_header_id|>role<|end_header_id|> ... <|eot_id|>", func(j string) bool {
		return strings.Contains(j, "<|start_header_id|>") && strings.Contains(j, "<|end_header_id|>")
	}, renderLlama3},
	{"llama2", "Llama 2 chat: <s>[INST] <<SYS>> ... <</SYS>> ... [/INST] ... </s>", func(j string) bool {
		return strings.Contains(j, "[INST]")
	}, renderLlama2},
	{"zephyr", "Zephyr / TinyLlama chat: <|system|> ... </s> <|user|> ... </s> <|assistant|>", func(j string) bool {
		return strings.Contains(j, "<|user|>") && strings.Contains(j, "<|assistant|>") && !strings.Contains(j, "<|end|>")
	}, renderZephyr},
}

// ChatTemplateNames lists the template names, sorted.
func ChatTemplateNames() []string {
	var names []string
	for _, f := range chatFamilies {
		names = append(names, f.name)
	}
	slices.Sort(names)
	return names
}

// ErrNoChatTemplate is returned by ChatTemplateFromGGUF when the file has
// no template and none was named.
var ErrNoChatTemplate = errors.New("tokenizer: the file has no chat template (" + KeyChatTemplate + ")")

// NewChatTemplate returns the named template with the given bos_token and
// eos_token text. An unknown name is an error that lists the known ones.
func NewChatTemplate(name, bos, eos string) (ChatTemplate, error) {
	for _, f := range chatFamilies {
		if f.name == name {
			return ChatTemplate{Name: name, BOS: bos, EOS: eos, render: f.render}, nil
		}
	}
	return ChatTemplate{}, fmt.Errorf("tokenizer: chat template %q is unknown (known: %s)", name, strings.Join(ChatTemplateNames(), ", "))
}

// DetectChatTemplate names the family of a Jinja chat template, or fails
// with an error that lists the known names.
func DetectChatTemplate(jinja string) (string, error) {
	for _, f := range chatFamilies {
		if f.detect(jinja) {
			return f.name, nil
		}
	}
	return "", fmt.Errorf("tokenizer: %s is none of the known chat templates (%s); name one instead",
		KeyChatTemplate, strings.Join(ChatTemplateNames(), ", "))
}

// ChatTemplateFromGGUF returns the template named by name, or when name is
// "" the one f's tokenizer.chat_template is recognised as, with tok's BOS
// and EOS text.
func ChatTemplateFromGGUF(f *gguf.File, tok *Tokenizer, name string) (ChatTemplate, error) {
	if name == "" {
		if !f.Has(KeyChatTemplate) {
			return ChatTemplate{}, fmt.Errorf("%w; name one (%s)", ErrNoChatTemplate, strings.Join(ChatTemplateNames(), ", "))
		}
		jinja, err := f.String(KeyChatTemplate)
		if err != nil {
			return ChatTemplate{}, fmt.Errorf("tokenizer: %s: %w", KeyChatTemplate, err)
		}
		if name, err = DetectChatTemplate(jinja); err != nil {
			return ChatTemplate{}, err
		}
	}
	text := func(id int32) string {
		if id < 0 {
			return ""
		}
		return tok.pieces[id]
	}
	return NewChatTemplate(name, text(tok.BOS()), text(tok.EOS()))
}

// Render writes msgs as the template does; with addGenerationPrompt it
// ends with the start of the assistant's turn, where generation goes on.
func (c ChatTemplate) Render(msgs []Message, addGenerationPrompt bool) (string, error) {
	p, err := c.RenderPrompt(msgs, addGenerationPrompt)
	return p.Text, err
}

// RenderPrompt is Render with the place of each message's content.
func (c ChatTemplate) RenderPrompt(msgs []Message, addGenerationPrompt bool) (ChatPrompt, error) {
	if c.render == nil {
		return ChatPrompt{}, errors.New("tokenizer: a ChatTemplate must come from NewChatTemplate")
	}
	for i, m := range msgs {
		switch {
		case m.Role == RoleSystem, m.Role == RoleUser, m.Role == RoleAssistant:
		case m.Role == RoleIPython && c.Name == "llama3":
		default:
			return ChatPrompt{}, fmt.Errorf("tokenizer: message %d: role %q is not %s, %s or %s", i, m.Role, RoleSystem, RoleUser, RoleAssistant)
		}
	}
	var p promptBuilder
	if err := c.render(c, &p, msgs, addGenerationPrompt); err != nil {
		return ChatPrompt{}, err
	}
	return ChatPrompt{Text: p.b.String(), Content: p.spans}, nil
}

// pyStrip is Python's str.strip() (and Jinja's trim): Unicode whitespace and
// the four ASCII separators 0x1C-0x1F, which Python counts as whitespace.
func pyStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1C && r <= 0x1F) })
}

// renderLlama3 is Meta-Llama-3-8B-Instruct's template: each message as a
// header and its trimmed content, BOS before the first.
func renderLlama3(c ChatTemplate, p *promptBuilder, msgs []Message, gen bool) error {
	for i, m := range msgs {
		if i == 0 {
			p.markup(c.BOS)
		}
		p.markup("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n")
		p.content(m.Role, pyStrip(m.Content))
		p.markup("<|eot_id|>")
	}
	if gen {
		p.markup("<|start_header_id|>assistant<|end_header_id|>\n\n")
	}
	return nil
}

// renderLlama2 is Llama-2-chat's template: a leading system message goes
// inside the first user message, each user message is one [INST] block
// after BOS, each answer ends with EOS, and the roles must alternate. It has
// no generation prompt: the answer follows " [/INST]".
func renderLlama2(c ChatTemplate, p *promptBuilder, msgs []Message, _ bool) error {
	var system *Message
	if len(msgs) > 0 && msgs[0].Role == RoleSystem {
		system, msgs = &msgs[0], msgs[1:]
	}
	for i, m := range msgs {
		if (m.Role == RoleUser) != (i%2 == 0) {
			return errors.New("tokenizer: llama2 chat template: after the optional system message, roles must alternate user, assistant, user, assistant and so on")
		}
		switch m.Role {
		case RoleUser:
			p.markup(c.BOS + "[INST] ")
			if i == 0 && system != nil {
				p.stripped(part{"", "<<SYS>>\n"}, part{RoleSystem, system.Content}, part{"", "\n<</SYS>>\n\n"}, part{RoleUser, m.Content})
			} else {
				p.stripped(part{RoleUser, m.Content})
			}
			p.markup(" [/INST]")
		case RoleAssistant:
			p.markup(" ")
			p.stripped(part{RoleAssistant, m.Content})
			p.markup(" " + c.EOS)
		}
	}
	return nil
}

// renderZephyr is zephyr-7b-beta's and TinyLlama-1.1B-Chat's template: a
// <|role|> line, the content and EOS, a newline; the generation prompt comes
// after the last message only.
func renderZephyr(c ChatTemplate, p *promptBuilder, msgs []Message, gen bool) error {
	for _, m := range msgs {
		p.markup("<|" + m.Role + "|>\n")
		p.content(m.Role, m.Content)
		p.markup(c.EOS + "\n")
	}
	if gen && len(msgs) > 0 {
		p.markup("<|assistant|>\n")
	}
	return nil
}

// renderChatML is ChatML (teknium/OpenHermes-2.5-Mistral-7B's template).
func renderChatML(_ ChatTemplate, p *promptBuilder, msgs []Message, gen bool) error {
	for _, m := range msgs {
		p.markup("<|im_start|>" + m.Role + "\n")
		p.content(m.Role, m.Content)
		p.markup("<|im_end|>\n")
	}
	if gen {
		p.markup("<|im_start|>assistant\n")
	}
	return nil
}
