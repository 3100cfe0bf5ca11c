package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBadRequests: each bad request is a 400 with OpenAI's error object
// naming the field at fault, and the server goes on serving.
func TestBadRequests(t *testing.T) {
	_, hs := testServer(t, Config{})
	long := strings.Repeat(" once", 600) // 600 tokens and more: the context is 512
	chat, compl := hs.URL+"/v1/chat/completions", hs.URL+"/v1/completions"
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct {
		name, url, body, param, code string
	}{
		{"malformed JSON", chat, `{"messages":[`, "", "invalid_json"},
		{"not an object", chat, `[1,2]`, "", "invalid_json"},
		{"wrong type", chat, `{` + msgs + `,"temperature":"hot"}`, "temperature", "invalid_type"},
		{"wrong type of max_tokens", compl, `{"prompt":"x","max_tokens":1.5}`, "max_tokens", "invalid_type"},
		{"wrong type of messages", chat, `{"messages":"hi"}`, "messages", "invalid_type"},
		{"wrong type of content", chat, `{"messages":[{"role":"user","content":7}]}`, "messages.content", "invalid_type"},
		{"an image part", chat, `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, "messages.content", "invalid_type"},
		{"wrong type of prompt", compl, `{"prompt":{"a":1}}`, "prompt", "invalid_type"},
		{"wrong type of stop", compl, `{"prompt":"x","stop":3}`, "stop", "invalid_type"},
		{"prompt longer than the context", compl, `{"prompt":"` + long + `"}`, "prompt", "context_length_exceeded"},
		{"chat longer than the context", chat, `{"messages":[{"role":"user","content":"` + long + `"}]}`, "messages", "context_length_exceeded"},
		{"n > 1", chat, `{"n":2,` + msgs + `}`, "n", "invalid_value"},
		{"n > 1 in completions", compl, `{"n":3,"prompt":"x"}`, "n", "invalid_value"},
		{"negative max_tokens", compl, `{"prompt":"x","max_tokens":-1}`, "max_tokens", "integer_below_min_value"},
		{"huge max_tokens", chat, `{"max_tokens":1000000,` + msgs + `}`, "max_tokens", "invalid_value"},
		{"huge max_completion_tokens", chat, `{"max_completion_tokens":99999,` + msgs + `}`, "max_completion_tokens", "invalid_value"},
		{"empty messages", chat, `{"messages":[]}`, "messages", "invalid_value"},
		{"no messages", chat, `{}`, "messages", "invalid_value"},
		{"unknown role", chat, `{"messages":[{"role":"user","content":"a"},{"role":"wizard","content":"b"}]}`, "messages[1].role", "invalid_value"},
		{"function role", chat, `{"messages":[{"role":"function","content":"b"}]}`, "messages[0].role", "invalid_value"}, // OpenAI's old role; tool messages are taken (tools_test.go)
		{"temperature out of range", chat, `{"temperature":-1,` + msgs + `}`, "temperature", "invalid_value"},
		{"top_p out of range", compl, `{"prompt":"x","top_p":1.5}`, "top_p", "invalid_value"},
		{"top_logprobs too many", chat, `{"logprobs":true,"top_logprobs":21,` + msgs + `}`, "top_logprobs", "invalid_value"},
		{"top_logprobs without logprobs", chat, `{"top_logprobs":2,` + msgs + `}`, "top_logprobs", "invalid_value"},
		{"logprobs too many", compl, `{"prompt":"x","logprobs":50}`, "logprobs", "invalid_value"},
		{"an empty array of prompts", compl, `{"prompt":[]}`, "prompt", "invalid_value"},
		{"chat max_tokens 0", chat, `{"max_tokens":0,` + msgs + `}`, "max_tokens", "integer_below_min_value"},
		{"chat max_completion_tokens 0", chat, `{"max_completion_tokens":0,` + msgs + `}`, "max_completion_tokens", "integer_below_min_value"},
		{"frequency_penalty out of range", chat, `{"frequency_penalty":2.5,` + msgs + `}`, "frequency_penalty", "invalid_value"},
		{"presence_penalty out of range", compl, `{"prompt":"x","presence_penalty":-3}`, "presence_penalty", "invalid_value"},
		{"logit_bias of a word", compl, `{"prompt":"x","logit_bias":{"the":5}}`, "logit_bias", "invalid_value"},
		{"logit_bias outside the vocabulary", compl, `{"prompt":"x","logit_bias":{"512":5}}`, "logit_bias", "invalid_value"},
		{"logit_bias too large", compl, `{"prompt":"x","logit_bias":{"5":101}}`, "logit_bias", "invalid_value"},
		{"repeat_last_n below -1", compl, `{"prompt":"x","repeat_last_n":-2}`, "repeat_last_n", "invalid_value"},
		{"no prompt", compl, `{}`, "prompt", "invalid_value"},
		{"a token outside the vocabulary", compl, `{"prompt":[1,99999]}`, "prompt", "invalid_value"},
		{"empty stop", compl, `{"prompt":"x","stop":[""]}`, "stop", "invalid_value"},
		{"tokenize without content", hs.URL + "/tokenize", `{}`, "content", "invalid_value"},
		{"detokenize a bad id", hs.URL + "/detokenize", `{"tokens":[-1]}`, "tokens", "invalid_value"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body := post(t, c.url, c.body)
			assert.Equal(t, http.StatusBadRequest, status)
			e, ok := body["error"].(map[string]any)
			require.True(t, ok, "%v", body)
			assert.Equal(t, "invalid_request_error", e["type"])
			assert.Equal(t, c.code, e["code"])
			assert.NotEmpty(t, e["message"])
			if c.param == "" {
				assert.Nil(t, e["param"])
			} else {
				assert.Equal(t, c.param, e["param"])
				assert.Contains(t, e["message"], strings.SplitN(c.param, "[", 2)[0], "the message names the field")
			}
		})
	}
	status, body := post(t, compl, `{"prompt":"Once","max_tokens":2}`)
	assert.Equal(t, http.StatusOK, status, "%v", body)
}

// TestBodyLimitAuthCORS: a body over the limit is 413; without the API key
// the API is 401 (the page, /health and /metrics stay open); CORS answers
// the browser's preflight and marks responses.
func TestBodyLimitAuthCORS(t *testing.T) {
	_, hs := testServer(t, Config{MaxBody: 1 << 10, APIKey: "sekret", CORS: "http://example.test"})
	req := func(method, path, body, key string) *http.Response {
		r, err := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(r)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	big := `{"prompt":"` + strings.Repeat("a", 2<<10) + `"}`
	assert.Equal(t, http.StatusRequestEntityTooLarge, req("POST", "/v1/completions", big, "sekret").StatusCode)
	assert.Equal(t, http.StatusUnauthorized, req("POST", "/v1/completions", `{"prompt":"a"}`, "").StatusCode)
	assert.Equal(t, http.StatusUnauthorized, req("POST", "/v1/completions", `{"prompt":"a"}`, "wrong").StatusCode)
	assert.Equal(t, http.StatusUnauthorized, req("GET", "/v1/models", "", "").StatusCode)
	ok := req("POST", "/v1/completions", `{"prompt":"a","max_tokens":1}`, "sekret")
	assert.Equal(t, http.StatusOK, ok.StatusCode)
	assert.Equal(t, "http://example.test", ok.Header.Get("Access-Control-Allow-Origin"))
	for _, open := range []string{"/", "/health", "/metrics"} {
		assert.Equal(t, http.StatusOK, req("GET", open, "", "").StatusCode, open)
	}
	pre := req("OPTIONS", "/v1/chat/completions", "", "")
	assert.Equal(t, http.StatusNoContent, pre.StatusCode)
	assert.Contains(t, pre.Header.Get("Access-Control-Allow-Headers"), "Authorization")
	assert.Equal(t, http.StatusNotFound, req("GET", "/v2/nothing", "", "").StatusCode)
}

// TestHealthWhileLoading: before SetModel /health and the API say 503.
func TestHealthWhileLoading(t *testing.T) {
	m := model(t)
	checkGoroutines(t)
	s := New(Config{})
	rec := &recorderForTest{header: http.Header{}}
	r, _ := http.NewRequest("GET", "/health", nil)
	s.Handler().ServeHTTP(rec, r)
	assert.Equal(t, http.StatusServiceUnavailable, rec.status)
	assert.Contains(t, rec.body.String(), "loading")
	r, _ = http.NewRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"x"}`))
	rec = &recorderForTest{header: http.Header{}}
	s.Handler().ServeHTTP(rec, r)
	assert.Equal(t, http.StatusServiceUnavailable, rec.status)
	s.SetModel(m)
	r, _ = http.NewRequest("GET", "/health", nil)
	rec = &recorderForTest{header: http.Header{}}
	s.Handler().ServeHTTP(rec, r)
	assert.Equal(t, http.StatusOK, rec.status)
	require.NoError(t, s.Shutdown(context.Background()))
}

type recorderForTest struct {
	header http.Header
	status int
	body   strings.Builder
}

func (r *recorderForTest) Header() http.Header         { return r.header }
func (r *recorderForTest) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorderForTest) WriteHeader(s int)           { r.status = s }

// TestPanicRecovered: a handler's panic is a 500 for its request, logged,
// and the server goes on.
func TestPanicRecovered(t *testing.T) {
	var logs syncBuffer
	s, hs := testServer(t, Config{Log: &logs})
	boom := s.logged(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic("boom") }))
	rec := &recorderForTest{header: http.Header{}}
	r, _ := http.NewRequest("GET", "/x", nil)
	boom.ServeHTTP(rec, r)
	assert.Equal(t, http.StatusInternalServerError, rec.status)
	assert.Contains(t, rec.body.String(), `"type":"server_error"`)
	assert.Contains(t, logs.String(), "panic in GET /x: boom")
	assert.Contains(t, logs.String(), "GET /x 500")
	status, _ := post(t, hs.URL+"/v1/completions", `{"prompt":"Once","max_tokens":2}`)
	assert.Equal(t, http.StatusOK, status)
}
