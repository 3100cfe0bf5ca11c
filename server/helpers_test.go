package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modrun/modrun"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The shipped MoD model (4 routed layers, 512 tokens of context, a 512
// token vocabulary, no chat template: the tests name chatml).
const shipped = "../models/tinystories-mod.gguf"

var (
	sharedModel     *modrun.Model
	sharedModelOnce sync.Once
	sharedModelErr  error
)

// model is the shipped model on the CPU backend, opened once for the
// package's tests (the server's tests close servers, never the model).
func model(t testing.TB) *modrun.Model {
	t.Helper()
	sharedModelOnce.Do(func() { sharedModel, sharedModelErr = modrun.Open(shipped, modrun.Options{Backend: modrun.BackendCPU}) })
	require.NoError(t, sharedModelErr)
	return sharedModel
}

// testServer runs a Server on the shipped model behind httptest; it is
// closed (and checked for leaked goroutines) at the end of the test.
func testServer(t *testing.T, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	return testServerOn(t, model(t), cfg)
}

// testServerOn is testServer with the model m.
func testServerOn(t *testing.T, m *modrun.Model, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	checkGoroutines(t)
	if cfg.ModelName == "" {
		cfg.ModelName = "tinystories-mod"
	}
	if cfg.ChatTemplate == "" {
		cfg.ChatTemplate = "chatml"
	}
	var logs syncBuffer
	if cfg.Log == nil {
		cfg.Log = &logs
	}
	s := New(cfg)
	s.SetModel(m)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return s, hs
}

// checkGoroutines fails the test when goroutines started during it are
// still running at its end (after the cleanups registered later, which run
// first): a generation, a stream or a queue wait left behind.
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("%d goroutines left running (%d before the test):\n%s", n-before, before, buf)
		}
	})
}

// syncBuffer is a log destination the handlers may write concurrently.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// post sends body (JSON) and returns the status and decoded response.
func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &out), "%s", b)
	return resp.StatusCode, out
}

// events reads an SSE stream's data lines until [DONE] (which must come).
func events(t *testing.T, body io.Reader) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			return out
		}
		var ev map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &ev), line)
		out = append(out, ev)
	}
	require.NoError(t, sc.Err())
	assert.Fail(t, "the stream ended without data: [DONE]")
	return out
}

// greedy is what a session alone generates for prompt (tokens ids, text).
func greedy(t testing.TB, prompt string, n int) ([]int32, string) {
	t.Helper()
	m := model(t)
	s := m.NewSession()
	defer s.Close()
	var ids []int32
	var text strings.Builder
	res, err := s.Generate(context.Background(), prompt, modrun.GenerateOptions{MaxTokens: n}, func(tk modrun.Token) error {
		if !tk.Prompt {
			ids = append(ids, tk.ID)
			text.WriteString(tk.Text)
		}
		return nil
	})
	require.NoError(t, err)
	text.WriteString(res.Tail)
	return ids, text.String()
}
