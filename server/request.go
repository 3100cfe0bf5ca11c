package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/modrun/modrun"
)

// sampling is what chat and completion requests share: OpenAI's fields and
// llama.cpp's extensions (top_k, min_p, repeat_penalty, ignore_eos).
type sampling struct {
	Model               string             `json:"model"`
	MaxTokens           *int               `json:"max_tokens"`
	MaxCompletionTokens *int               `json:"max_completion_tokens"`
	Temperature         *float64           `json:"temperature"`
	TopP                *float64           `json:"top_p"`
	TopK                *int               `json:"top_k"`
	MinP                *float64           `json:"min_p"`
	RepeatPenalty       *float64           `json:"repeat_penalty"`
	RepeatLastN         *int               `json:"repeat_last_n"` // llama.cpp's: 0 = none, -1 = the context
	FrequencyPenalty    *float64           `json:"frequency_penalty"`
	PresencePenalty     *float64           `json:"presence_penalty"`
	LogitBias           map[string]float64 `json:"logit_bias"` // token id (as a string) -> bias in [-100, 100]
	Seed                *int64             `json:"seed"`
	IgnoreEOS           bool               `json:"ignore_eos"` // llama.cpp's: EOS is never drawn
	Stop                stopList           `json:"stop"`
	N                   *int               `json:"n"`
	Stream              bool               `json:"stream"`
	StreamOptions       *streamOptions     `json:"stream_options"`
	// ResponseFormat constrains the answer to JSON (format.go).
	ResponseFormat *responseFormat `json:"response_format"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatRequest is POST /v1/chat/completions's body.
type chatRequest struct {
	sampling
	Messages    []chatMessage `json:"messages"`
	LogProbs    bool          `json:"logprobs"`
	TopLogProbs *int          `json:"top_logprobs"`
	// OpenAI's function calling (tools.go).
	Tools             []toolJSON      `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
}

type chatMessage struct {
	Role    string      `json:"role"`
	Content chatContent `json:"content"`
	// An assistant's calls, and a tool message's answer to one (tools.go).
	ToolCalls  []toolCallJSON `json:"tool_calls"`
	ToolCallID string         `json:"tool_call_id"`
}

// completionRequest is POST /v1/completions's body.
type completionRequest struct {
	sampling
	Prompt   prompt `json:"prompt"`
	Echo     bool   `json:"echo"`
	LogProbs *int   `json:"logprobs"`
}

// stopList is OpenAI's stop: a string or an array of strings.
type stopList []string

func (s *stopList) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	var one string
	if json.Unmarshal(b, &one) == nil {
		*s = stopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return &fieldError{"stop", "must be a string or an array of strings"}
	}
	*s = many
	return nil
}

// chatContent is a message's content: a string, or an array of parts of
// which only text parts are taken (this model reads text).
type chatContent string

func (c *chatContent) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	var s string
	if json.Unmarshal(b, &s) == nil {
		*c = chatContent(s)
		return nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return &fieldError{"messages.content", "must be a string or an array of content parts"}
	}
	var text bytes.Buffer
	for _, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return &fieldError{"messages.content", fmt.Sprintf("a content part of type %q: this model takes text parts only", p.Type)}
		}
		text.WriteString(*p.Text)
	}
	*c = chatContent(text.String())
	return nil
}

// prompt is /v1/completions's prompt: a string, token ids, or an array of
// one of those (each its own sequence and choice).
type prompt struct {
	texts []string
	ids   [][]int32
	isIDs bool
}

// count is how many prompts were given.
func (p prompt) count() int { return max(len(p.texts), len(p.ids)) }

func (p *prompt) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*p = prompt{texts: []string{s}}
		return nil
	}
	var ids []int32
	if json.Unmarshal(b, &ids) == nil && len(ids) > 0 {
		*p = prompt{ids: [][]int32{ids}, isIDs: true}
		return nil
	}
	var texts []string
	if json.Unmarshal(b, &texts) == nil {
		*p = prompt{texts: texts}
		return nil
	}
	var idLists [][]int32
	if json.Unmarshal(b, &idLists) == nil {
		*p = prompt{ids: idLists, isIDs: true}
		return nil
	}
	return &fieldError{"prompt", "must be a string, an array of token ids, or an array of one of those"}
}

// genOptions maps the sampling fields onto the API's options, with
// OpenAI's defaults: temperature 1, top_p 1 and a fresh random seed unless
// the request gives one. defaultMax applies when neither max_tokens field
// is given (0 = until EOS or the context is full); minMax is the least
// either may be (OpenAI's chat wants 1, its completions take 0). The API
// checks the options (checkOptions); this server refuses on its own only
// what the request's encoding has and the API's options do not (n,
// max_tokens against the context, logit_bias's keys and repeat_last_n's
// -1, stop), and the bounds of serverLimits.
func (r *sampling) genOptions(info modrun.Info, defaultMax, minMax int) (modrun.GenerateOptions, error) {
	o := modrun.GenerateOptions{Temperature: 1, TopP: 1, Seed: rand.Uint64()}
	if r.N != nil && *r.N != 1 {
		return o, badRequest("n", "invalid_value", "n %d: this server makes one choice per request (n = 1); send more requests instead", *r.N)
	}
	o.MaxTokens = defaultMax
	for _, f := range []struct {
		name string
		v    *int
	}{{"max_tokens", r.MaxTokens}, {"max_completion_tokens", r.MaxCompletionTokens}} {
		if f.v == nil {
			continue
		}
		if *f.v < minMax {
			return o, badRequest(f.name, "integer_below_min_value", "%s %d: must be at least %d", f.name, *f.v, minMax)
		}
		if *f.v > info.ContextLen {
			return o, badRequest(f.name, "invalid_value", "%s %d: must be in [0, %d], the context length", f.name, *f.v, info.ContextLen)
		}
		o.MaxTokens = *f.v
	}
	if err := r.checkLimits(info); err != nil {
		return o, err
	}
	for _, f := range []struct {
		v   *float64
		set *float32
	}{
		{r.Temperature, &o.Temperature}, {r.TopP, &o.TopP}, {r.MinP, &o.MinP}, {r.RepeatPenalty, &o.RepeatPenalty},
		{r.FrequencyPenalty, &o.FrequencyPenalty}, {r.PresencePenalty, &o.PresencePenalty},
	} {
		if f.v != nil {
			*f.set = float32(*f.v)
		}
	}
	if n := r.RepeatLastN; n != nil {
		switch {
		case *n < -1:
			return o, badRequest("repeat_last_n", "invalid_value", "repeat_last_n %d: must be 0 (none), -1 (the context) or positive", *n)
		case *n == 0:
			o.RepeatLastN = -1 // the API's "none"
		case *n == -1:
			o.RepeatLastN = info.ContextLen
		default:
			o.RepeatLastN = *n
		}
	}
	if len(r.LogitBias) > 0 {
		o.LogitBias = make(map[int32]float32, len(r.LogitBias))
		for k, v := range r.LogitBias {
			id, err := strconv.ParseInt(k, 10, 32)
			if err != nil || id < 0 || int(id) >= info.NVocab {
				return o, badRequest("logit_bias", "invalid_value", "logit_bias: key %q is not a token id in [0, %d)", k, info.NVocab)
			}
			o.LogitBias[int32(id)] = float32(v)
		}
	}
	if r.TopK != nil {
		o.TopK = *r.TopK
	}
	if r.Seed != nil {
		o.Seed = uint64(*r.Seed)
	}
	o.IgnoreEOS = r.IgnoreEOS
	if len(r.Stop) > 16 { // this server's limit (OpenAI's is 4); each string is the API's to check
		return o, badRequest("stop", "invalid_value", "%d stop strings: at most 16", len(r.Stop))
	}
	o.Stop = r.Stop
	return o, checkOptions(o, "")
}

// checkLimits refuses the values this server bounds more narrowly than the
// API does: OpenAI's temperature in [0, 2] and logit_bias in [-100, 100],
// a repeat_penalty up to 10 and a top_k up to the vocabulary, as this
// server has always taken. The rest of each field's range is the API's.
func (r *sampling) checkLimits(info modrun.Info) error {
	for _, f := range []struct {
		name string
		v    *float64
		hi   float64
	}{{"temperature", r.Temperature, 2}, {"repeat_penalty", r.RepeatPenalty, 10}} {
		if f.v != nil && *f.v > f.hi { // below 0 is the API's to refuse; 0 is in both ranges
			return badRequest(f.name, "invalid_value", "%s %g: must be in [0, %g]", f.name, *f.v, f.hi)
		}
	}
	for k, v := range r.LogitBias {
		if v < -100 || v > 100 {
			return badRequest("logit_bias", "invalid_value", "logit_bias[%s] %g: must be in [-100, 100]", k, v)
		}
	}
	if r.TopK != nil && *r.TopK > info.NVocab {
		return badRequest("top_k", "invalid_value", "top_k %d: must be at most %d, the vocabulary", *r.TopK, info.NVocab)
	}
	return nil
}

// jsonFields is the request's field of each option the API's check names
// by its Go field (modrun.OptionError): the server fills the options from
// the request and says their errors in the client's words. TopLogProbs is
// each endpoint's own (checkOptions).
var jsonFields = map[string]string{
	"MaxTokens":        "max_tokens",
	"Temperature":      "temperature",
	"TopK":             "top_k",
	"TopP":             "top_p",
	"MinP":             "min_p",
	"RepeatPenalty":    "repeat_penalty",
	"RepeatLastN":      "repeat_last_n",
	"FrequencyPenalty": "frequency_penalty",
	"PresencePenalty":  "presence_penalty",
	"LogitBias":        "logit_bias",
	"Stop":             "stop",
}

// checkOptions is the API's check of o (GenerateOptions.Check) before
// anything runs: a refused option is a 400 naming the request's field,
// topLogProbs the endpoint's for TopLogProbs (chat's top_logprobs,
// completions' logprobs). An option no field fills is this server's bug:
// a 500.
func checkOptions(o modrun.GenerateOptions, topLogProbs string) error {
	err := o.Check()
	var oe *modrun.OptionError
	if !errors.As(err, &oe) {
		return err
	}
	field, ok := jsonFields[oe.Option]
	if oe.Option == "TopLogProbs" && topLogProbs != "" {
		field, ok = topLogProbs, true
	}
	if !ok {
		return err
	}
	return badRequest(field, "invalid_value", "%s", oe.Named(field))
}
