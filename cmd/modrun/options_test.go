package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	api "github.com/modrun/modrun"
	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/server"
)

// badOption is one bad value of one option, as each caller gives it: a
// program through the API (gen or open), the command line (args, after
// -m and -p), and the server (a request body). A caller that cannot give
// the value (the API's Device is a string, the command line's an int; a
// server has no backend options) has none, and one that takes it (the
// server's temperature stops at OpenAI's 2, the API's does not) too.
type badOption struct {
	option string                     // the Go field, as the API names it
	gen    func(*api.GenerateOptions) // the value in a Generate call
	open   func(*api.Options)         // the value in Open
	flag   string                     // the flag, as the command line names it
	args   []string                   // the command line, after -m FILE (a "serve" first: serve's)
	field  string                     // the request's JSON field, as the server names it
	path   string                     // the endpoint: chat or completions
	body   string                     // the request's fields besides the prompt
	model  bool                       // the command line needs the real model (a check against it)
}

// The fields with no bad value: any value is one (Seed, the booleans),
// or the value is checked as something else than an option (a prompt's
// tokens, as a prompt; a compiled Grammar is one by construction;
// Sampler's are SamplerOptions').
var noBadValue = map[string]bool{
	"Seed": true, "LogProbs": true, "IgnoreEOS": true, "ParseSpecial": true, "OnRouted": true, "PromptTokens": true,
	"Grammar": true, "Sampler": true, "NoRoutes": true, "Profile": true, "PrefixCache": true,
}

func badOptions() []badOption {
	gen := func(f func(*api.GenerateOptions)) func(*api.GenerateOptions) { return f }
	sampler := func(f func(*api.SamplerOptions)) func(*api.GenerateOptions) {
		return func(o *api.GenerateOptions) {
			so := engine.DefaultSampler()
			f(&so)
			o.Sampler = &so
		}
	}
	open := func(f func(*api.Options)) func(*api.Options) { return f }
	const chat, compl = "/v1/chat/completions", "/v1/completions"
	return []badOption{
		{option: "MaxTokens", gen: gen(func(o *api.GenerateOptions) { o.MaxTokens = -1 }),
			flag: "-n", args: []string{"-n", "-3"}, field: "max_tokens", path: compl, body: `"max_tokens":-1`},
		{option: "Temperature", gen: gen(func(o *api.GenerateOptions) { o.Temperature = -1 }),
			flag: "--temp", args: []string{"--temp", "-1"}, field: "temperature", path: chat, body: `"temperature":-1`},
		{option: "Temperature", field: "temperature", path: chat, body: `"temperature":3`}, // OpenAI's limit, the server's alone
		{option: "Temperature", gen: gen(func(o *api.GenerateOptions) { o.Temperature = float32(math.NaN()) })},
		{option: "TopK", gen: gen(func(o *api.GenerateOptions) { o.TopK = -1 }),
			flag: "--top-k", args: []string{"--top-k", "-1"}, field: "top_k", path: compl, body: `"top_k":-1`},
		{option: "TopP", gen: gen(func(o *api.GenerateOptions) { o.TopP = 1.5 }),
			flag: "--top-p", args: []string{"--top-p", "1.5"}, field: "top_p", path: chat, body: `"top_p":1.5`},
		{option: "TopP", gen: sampler(func(o *api.SamplerOptions) { o.TopP = 0 }), flag: "--top-p", args: []string{"--top-p", "0"}}, // the fields' 0 is 1
		{option: "MinP", gen: gen(func(o *api.GenerateOptions) { o.MinP = -0.5 }),
			flag: "--min-p", args: []string{"--min-p", "-0.5"}, field: "min_p", path: compl, body: `"min_p":-0.5`},
		{option: "RepeatPenalty", gen: gen(func(o *api.GenerateOptions) { o.RepeatPenalty = -1 }),
			flag: "--repeat-penalty", args: []string{"--repeat-penalty", "-1"}, field: "repeat_penalty", path: compl, body: `"repeat_penalty":-1`},
		{option: "RepeatPenalty", gen: sampler(func(o *api.SamplerOptions) { o.RepeatPenalty = 0 }), flag: "--repeat-penalty", args: []string{"--repeat-penalty", "0"}},
		{option: "RepeatLastN", gen: sampler(func(o *api.SamplerOptions) { o.RepeatLastN = -1 }), // the fields' negative is none
			flag: "--repeat-last-n", args: []string{"--repeat-last-n", "-1"}, field: "repeat_last_n", path: compl, body: `"repeat_last_n":-2`},
		{option: "FrequencyPenalty", gen: gen(func(o *api.GenerateOptions) { o.FrequencyPenalty = 3 }),
			flag: "--frequency-penalty", args: []string{"--frequency-penalty", "3"}, field: "frequency_penalty", path: chat, body: `"frequency_penalty":3`},
		{option: "PresencePenalty", gen: gen(func(o *api.GenerateOptions) { o.PresencePenalty = -3 }),
			flag: "--presence-penalty", args: []string{"--presence-penalty", "-3"}, field: "presence_penalty", path: compl, body: `"presence_penalty":-3`},
		{option: "LogitBias", gen: gen(func(o *api.GenerateOptions) { o.LogitBias = map[int32]float32{-1: 1} }),
			field: "logit_bias", path: compl, body: `"logit_bias":{"-1":1}`},
		{option: "LogitBias", gen: gen(func(o *api.GenerateOptions) { o.LogitBias = map[int32]float32{5: float32(math.Inf(1))} }),
			field: "logit_bias", path: compl, body: `"logit_bias":{"5":101}`},
		{option: "TopLogProbs", gen: gen(func(o *api.GenerateOptions) { o.LogProbs, o.TopLogProbs = true, 21 }),
			field: "top_logprobs", path: chat, body: `"logprobs":true,"top_logprobs":21`},
		{option: "TopLogProbs", gen: gen(func(o *api.GenerateOptions) { o.TopLogProbs = -1 }),
			field: "logprobs", path: compl, body: `"logprobs":21`}, // the legacy logprobs is TopLogProbs
		{option: "GrammarGBNF", gen: gen(func(o *api.GenerateOptions) { o.GrammarGBNF = `root ::= "a` })},
		{option: "GrammarGBNF", gen: gen(func(o *api.GenerateOptions) { o.Grammar, o.GrammarGBNF = api.JSONGrammar(), `root ::= "a"` })},
		{option: "Stop", gen: gen(func(o *api.GenerateOptions) { o.Stop = []string{"."}; o.Stop = append(o.Stop, "") }),
			flag: "--stop", args: []string{"--stop", ""}, field: "stop", path: chat, body: `"stop":["x",""]`},
		{option: "Stop", gen: gen(func(o *api.GenerateOptions) { o.Stop = []string{"\xff"} }), flag: "--stop", args: []string{"--stop", "a\xff"}},
		{option: "Seed", flag: "--seed", args: []string{"--seed", "-5"}}, // the command line's -1 is from the clock

		{option: "Backend", open: open(func(o *api.Options) { o.Backend = "gpu" }), flag: "--backend", args: []string{"--backend", "gpu"}},
		{option: "Device", open: open(func(o *api.Options) { o.Device = "first" }), flag: "--device", args: []string{"--device", "-5"}},
		{option: "Routing", open: open(func(o *api.Options) { o.Routing = "topk" }), flag: "--routing", args: []string{"--routing", "topk"}},
		{option: "ContextLen", open: open(func(o *api.Options) { o.ContextLen = -1 }), flag: "--ctx", args: []string{"--ctx", "-1"}},
		{option: "ContextLen", open: open(func(o *api.Options) { o.ContextLen = 100000 }), flag: "--ctx", args: []string{"--ctx", "100000"}, model: true},
		{option: "KVType", open: open(func(o *api.Options) { o.KVType = "q8" }), flag: "--kv-type", args: []string{"--kv-type", "q8"}},
		{option: "UBatch", open: open(func(o *api.Options) { o.UBatch = -1 }), flag: "--ubatch", args: []string{"--ubatch", "-1"}},
		{option: "Parallel", open: open(func(o *api.Options) { o.Parallel = -1 }), flag: "--parallel", args: []string{"serve", "--parallel", "0"}},
		{option: "KVBudget", open: open(func(o *api.Options) { o.KVBudget = -1 })},
	}
}

// TestOptionErrorsInEachCallersTerms: every bad value of every option is
// refused by each caller that can give it, the API naming the Go field
// (an *api.OptionError, before anything runs), the command line the flag
// (a usage error, exit 2), the server the JSON field (a 400 whose param
// is the field, the server going on), and none of them naming the option
// as another caller does. A value a check lets through fails it; so does
// an option of GenerateOptions, SamplerOptions or Options with no case.
func TestOptionErrorsInEachCallersTerms(t *testing.T) {
	cases := badOptions()
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.option] = true
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[api.GenerateOptions](), reflect.TypeFor[api.SamplerOptions](), reflect.TypeFor[api.Options]()} {
		for i := range typ.NumField() {
			if f := typ.Field(i); f.IsExported() && !noBadValue[f.Name] {
				assert.True(t, covered[f.Name], "%s.%s has no bad value here", typ.Name(), f.Name)
			}
		}
	}

	m, err := api.Open(shippedMoD, api.Options{Backend: api.BackendCPU})
	require.NoError(t, err)
	defer m.Close()
	srv := server.New(server.Config{ModelName: "tinystories-mod", ChatTemplate: "chatml"})
	srv.SetModel(m)
	hs := httptest.NewServer(srv.Handler())
	defer func() {
		hs.Close()
		require.NoError(t, srv.Shutdown(context.Background()))
	}()
	missing := filepath.Join(t.TempDir(), "missing.gguf") // accepted flags end at the missing file

	for _, c := range cases {
		names := map[string]string{"API": c.option, "flag": c.flag, "field": c.field}
		// only checks that msg names the option as caller does and as no other.
		only := func(t *testing.T, caller, msg string) {
			t.Helper()
			own := names[caller]
			assert.Contains(t, msg, own, "%s names the option", caller)
			for other, name := range names {
				if other != caller && name != "" && !strings.Contains(own, name) {
					assert.NotContains(t, msg, name, "%s's message names the option as the %s does", caller, other)
				}
			}
		}
		if c.gen != nil {
			t.Run("API/Generate/"+c.option, func(t *testing.T) {
				var o api.GenerateOptions
				c.gen(&o)
				s := m.NewSession()
				defer s.Close()
				ran := false
				_, err := s.Generate(context.Background(), "Once", o, func(api.Token) error { ran = true; return nil })
				var oe *api.OptionError
				require.True(t, errors.As(err, &oe), "%v", err)
				assert.Equal(t, c.option, oe.Option)
				assert.False(t, ran, "refused before anything ran")
				assert.Equal(t, err, o.Check(), "Check says what Generate says")
				only(t, "API", err.Error())
			})
		}
		if c.open != nil {
			t.Run("API/Open/"+c.option, func(t *testing.T) {
				o := api.Options{Backend: api.BackendCPU}
				c.open(&o)
				got, err := api.Open(shippedMoD, o)
				if got != nil {
					got.Close()
				}
				var oe *api.OptionError
				require.True(t, errors.As(err, &oe), "%v", err)
				assert.Equal(t, c.option, oe.Option)
				only(t, "API", err.Error())
			})
		}
		if c.flag != "" {
			t.Run("CLI/"+c.flag+"="+c.args[len(c.args)-1], func(t *testing.T) {
				path := missing
				if c.model {
					path = shippedMoD
				}
				args := append([]string{"-m", path, "-p", "Once", "-n", "1", "--backend", "cpu"}, c.args...)
				if c.args[0] == "serve" {
					args = append([]string{"serve", "-m", path}, c.args[1:]...)
				}
				code, stdout, stderr := modrun(t, args...)
				assert.Equal(t, 2, code, "a usage error: %s", stderr)
				assert.Empty(t, stdout)
				assert.Contains(t, stderr, "usage: "+c.flag+" ", "the error begins with the flag")
				only(t, "flag", stderr)
			})
		}
		if c.field != "" {
			t.Run("server/"+c.body, func(t *testing.T) {
				body := `{"prompt":"Once",` + c.body + `}`
				if c.path == "/v1/chat/completions" {
					body = `{"messages":[{"role":"user","content":"Once"}],` + c.body + `}`
				}
				resp, err := http.Post(hs.URL+c.path, "application/json", strings.NewReader(body))
				require.NoError(t, err)
				defer resp.Body.Close()
				var out struct {
					Error struct{ Message, Type, Param, Code string }
				}
				var raw bytes.Buffer
				require.NoError(t, json.NewDecoder(io.TeeReader(resp.Body, &raw)).Decode(&out))
				assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", raw.String())
				assert.Equal(t, "invalid_request_error", out.Error.Type)
				assert.Equal(t, c.field, out.Error.Param)
				assert.True(t, strings.HasPrefix(out.Error.Message, c.field), "the message begins with the field: %q", out.Error.Message)
				only(t, "field", out.Error.Message)
			})
		}
	}
	resp, err := http.Post(hs.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Once","max_tokens":2}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the server goes on serving")
}
