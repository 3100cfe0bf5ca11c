package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hold makes the server's generations stop after their first token until
// release is closed; started receives once per generation held.
func hold(s *Server) (started chan struct{}, release chan struct{}) {
	started, release = make(chan struct{}, 16), make(chan struct{})
	var n atomic.Int64
	s.tokenHook = func() {
		if n.Add(1) == 1 {
			started <- struct{}{}
			select {
			case <-release:
			case <-time.After(30 * time.Second): // a broken test fails, never hangs
			}
		}
	}
	return started, release
}

const longStream = `{"prompt":"Once upon a time","max_tokens":400,"stream":true}`

// TestDisconnectCancels: a client that goes away mid-stream cancels its
// generation (it stops within a token, far short of max_tokens), its slot
// and sequence are freed, and the next request is served.
func TestDisconnectCancels(t *testing.T) {
	var logs syncBuffer
	s, hs := testServer(t, Config{Log: &logs})
	started, release := hold(s)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "POST", hs.URL+"/v1/completions", strings.NewReader(longStream))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(line, "data: {"), line)
	<-started
	cancel() // the client goes away while the generation is held
	resp.Body.Close()
	time.Sleep(50 * time.Millisecond) // the server sees the connection close
	close(release)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "POST /v1/completions 499") }, 10*time.Second, 10*time.Millisecond, logs.String())
	assert.Zero(t, testutil.ToFloat64(s.metrics.active), "the slot is free")
	completed := testutil.ToFloat64(s.metrics.completionTokens)
	assert.Less(t, completed, 10.0, "the generation stopped within a token or so of the disconnect, not at max_tokens 400")
	// The tokens it ran count in /metrics as in its log line.
	var prompt, completion int
	_, err = fmt.Sscanf(logs.String()[strings.Index(logs.String(), "499 tokens="):], "499 tokens=%d+%d", &prompt, &completion)
	require.NoError(t, err, logs.String())
	require.Positive(t, completion)
	assert.Equal(t, float64(completion), completed, "the disconnected request's tokens are counted")
	assert.Equal(t, float64(prompt), testutil.ToFloat64(s.metrics.promptTokens))
	status, _ := post(t, hs.URL+"/v1/completions", `{"prompt":"Once","max_tokens":3}`)
	assert.Equal(t, http.StatusOK, status)
}

// TestQueueFull: with every slot taken, requests wait in the queue up to
// its bound; beyond it they get 503 with Retry-After, and /metrics shows
// the queue. The queued request runs once a slot frees.
func TestQueueFull(t *testing.T) {
	s, hs := testServer(t, Config{Parallel: 1, Queue: 1, RetryAfter: 2 * time.Second})
	s.slots <- struct{}{} // a request generating
	queued := make(chan int)
	go func() {
		resp, err := http.Post(hs.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Once","max_tokens":2}`))
		if err != nil {
			queued <- 0
			return
		}
		resp.Body.Close()
		queued <- resp.StatusCode
	}()
	require.Eventually(t, func() bool { return testutil.ToFloat64(s.metrics.queue) == 1 }, 10*time.Second, 5*time.Millisecond)
	impatient := &http.Client{Timeout: 10 * time.Second} // a request queued instead fails, not hangs
	resp, err := impatient.Post(hs.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Once","max_tokens":2}`))
	require.NoError(t, err, "the request beyond the queue is answered at once")
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "2", resp.Header.Get("Retry-After"))
	metrics, err := http.Get(hs.URL + "/metrics")
	require.NoError(t, err)
	defer metrics.Body.Close()
	body := new(strings.Builder)
	_, _ = bufio.NewReader(metrics.Body).WriteTo(body)
	assert.Contains(t, body.String(), "modrun_queue_depth 1")
	<-s.slots
	assert.Equal(t, http.StatusOK, <-queued)
	assert.Zero(t, testutil.ToFloat64(s.metrics.queue))
}

// serveOn runs s on a real listener, as modrun serve does.
func serveOn(t *testing.T, s *Server) (url string, served chan error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served = make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	return "http://" + l.Addr().String(), served
}

// TestShutdownDrains: Shutdown refuses new connections, lets the request
// in flight finish its stream, and returns nil; Serve returns nil.
func TestShutdownDrains(t *testing.T) {
	m := model(t)
	checkGoroutines(t)
	s := New(Config{ModelName: "m"})
	s.SetModel(m)
	started, release := hold(s)
	url, served := serveOn(t, s)
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Once upon a time","temperature":0,"max_tokens":30,"stream":true}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	<-started
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "http://"), time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, 10*time.Second, 5*time.Millisecond, "the listener closes")
	close(release)
	evs := events(t, resp.Body)
	text := ""
	for _, ev := range evs {
		text += ev["choices"].([]any)[0].(map[string]any)["text"].(string)
	}
	_, want := greedy(t, "Once upon a time", 30)
	assert.Equal(t, want, text, "the stream in flight finished whole")
	assert.NoError(t, <-shut)
	assert.NoError(t, <-served)
}

// TestShutdownCancels: a request still running when the grace period ends
// is cancelled (within a token) and told so in its stream; Shutdown says
// it cancelled.
func TestShutdownCancels(t *testing.T) {
	m := model(t)
	checkGoroutines(t)
	s := New(Config{ModelName: "m"})
	s.SetModel(m)
	started := make(chan struct{}, 1)
	s.tokenHook = func() {
		select {
		case started <- struct{}{}:
		default:
		}
		select { // each token waits for the grace period's end
		case <-s.stop.Done():
		case <-time.After(30 * time.Second):
		}
	}
	url, served := serveOn(t, s)
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(longStream))
	require.NoError(t, err)
	defer resp.Body.Close()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = s.Shutdown(ctx)
	assert.ErrorContains(t, err, "cancelled after the grace period")
	assert.Less(t, time.Since(start), 5*time.Second)
	evs := events(t, resp.Body)
	last := evs[len(evs)-1]
	assert.Contains(t, last["error"].(map[string]any)["message"], "shutting down")
	assert.NoError(t, <-served)
}

// TestShutdownUnderLoad: SIGTERM's path (Shutdown) while 16 clients
// stream request after request: every stream that began ends whole with
// [DONE] and its text is the greedy one, new connections are refused, and
// nothing is left running.
func TestShutdownUnderLoad(t *testing.T) {
	m := model(t)
	_, want := greedy(t, "Once upon a time", 24)
	checkGoroutines(t)
	s := New(Config{ModelName: "m", Parallel: 4, Queue: 64})
	s.SetModel(m)
	url, served := serveOn(t, s)
	var done, refused atomic.Int64
	bad := make(chan string, 64)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Once upon a time","temperature":0,"max_tokens":24,"stream":true}`))
				if err != nil {
					refused.Add(1)
					return // the listener is closed
				}
				text, finished := streamText(resp)
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusServiceUnavailable:
				case !finished || text != want:
					bad <- fmt.Sprintf("status %d, finished %v: %q", resp.StatusCode, finished, text)
					return
				default:
					done.Add(1)
				}
			}
		}()
	}
	require.Eventually(t, func() bool { return done.Load() >= 8 }, 30*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	assert.NoError(t, s.Shutdown(ctx), "everything in flight drained within the grace period")
	wg.Wait()
	close(bad)
	for b := range bad {
		t.Error(b)
	}
	assert.Equal(t, int64(16), refused.Load(), "each client ends on a refused connection")
	assert.NoError(t, <-served)
}

// streamText reads a completions stream: its text, and whether it ended
// with [DONE].
func streamText(resp *http.Response) (string, bool) {
	sc := bufio.NewScanner(resp.Body)
	var text strings.Builder
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return text.String(), true
		}
		var chunk struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &chunk) == nil && len(chunk.Choices) > 0 {
			text.WriteString(chunk.Choices[0].Text)
		}
	}
	return text.String(), false
}
