package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
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

// genOptions checks the sampling fields against the model and turns them
// into the API's options, with OpenAI's defaults: temperature 1, top_p 1
// and a fresh random seed unless the request gives one. defaultMax applies
// when neither max_tokens field is given (0 = until EOS or the context is
// full); minMax is the least either may be (OpenAI's chat wants 1, its
// completions take 0).
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
	num := func(name string, v *float64, lo, hi float64, set *float32) error {
		if v == nil {
			return nil
		}
		if math.IsNaN(*v) || *v < lo || *v > hi {
			return badRequest(name, "invalid_value", "%s %g: must be in [%g, %g]", name, *v, lo, hi)
		}
		*set = float32(*v)
		return nil
	}
	if err := num("temperature", r.Temperature, 0, 2, &o.Temperature); err != nil {
		return o, err
	}
	if err := num("top_p", r.TopP, 0, 1, &o.TopP); err != nil {
		return o, err
	}
	if err := num("min_p", r.MinP, 0, 1, &o.MinP); err != nil {
		return o, err
	}
	if err := num("repeat_penalty", r.RepeatPenalty, 0, 10, &o.RepeatPenalty); err != nil {
		return o, err
	}
	if err := num("frequency_penalty", r.FrequencyPenalty, -2, 2, &o.FrequencyPenalty); err != nil {
		return o, err
	}
	if err := num("presence_penalty", r.PresencePenalty, -2, 2, &o.PresencePenalty); err != nil {
		return o, err
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
			if math.IsNaN(v) || v < -100 || v > 100 {
				return o, badRequest("logit_bias", "invalid_value", "logit_bias[%s] %g: must be in [-100, 100]", k, v)
			}
			o.LogitBias[int32(id)] = float32(v)
		}
	}
	if r.TopK != nil {
		if *r.TopK < 0 || *r.TopK > info.NVocab {
			return o, badRequest("top_k", "invalid_value", "top_k %d: must be in [0, %d], the vocabulary", *r.TopK, info.NVocab)
		}
		o.TopK = *r.TopK
	}
	if r.Seed != nil {
		o.Seed = uint64(*r.Seed)
	}
	o.IgnoreEOS = r.IgnoreEOS
	for i, s := range r.Stop {
		if s == "" {
			return o, badRequest("stop", "invalid_value", "stop[%d] is empty", i)
		}
	}
	if len(r.Stop) > 16 {
		return o, badRequest("stop", "invalid_value", "%d stop strings: at most 16", len(r.Stop))
	}
	o.Stop = r.Stop
	return o, nil
}
