package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/modrun/modrun"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What OpenAI's clients expect of the server (issue 45), asked through the
// official Go client.

func chatParams(extra func(*openai.ChatCompletionNewParams)) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{Model: "tinystories-mod", MaxTokens: openai.Int(48),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once upon a time")}}
	if extra != nil {
		extra(&p)
	}
	return p
}

// A request without seed draws afresh each time, and one without
// temperature samples at OpenAI's default of 1 (not greedy): three
// requests give more than one text, as a chat front-end's "regenerate"
// needs. The same seed gives the same text again. The web page's request
// (temperature 0.8, no seed) is one of these.
func TestSamplingDefaultsFollowOpenAI(t *testing.T) {
	_, hs := testServer(t, Config{})
	c := client(hs.URL)
	ctx := context.Background()
	texts := func(p openai.ChatCompletionNewParams) map[string]bool {
		out := map[string]bool{}
		for range 3 {
			res, err := c.Chat.Completions.New(ctx, p)
			require.NoError(t, err)
			out[res.Choices[0].Message.Content] = true
		}
		return out
	}
	greedy := texts(chatParams(func(p *openai.ChatCompletionNewParams) { p.Temperature = openai.Float(0) }))
	assert.Len(t, greedy, 1, "temperature 0 is greedy")
	assert.Greater(t, len(texts(chatParams(nil))), 1, "no temperature, no seed: sampled at T=1, a fresh seed each")
	assert.Greater(t, len(texts(chatParams(func(p *openai.ChatCompletionNewParams) { p.Temperature = openai.Float(2) }))), 1)
	assert.Greater(t, len(texts(chatParams(func(p *openai.ChatCompletionNewParams) { p.Temperature = openai.Float(0.8) }))), 1, "the web page's request")
	seeded := texts(chatParams(func(p *openai.ChatCompletionNewParams) { p.Seed = openai.Int(42) }))
	assert.Len(t, seeded, 1, "a seed repeats")
	for text := range seeded {
		assert.False(t, greedy[text], "seeded at T=1 is not greedy: %q", text)
	}

	// Completions too.
	outs := map[string]bool{}
	for range 3 {
		res, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "tinystories-mod", MaxTokens: openai.Int(48),
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}})
		require.NoError(t, err)
		outs[res.Choices[0].Text] = true
	}
	assert.Greater(t, len(outs), 1)
}

// Chat refuses max_tokens 0 and max_completion_tokens 0 as OpenAI does (a
// 400 naming the field), where it generated until the context was full.
func TestChatMaxTokensZero(t *testing.T) {
	_, hs := testServer(t, Config{})
	c := client(hs.URL)
	for _, p := range []openai.ChatCompletionNewParams{
		chatParams(func(p *openai.ChatCompletionNewParams) { p.MaxTokens = openai.Int(0) }),
		chatParams(func(p *openai.ChatCompletionNewParams) {
			p.MaxTokens = param.Opt[int64]{}
			p.MaxCompletionTokens = openai.Int(0)
		}),
	} {
		_, err := c.Chat.Completions.New(context.Background(), p)
		var apiErr *openai.Error
		require.True(t, errors.As(err, &apiErr), "%v", err)
		assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
		assert.Equal(t, "integer_below_min_value", apiErr.Code)
		name := "max_tokens"
		if p.MaxCompletionTokens.Valid() {
			name = "max_completion_tokens"
		}
		assert.Equal(t, name, apiErr.Param)
		assert.Contains(t, apiErr.Message, name+" 0: must be at least 1")
	}
}

// By default any model name is served (a one-model server, as
// llama-server does: tools that send "gpt-4o-mini" work); with
// StrictModel another name is OpenAI's 404 model_not_found, which the
// client raises as a not-found error.
func TestModelNames(t *testing.T) {
	ctx := context.Background()
	_, hs := testServer(t, Config{})
	free := client(hs.URL)
	res, err := free.Chat.Completions.New(ctx, chatParams(func(p *openai.ChatCompletionNewParams) { p.Model = "gpt-4o-mini"; p.MaxTokens = openai.Int(2) }))
	require.NoError(t, err)
	assert.Equal(t, "tinystories-mod", res.Model, "the response names the model that answered")

	_, strict := testServer(t, Config{StrictModel: true})
	c := client(strict.URL)
	_, err = c.Chat.Completions.New(ctx, chatParams(func(p *openai.ChatCompletionNewParams) { p.Model = "gpt-4o-mini" }))
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	assert.Equal(t, "model_not_found", apiErr.Code)
	assert.Equal(t, "model", apiErr.Param)
	assert.Equal(t, "invalid_request_error", apiErr.Type)
	assert.Contains(t, apiErr.Message, "gpt-4o-mini")
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Model: "davinci-002", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")}})
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	_, err = c.Chat.Completions.New(ctx, chatParams(func(p *openai.ChatCompletionNewParams) { p.MaxTokens = openai.Int(2) }))
	assert.NoError(t, err, "its own name")
}

// An array of prompts runs as concurrent sequences (three slots held at
// once with Parallel 3, on a model whose sessions share steps), each its
// own choice indexed as the prompts, each what that prompt alone gives;
// text prompts and token-id prompts alike.
func TestPromptArray(t *testing.T) {
	batched, err := modrun.Open(shipped, modrun.Options{Backend: modrun.BackendCPU, Parallel: 3})
	require.NoError(t, err)
	t.Cleanup(func() { batched.Close() })
	s, hs := testServerOn(t, batched, Config{Parallel: 3})
	var mu sync.Mutex
	most := 0
	s.tokenHook = func() {
		mu.Lock()
		most = max(most, len(s.slots))
		mu.Unlock()
	}
	c := client(hs.URL)
	prompts := []string{"Once upon a time", "The cat", "Lily and Tom went to the park", "One day"}
	want := make([]string, len(prompts))
	ids := make([][]int64, len(prompts))
	for i, p := range prompts {
		_, want[i] = greedy(t, p, 12)
		toks, err := batched.Tokenize(p, true)
		require.NoError(t, err)
		for _, id := range toks {
			ids[i] = append(ids[i], int64(id))
		}
	}
	for _, prompt := range []openai.CompletionNewParamsPromptUnion{{OfArrayOfStrings: prompts}, {OfArrayOfTokenArrays: ids}} {
		res, err := c.Completions.New(context.Background(), openai.CompletionNewParams{Model: "tinystories-mod", Prompt: prompt,
			MaxTokens: openai.Int(12), Temperature: openai.Float(0)})
		require.NoError(t, err)
		require.Len(t, res.Choices, len(prompts))
		for i, ch := range res.Choices {
			assert.Equal(t, int64(i), ch.Index)
			assert.Equal(t, want[i], ch.Text, "prompt %d", i)
			assert.Equal(t, openai.CompletionChoiceFinishReasonLength, ch.FinishReason)
		}
		assert.Equal(t, int64(12*len(prompts)), res.Usage.CompletionTokens)
	}
	assert.Equal(t, 3, most, "three prompts generated at once")

	// Sampled with a seed, a prompt gives the same text alone and in an
	// array (each prompt uses the seed); without one each draws afresh.
	sampled := func(prompts []string, seed bool) []string {
		p := openai.CompletionNewParams{Model: "tinystories-mod", Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: prompts},
			MaxTokens: openai.Int(24), Temperature: openai.Float(1)}
		if seed {
			p.Seed = openai.Int(7)
		}
		res, err := c.Completions.New(context.Background(), p)
		require.NoError(t, err)
		var out []string
		for _, ch := range res.Choices {
			out = append(out, ch.Text)
		}
		return out
	}
	alone := sampled(prompts[1:2], true)
	assert.Equal(t, alone[0], sampled(prompts, true)[1])
	assert.Equal(t, alone[0], sampled(prompts[:2], true)[1])
	same := sampled([]string{"Once upon a time", "Once upon a time", "Once upon a time"}, false)
	assert.False(t, same[0] == same[1] && same[1] == same[2], "three draws, not one: %q", same)

	// A streamed array is refused, naming the prompt.
	stream := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{Model: "tinystories-mod",
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: prompts}})
	for stream.Next() {
	}
	var apiErr *openai.Error
	require.True(t, errors.As(stream.Err(), &apiErr), "%v", stream.Err())
	assert.Equal(t, "prompt", apiErr.Param)
}

// lm-evaluation-harness's loglikelihood request: an array of prompts with
// echo, logprobs and max_tokens 0 gets, per prompt and indexed as they
// are, the prompt's text and its tokens' log-probabilities (the first
// null), nothing generated, finish_reason "length", as OpenAI answers.
func TestEvalHarnessRequest(t *testing.T) {
	_, hs := testServer(t, Config{Parallel: 2})
	c := client(hs.URL)
	ctx := context.Background()
	prompts := []string{"Once upon a time there was", "The little dog ran"}
	res, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "davinci-002", Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: prompts},
		MaxTokens: openai.Int(0), Echo: openai.Bool(true), Logprobs: openai.Int(1), Temperature: openai.Float(0), Seed: openai.Int(1234)})
	require.NoError(t, err)
	require.Len(t, res.Choices, 2)
	prompted := 0
	for i, ch := range res.Choices {
		assert.Equal(t, int64(i), ch.Index)
		assert.Equal(t, prompts[i], ch.Text)
		assert.Equal(t, openai.CompletionChoiceFinishReasonLength, ch.FinishReason)
		ids, err := model(t).Tokenize(prompts[i], true)
		require.NoError(t, err)
		prompted += len(ids)
		scored, err := model(t).LogProbs(ctx, ids, 1)
		require.NoError(t, err)
		require.Len(t, ch.Logprobs.TokenLogprobs, len(ids))
		assert.Contains(t, ch.Logprobs.JSON.TokenLogprobs.Raw(), "[null,")
		for j, st := range scored {
			assert.InDelta(t, st.LogProb, ch.Logprobs.TokenLogprobs[j+1], 1e-6, "prompt %d token %d", i, j+1)
		}
	}
	assert.Equal(t, int64(0), res.Usage.CompletionTokens)
	assert.Equal(t, int64(prompted), res.Usage.PromptTokens)
}

// The penalties and logit_bias a client sends are applied, not ignored: a
// bias of +100 makes every token that one, and strong penalties change a
// greedy answer.
func TestPenaltiesApplied(t *testing.T) {
	_, hs := testServer(t, Config{})
	c := client(hs.URL)
	ctx := context.Background()
	params := func(f func(*openai.CompletionNewParams)) openai.CompletionNewParams {
		p := openai.CompletionNewParams{Model: "tinystories-mod", MaxTokens: openai.Int(40), Temperature: openai.Float(0),
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}}
		f(&p)
		return p
	}
	text := strings.Repeat(tokenText(model(t), 300), 3)
	res, err := c.Completions.New(ctx, params(func(p *openai.CompletionNewParams) {
		p.MaxTokens, p.LogitBias = openai.Int(3), map[string]int64{"300": 100}
	}))
	require.NoError(t, err)
	assert.Equal(t, text, res.Choices[0].Text)
	plain, err := c.Completions.New(ctx, params(func(*openai.CompletionNewParams) {}))
	require.NoError(t, err)
	for _, f := range []func(*openai.CompletionNewParams){
		func(p *openai.CompletionNewParams) { p.FrequencyPenalty = openai.Float(2) },
		func(p *openai.CompletionNewParams) { p.PresencePenalty = openai.Float(2) },
	} {
		pen, err := c.Completions.New(ctx, params(f))
		require.NoError(t, err)
		assert.NotEqual(t, plain.Choices[0].Text, pen.Choices[0].Text)
	}
	status, body := post(t, hs.URL+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":40,"temperature":0,"repeat_penalty":1.5}`)
	require.Equal(t, http.StatusOK, status, "%v", body)
	assert.NotEqual(t, plain.Choices[0].Text, body["choices"].([]any)[0].(map[string]any)["text"])
}

// A wrong method on a known path is 405 with Allow (not 404), the page's
// favicon is 204 (not a 404 in the log), and a field of the wrong type is
// named in JSON's words, never Go's.
func TestMethodsAndMessages(t *testing.T) {
	_, hs := testServer(t, Config{})
	do := func(method, path, body string) (*http.Response, string) {
		r, err := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(r)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	for _, c := range []struct{ method, path, allow string }{
		{"GET", "/v1/chat/completions", "POST"},
		{"GET", "/v1/completions", "POST"},
		{"POST", "/v1/models", "GET"},
		{"DELETE", "/health", "GET, HEAD"},
		{"POST", "/", "GET, HEAD"},
	} {
		resp, body := do(c.method, c.path, "")
		assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "%s %s", c.method, c.path)
		assert.Equal(t, c.allow, resp.Header.Get("Allow"), "%s %s", c.method, c.path)
		assert.Contains(t, body, `"code":"method_not_allowed"`)
	}
	resp, _ := do("GET", "/nothing", "")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, _ = do("GET", "/favicon.ico", "")
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)

	for _, c := range []struct{ path, body, message string }{
		{"/v1/chat/completions", `{"messages":5}`, "messages: must be an array, not a number"},
		{"/v1/chat/completions", `[1,2]`, "the body must be a JSON object, not an array"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}`, "temperature: must be a number, not a string"},
		{"/v1/completions", `{"prompt":"x","max_tokens":1.5}`, "max_tokens: must be an integer, not a number 1.5"},
		{"/v1/completions", `{"prompt":"x","echo":"yes"}`, "echo: must be a boolean, not a string"},
		{"/v1/completions", `{"prompt":"x","stream_options":[]}`, "stream_options: must be an object, not an array"},
	} {
		status, out := post(t, hs.URL+c.path, c.body)
		assert.Equal(t, http.StatusBadRequest, status)
		assert.Equal(t, c.message, out["error"].(map[string]any)["message"], c.body)
	}
}

// modrun_kv_cache_tokens never reads more than the capacity, also when a
// generation fills the context (its last token drawn never runs).
func TestKVCacheTokensCapped(t *testing.T) {
	s, hs := testServer(t, Config{})
	status, out := post(t, hs.URL+"/v1/completions", `{"prompt":"Once","max_tokens":512,"ignore_eos":true}`)
	require.Equal(t, http.StatusOK, status, "%v", out)
	assert.Equal(t, 512.0, testutil.ToFloat64(s.metrics.kvLimit))
	assert.Equal(t, 512.0, testutil.ToFloat64(s.metrics.kvTokens), "full, not 513")
}

// The README's streamed chat example is what the server sends: its chunks'
// choices and tokens, chunk for chunk (the README elides ids, times and
// most routing with "...").
func TestReadmeSSEExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(readme), "$ curl -sN http://127.0.0.1:8080/v1/chat/completions")
	require.True(t, ok)
	_, body, ok := strings.Cut(after, "-d '")
	require.True(t, ok)
	body, after, _ = strings.Cut(body, "'\n")
	example, _, _ := strings.Cut(after, "```")
	var shown []string
	for _, l := range strings.Split(example, "\n") {
		if strings.HasPrefix(l, "data: {") {
			shown = append(shown, l)
		}
	}
	require.GreaterOrEqual(t, len(shown), 3)

	_, hs := testServer(t, Config{})
	resp, err := http.Post(hs.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var sent []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: {") {
			sent = append(sent, sc.Text())
		}
	}
	require.GreaterOrEqual(t, len(sent), len(shown))
	choices := regexp.MustCompile(`"choices":\[\{"index":0,"delta":\{[^}]*\}`)
	tokens := regexp.MustCompile(`"tokens":\[\{"id":\d+,"pos":\d+,"text":"[^"]*"`)
	for i := 1; i < len(shown); i++ { // the first chunk's prompt routing is elided
		j := i
		if i == len(shown)-1 {
			j = len(sent) - 1 // the finish: the README skips the chunks between
		}
		assert.Equal(t, choices.FindString(shown[i]), choices.FindString(sent[j]), "chunk %d", i)
		assert.Equal(t, tokens.FindString(shown[i]), tokens.FindString(sent[j]), "chunk %d", i)
	}
}
