package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLogLines: each request's log line and /metrics count carry the
// status its handler answered (the errors' included, and the CORS
// preflight's), and a generation's line its usage's tokens.
func TestLogLines(t *testing.T) {
	var logs syncBuffer
	s, hs := testServer(t, Config{Log: &logs, APIKey: "k", CORS: "*"})
	do := func(method, path, body string, key bool) (int, string) {
		req, err := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		if key {
			req.Header.Set("Authorization", "Bearer k")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	const gen = `{"prompt":"Once upon a time","max_tokens":5,"temperature":0,"stop":["zzz"]}`
	cases := []struct {
		method, path, body string
		key                bool
		status             int
		endpoint           string
	}{
		{"GET", "/health", "", false, 200, "/health"},
		{"GET", "/", "", false, 200, "/"},
		{"GET", "/nope", "", false, 404, "other"},
		{"DELETE", "/v1/completions", "", true, 405, "/v1/completions"},
		{"POST", "/v1/completions", gen, false, 401, "/v1/completions"},
		{"POST", "/v1/completions", `{"prompt":"x","stop":3}`, true, 400, "/v1/completions"},
		{"OPTIONS", "/v1/chat/completions", "", false, 204, "/v1/chat/completions"},
		{"POST", "/v1/completions", gen, true, 200, "/v1/completions"},
	}
	for _, c := range cases {
		before := testutil.ToFloat64(s.metrics.requests.WithLabelValues(c.endpoint, strconv.Itoa(c.status)))
		mark := logs.String()
		status, body := do(c.method, c.path, c.body, c.key)
		require.Equal(t, c.status, status, "%s %s: %s", c.method, c.path, body)
		line := fmt.Sprintf("%s %s %d tokens=", c.method, c.path, c.status)
		require.Eventually(t, func() bool { return strings.Contains(strings.TrimPrefix(logs.String(), mark), line) }, 5e9, 1e7,
			"%s %s: the log line says %d:\n%s", c.method, c.path, c.status, logs.String())
		assert.Equal(t, before+1, testutil.ToFloat64(s.metrics.requests.WithLabelValues(c.endpoint, strconv.Itoa(c.status))), "%s %s", c.method, c.path)
	}
	// The generation's line counts its tokens (a stream that fails after
	// its 200: TestDisconnectCancels).
	last := logs.String()
	i := strings.LastIndex(last, "POST /v1/completions 200 tokens=")
	require.GreaterOrEqual(t, i, 0, last)
	var prompt, completion int
	_, err := fmt.Sscanf(last[i:], "POST /v1/completions 200 tokens=%d+%d", &prompt, &completion)
	require.NoError(t, err)
	assert.Equal(t, 5, completion)
	ids, err := s.model.Load().Tokenize("Once upon a time", true)
	require.NoError(t, err)
	assert.Equal(t, len(ids), prompt)

	// A chat's line counts what its usage says.
	status, body := do("POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"stop":"zzz"}`, true)
	require.Equal(t, http.StatusOK, status, body)
	var usage struct {
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &usage))
	require.Positive(t, usage.Usage.Prompt)
	assert.Contains(t, logs.String(), fmt.Sprintf("POST /v1/chat/completions 200 tokens=%d+%d ", usage.Usage.Prompt, usage.Usage.Completion))
}
