package server

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modrun/modrun"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoad: 32 streaming clients at once, 2 requests each, to the shipped
// MoD model: no errors, and each greedy stream's text equals the same
// request run alone (no token lost, duplicated or taken from another
// sequence), whether the model's sessions take turns or share steps
// (Options.Parallel: batching; the server is the same). It logs p50/p99
// time to first token and the aggregate tokens/s (a bound check, not a
// benchmark: modrun bench serve measures).
func TestLoad(t *testing.T) {
	batched, err := modrun.Open(shipped, modrun.Options{Backend: modrun.BackendCPU, Parallel: 4})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, batched.Close()) })
	for _, c := range []struct {
		name string
		m    *modrun.Model
	}{{"turns", model(t)}, {"shared steps", batched}} {
		t.Run(c.name, func(t *testing.T) { load(t, c.m) })
	}
}

func load(t *testing.T, m *modrun.Model) {
	const clients, perClient, maxTokens = 32, 2, 16
	s, hs := testServerOn(t, m, Config{Parallel: 4, Queue: clients})
	prompts := []string{"Once upon a time", "The little dog", "One day, Lily", "Tom had a red ball", "The sun was", "Mom said", "In the park", "A big bird"}
	want := map[string]string{}
	for _, p := range prompts {
		_, want[p] = greedy(t, p, maxTokens)
	}
	var (
		mu     sync.Mutex
		ttfts  []time.Duration
		tokens int
		errs   []string
		wg     sync.WaitGroup
	)
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range perClient {
				p := prompts[(c*perClient+r)%len(prompts)]
				body := fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"stream":true,"temperature":0}`, p, maxTokens)
				sent := time.Now()
				resp, err := http.Post(hs.URL+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					mu.Lock()
					errs = append(errs, err.Error())
					mu.Unlock()
					return
				}
				var text strings.Builder
				var first time.Duration
				n := 0
				for _, ev := range events(t, resp.Body) {
					ch := ev["choices"].([]any)[0].(map[string]any)
					if s := ch["text"].(string); s != "" {
						if n == 0 {
							first = time.Since(sent)
						}
						n++
						text.WriteString(s)
					}
				}
				resp.Body.Close()
				mu.Lock()
				if resp.StatusCode != http.StatusOK {
					errs = append(errs, fmt.Sprintf("client %d request %d: status %d", c, r, resp.StatusCode))
				} else if text.String() != want[p] {
					errs = append(errs, fmt.Sprintf("client %d request %d (%q): %q, alone %q", c, r, p, text.String(), want[p]))
				}
				ttfts = append(ttfts, first)
				tokens += n
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	assert.Empty(t, errs)
	require.Len(t, ttfts, clients*perClient)
	slices.Sort(ttfts)
	q := func(p float64) time.Duration { return ttfts[int(p*float64(len(ttfts)-1))] }
	t.Logf("%d streaming clients x %d requests, --parallel 4: TTFT p50 %v, p99 %v; %d tokens in %v, %.0f tok/s aggregate",
		clients, perClient, q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond), tokens, wall.Round(time.Millisecond), float64(tokens)/wall.Seconds())
	// A handler frees its slot just after its stream's last byte.
	assert.Eventually(t, func() bool { return len(s.slots) == 0 && s.queued.Load() == 0 }, 5*time.Second, 5*time.Millisecond,
		"every slot is free and the queue empty")
}
