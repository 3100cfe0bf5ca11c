package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/modrun/modrun"
)

// OpenAI's tools on /v1/chat/completions: the functions are written into
// the conversation as the template's family expects them, the model's
// call is kept by a grammar to the family's call format with the
// function's parameter schema for its arguments, and the answer's calls
// come back as tool_calls (streamed as OpenAI streams them: the id and
// name first, then deltas of the arguments). Two formats:
//   - llama3 (Llama 3.1's JSON tool calling): the functions open the first
//     user message; a call is {"name": NAME, "parameters": ARGS}, one per
//     turn; a tool's result is an ipython message.
//   - chatml (Hermes 2 Pro and Qwen 2.5): the functions in <tools></tools>
//     in the system message; each call <tool_call>\n{"name": NAME,
//     "arguments": ARGS}\n</tool_call>; results in <tool_response> in a
//     user message.

type toolJSON struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
		Strict      *bool           `json:"strict,omitempty"`
	} `json:"function"`
}

type toolCallJSON struct {
	Index    *int             `json:"index,omitempty"` // in a streamed delta
	ID       string           `json:"id,omitempty"`
	Type     string           `json:"type,omitempty"`
	Function toolCallFunction `json:"function"`
}

type toolCallFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// toolFormat is one template family's way of writing tools and calls.
type toolFormat struct {
	family   string
	argsKey  string // "parameters" or "arguments"
	open     string // before each call
	close    string // after each call
	parallel bool   // several calls in one answer
}

var toolFormats = map[string]toolFormat{
	"llama3": {family: "llama3", argsKey: "parameters"},
	"chatml": {family: "chatml", argsKey: "arguments", open: "<tool_call>\n", close: "\n</tool_call>", parallel: true},
}

// functionName is OpenAI's rule for a function's name.
var functionName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// toolPlan is what a request's tools ask of one generation.
type toolPlan struct {
	format   toolFormat
	tools    []toolJSON
	choice   string // "auto", "required", or "" with named set
	named    string // tool_choice's function
	parallel bool
}

// planTools checks tools, tool_choice and parallel_tool_calls against the
// chat template, and returns nil when the answer is free text (no tools,
// or tool_choice none).
func (req *chatRequest) planTools(template string) (*toolPlan, error) {
	choice, named, err := parseToolChoice(req.ToolChoice)
	if err != nil {
		return nil, err
	}
	if len(req.Tools) == 0 {
		if choice != "" && choice != "none" || named != "" {
			return nil, badRequest("tool_choice", "invalid_value", "tool_choice needs tools")
		}
		if req.ParallelToolCalls != nil {
			return nil, badRequest("parallel_tool_calls", "invalid_value", "parallel_tool_calls needs tools")
		}
		return nil, nil
	}
	format, ok := toolFormats[template]
	if !ok {
		return nil, badRequest("tools", "unsupported_template", "tools: the chat template %q has no tool-call format (llama3 and chatml have; start the server with --chat-template)", template)
	}
	if req.ResponseFormat != nil && req.ResponseFormat.Type != "" && req.ResponseFormat.Type != "text" {
		return nil, badRequest("response_format", "invalid_value", "response_format %q with tools: give one or the other", req.ResponseFormat.Type)
	}
	seen := map[string]bool{}
	for i, t := range req.Tools {
		if t.Type != "function" {
			return nil, badRequest(fmt.Sprintf("tools[%d].type", i), "invalid_value", "tools[%d].type %q: only function tools", i, t.Type)
		}
		if !functionName.MatchString(t.Function.Name) {
			return nil, badRequest(fmt.Sprintf("tools[%d].function.name", i), "invalid_value", "tools[%d].function.name %q: 1 to 64 of a-z, A-Z, 0-9, _ and -", i, t.Function.Name)
		}
		if seen[t.Function.Name] {
			return nil, badRequest(fmt.Sprintf("tools[%d].function.name", i), "invalid_value", "tools[%d].function.name %q is given twice", i, t.Function.Name)
		}
		seen[t.Function.Name] = true
	}
	if named != "" && !seen[named] {
		return nil, badRequest("tool_choice", "invalid_value", "tool_choice names function %q, which is not among the tools", named)
	}
	if choice == "none" {
		return nil, nil
	}
	p := &toolPlan{format: format, tools: req.Tools, choice: choice, named: named, parallel: format.parallel}
	if req.ParallelToolCalls != nil && !*req.ParallelToolCalls {
		p.parallel = false
	}
	if choice == "" && named == "" {
		p.choice = "auto"
	}
	return p, nil
}

// parseToolChoice reads tool_choice: "none", "auto", "required", or
// {"type": "function", "function": {"name": ...}}.
func parseToolChoice(raw json.RawMessage) (choice, named string, err error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", "", nil
	}
	if json.Unmarshal(raw, &choice) == nil {
		switch choice {
		case "none", "auto", "required":
			return choice, "", nil
		}
		return "", "", badRequest("tool_choice", "invalid_value", "tool_choice %q: none, auto, required or a function", choice)
	}
	var obj struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &obj) != nil || obj.Type != "function" || obj.Function.Name == "" {
		return "", "", badRequest("tool_choice", "invalid_value", `tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}`)
	}
	return "", obj.Function.Name, nil
}

// grammar is the answer's grammar: calls of the allowed functions, each
// with arguments of its parameter schema; with auto, free text too (which
// then may not start as a call does).
func (p *toolPlan) grammar() (*modrun.Grammar, error) {
	var b strings.Builder
	var fns []string
	for i, t := range p.tools {
		if p.named != "" && t.Function.Name != p.named {
			continue
		}
		params := t.Function.Parameters
		if len(bytes.TrimSpace(params)) == 0 || bytes.Equal(bytes.TrimSpace(params), []byte("null")) {
			params = []byte(`{"type":"object","properties":{}}`)
		}
		rule := fmt.Sprintf("fn%d-args", i)
		rules, err := modrun.JSONSchemaGBNF(params, rule)
		if err != nil {
			return nil, badRequest(fmt.Sprintf("tools[%d].function.parameters", i), "invalid_value", "tools[%d].function.parameters: %v", i, err)
		}
		b.WriteString(rules)
		fns = append(fns, fmt.Sprintf(`%s "\", \"%s\": " %s`, gbnfString(t.Function.Name), p.format.argsKey, rule))
	}
	call := fmt.Sprintf(`%s "{\"name\": \"" (%s) "}" %s`, gbnfString(p.format.open), strings.Join(fns, " | "), gbnfString(p.format.close))
	calls := "call"
	if p.parallel {
		calls = `call ("\n" call)*`
	}
	root := "calls"
	if p.choice == "auto" {
		root = "calls | text"
		first := p.format.open
		if first == "" {
			first = "{"
		}
		fmt.Fprintf(&b, "text ::= \"\" | [^%s] .*\n", classEscape(first[0]))
	}
	src := fmt.Sprintf("root ::= %s\ncalls ::= %s\ncall ::= %s\n", root, calls, call) + b.String()
	g, err := modrun.ParseGrammar(src)
	if err != nil {
		return nil, badRequest("tools", "invalid_value", "tools: %v", err)
	}
	return g, nil
}

func gbnfString(s string) string {
	if s == "" {
		return `""`
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

func classEscape(c byte) string {
	switch c {
	case '\\', ']', '[', '^', '-':
		return `\` + string(c)
	}
	return string(c)
}

// toolMessages turns the request's messages into the template's: the
// tools' description where the family puts it, assistant calls as the
// text of calls, tool results as the family's result messages.
func toolMessages(format toolFormat, tools []toolJSON, req []chatMessage) ([]modrun.Message, error) {
	var msgs []modrun.Message
	for i, m := range req {
		switch m.Role {
		case "tool":
			if format.family == "llama3" {
				msgs = append(msgs, modrun.Message{Role: modrun.RoleIPython, Content: string(m.Content)})
				continue
			}
			resp := "<tool_response>\n" + string(m.Content) + "\n</tool_response>"
			if n := len(msgs); n > 0 && msgs[n-1].Role == modrun.RoleUser && strings.HasSuffix(msgs[n-1].Content, "</tool_response>") && i > 0 && req[i-1].Role == "tool" {
				msgs[n-1].Content += "\n" + resp // Qwen's template: consecutive results in one user turn
				continue
			}
			msgs = append(msgs, modrun.Message{Role: modrun.RoleUser, Content: resp})
		case "assistant":
			text := string(m.Content)
			for _, c := range m.ToolCalls {
				args := strings.TrimSpace(c.Function.Arguments)
				if args == "" {
					args = "{}"
				}
				if !json.Valid([]byte(args)) {
					return nil, badRequest(fmt.Sprintf("messages[%d].tool_calls", i), "invalid_value", "messages[%d].tool_calls: function %q's arguments are not JSON", i, c.Function.Name)
				}
				if text != "" {
					text += "\n"
				}
				text += format.open + fmt.Sprintf(`{"name": %q, %q: %s}`, c.Function.Name, format.argsKey, args) + format.close
			}
			msgs = append(msgs, modrun.Message{Role: modrun.RoleAssistant, Content: text})
		default:
			role, ok := chatRoles[m.Role]
			if !ok {
				return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "invalid_value", "messages[%d].role %q: system, user, assistant or tool", i, m.Role)
			}
			msgs = append(msgs, modrun.Message{Role: role, Content: string(m.Content)})
		}
	}
	if len(tools) == 0 {
		return msgs, nil
	}
	return describeTools(format, tools, msgs), nil
}

// describeTools writes the functions where the family reads them.
func describeTools(format toolFormat, tools []toolJSON, msgs []modrun.Message) []modrun.Message {
	var list []string
	for _, t := range tools {
		b, _ := json.Marshal(t)
		list = append(list, string(b))
	}
	if format.family == "llama3" {
		intro := "Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\n\n" +
			`Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.` + "Do not use variables.\n\n" +
			strings.Join(list, "\n\n") + "\n\n"
		for i := range msgs {
			if msgs[i].Role == modrun.RoleUser {
				msgs[i].Content = intro + msgs[i].Content
				return msgs
			}
		}
		return append(msgs, modrun.Message{Role: modrun.RoleUser, Content: intro})
	}
	desc := "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" + strings.Join(list, "\n") + "\n</tools>\n\n" +
		"For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
		"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
	if len(msgs) > 0 && msgs[0].Role == modrun.RoleSystem {
		msgs[0].Content += "\n\n" + desc
		return msgs
	}
	return append([]modrun.Message{{Role: modrun.RoleSystem, Content: desc}}, msgs...)
}

// callParser reads the calls out of an answer as it streams: each call's
// name once its header is whole, then its arguments piece by piece (a
// JSON object: it ends where its braces close).
type callParser struct {
	format toolFormat
	buf    string // text not consumed yet
	calls  []toolCallJSON
	inArgs bool
	depth  int
	inStr  bool
	escape bool
}

// callDelta is what a piece of text added: a new call (name set) or
// arguments of the current one.
type callDelta struct {
	index int
	first bool
	args  string
}

func (p *callParser) feed(text string) []callDelta {
	p.buf += text
	var out []callDelta
	for {
		if !p.inArgs {
			head := `{"name": "`
			i := strings.Index(p.buf, head)
			if i < 0 {
				return out
			}
			rest := p.buf[i+len(head):]
			sep := `", "` + p.format.argsKey + `": `
			j := strings.Index(rest, sep)
			if j < 0 {
				return out
			}
			p.calls = append(p.calls, toolCallJSON{ID: newID("call"), Type: "function", Function: toolCallFunction{Name: rest[:j]}})
			out = append(out, callDelta{index: len(p.calls) - 1, first: true})
			p.buf = rest[j+len(sep):]
			p.inArgs, p.depth, p.inStr, p.escape = true, 0, false, false
		}
		n, done := p.scanArgs()
		if n > 0 {
			args := p.buf[:n]
			p.calls[len(p.calls)-1].Function.Arguments += args
			out = append(out, callDelta{index: len(p.calls) - 1, args: args})
			p.buf = p.buf[n:]
		}
		if !done {
			return out
		}
		p.inArgs = false
	}
}

// scanArgs is how many bytes of buf belong to the current arguments, and
// whether they end there.
func (p *callParser) scanArgs() (int, bool) {
	for i := 0; i < len(p.buf); i++ {
		c := p.buf[i]
		switch {
		case p.inStr:
			switch {
			case p.escape:
				p.escape = false
			case c == '\\':
				p.escape = true
			case c == '"':
				p.inStr = false
			}
		case c == '"':
			p.inStr = true
		case c == '{' || c == '[':
			p.depth++
		case c == '}' || c == ']':
			p.depth--
			if p.depth == 0 {
				return i + 1, true
			}
		}
	}
	return len(p.buf), false
}

// isCall says whether an answer's text so far starts a call (under the
// auto grammar, text never starts as a call does).
func (f toolFormat) isCall(text string) bool {
	start := f.open
	if start == "" {
		start = "{"
	}
	return strings.HasPrefix(text, start[:1])
}

// stream is the streamed answer's emitter under p: free text goes to
// content as before; a call goes out as OpenAI streams one, a delta
// with the call's index, id, type and name and empty arguments, then
// deltas of its arguments. send writes one delta chunk.
func (p *toolPlan) stream(content func(piece) error, send func(*chatMessageJSON, piece) error) (func(piece) error, *callParser) {
	parser := &callParser{format: p.format}
	decided, calling := false, p.choice != "auto"
	return func(pc piece) error {
		if !decided && pc.text != "" {
			decided, calling = true, calling || p.format.isCall(pc.text)
		}
		if !calling {
			return content(pc)
		}
		deltas := parser.feed(pc.text)
		if len(deltas) == 0 { // structure, or a header not whole yet: its tokens' routing still goes out
			return send(&chatMessageJSON{}, pc)
		}
		for k, d := range deltas {
			i := d.index
			call := toolCallJSON{Index: &i, Function: toolCallFunction{Arguments: d.args}}
			if d.first {
				c := parser.calls[i]
				call.ID, call.Type, call.Function.Name = c.ID, c.Type, c.Function.Name
			}
			part := piece{}
			if k == 0 {
				part = pc
			}
			if err := send(&chatMessageJSON{ToolCalls: []toolCallJSON{call}}, part); err != nil {
				return err
			}
		}
		return nil
	}, parser
}

// answer is a whole answer's calls under p (nil when it is free text).
func (p *toolPlan) answer(text string) []toolCallJSON {
	if p.choice == "auto" && !p.format.isCall(text) {
		return nil
	}
	parser := &callParser{format: p.format}
	parser.feed(text)
	return parser.calls
}

// usesTools says whether a conversation holds calls or their results.
func usesTools(msgs []chatMessage) bool {
	for _, m := range msgs {
		if m.Role == "tool" || len(m.ToolCalls) > 0 {
			return true
		}
	}
	return false
}
