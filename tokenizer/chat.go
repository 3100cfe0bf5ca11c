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
	render   func(c ChatTemplate, msgs []Message, addGenerationPrompt bool) (string, error)
}

// chatFamily is one template family: how to recognise its Jinja text and
// how to render it.
type chatFamily struct {
	name   string
	about  string
	detect func(jinja string) bool
	render func(c ChatTemplate, msgs []Message, addGenerationPrompt bool) (string, error)
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
	if c.render == nil {
		return "", errors.New("tokenizer: a ChatTemplate must come from NewChatTemplate")
	}
	for i, m := range msgs {
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant:
		default:
			return "", fmt.Errorf("tokenizer: message %d: role %q is not %s, %s or %s", i, m.Role, RoleSystem, RoleUser, RoleAssistant)
		}
	}
	return c.render(c, msgs, addGenerationPrompt)
}

// pyStrip is Python's str.strip() (and Jinja's trim): Unicode whitespace and
// the four ASCII separators 0x1C-0x1F, which Python counts as whitespace.
func pyStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1C && r <= 0x1F) })
}

// renderLlama3 is Meta-Llama-3-8B-Instruct's template: each message as a
// header and its trimmed content, BOS before the first.
func renderLlama3(c ChatTemplate, msgs []Message, gen bool) (string, error) {
	var b strings.Builder
	for i, m := range msgs {
		if i == 0 {
			b.WriteString(c.BOS)
		}
		b.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n" + pyStrip(m.Content) + "<|eot_id|>")
	}
	if gen {
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	}
	return b.String(), nil
}

// renderLlama2 is Llama-2-chat's template: a leading system message goes
// inside the first user message, each user message is one [INST] block
// after BOS, each answer ends with EOS, and the roles must alternate. It has
// no generation prompt: the answer follows " [/INST]".
func renderLlama2(c ChatTemplate, msgs []Message, _ bool) (string, error) {
	system, hasSystem := "", false
	if len(msgs) > 0 && msgs[0].Role == RoleSystem {
		system, hasSystem, msgs = msgs[0].Content, true, msgs[1:]
	}
	var b strings.Builder
	for i, m := range msgs {
		if (m.Role == RoleUser) != (i%2 == 0) {
			return "", errors.New("tokenizer: llama2 chat template: after the optional system message, roles must alternate user, assistant, user, assistant and so on")
		}
		content := m.Content
		if i == 0 && hasSystem {
			content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content
		}
		switch m.Role {
		case RoleUser:
			b.WriteString(c.BOS + "[INST] " + pyStrip(content) + " [/INST]")
		case RoleAssistant:
			b.WriteString(" " + pyStrip(content) + " " + c.EOS)
		}
	}
	return b.String(), nil
}

// renderZephyr is zephyr-7b-beta's and TinyLlama-1.1B-Chat's template: a
// <|role|> line, the content and EOS, a newline; the generation prompt comes
// after the last message only.
func renderZephyr(c ChatTemplate, msgs []Message, gen bool) (string, error) {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|" + m.Role + "|>\n" + m.Content + c.EOS + "\n")
	}
	if gen && len(msgs) > 0 {
		b.WriteString("<|assistant|>\n")
	}
	return b.String(), nil
}

// renderChatML is ChatML (teknium/OpenHermes-2.5-Mistral-7B's template).
func renderChatML(_ ChatTemplate, msgs []Message, gen bool) (string, error) {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
	}
	if gen {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String(), nil
}
