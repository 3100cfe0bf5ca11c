package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// BenchOptions drive Bench: Clients streaming clients at once, each
// sending Requests completions one after another to the OpenAI-compatible
// server at URL (modrun's or another's, such as llama-server).
type BenchOptions struct {
	URL       string // the server's root, e.g. http://127.0.0.1:8080
	Model     string // "" = the first of GET /v1/models
	Clients   int
	Requests  int    // per client
	Prompt    string // every request's prompt
	MaxTokens int    // every request's max_tokens (with ignore_eos, which llama-server honours)
	APIKey    string
}

// BenchResult is what Bench measured.
type BenchResult struct {
	Clients, Requests int
	Tokens            int           // streamed tokens (content chunks), all requests
	Wall              time.Duration // from the first request sent to the last stream's end
	TTFT              []time.Duration
	Errors            int
	FirstError        string // the first failed request's reason
}

// TokensPerSecond is the aggregate streaming rate.
func (r BenchResult) TokensPerSecond() float64 { return float64(r.Tokens) / r.Wall.Seconds() }

// TTFTQuantile is the q-quantile (0.5 = median) of the time to first token.
func (r BenchResult) TTFTQuantile(q float64) time.Duration {
	if len(r.TTFT) == 0 {
		return 0
	}
	s := slices.Clone(r.TTFT)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1)+0.5)]
}

// Bench runs the clients and measures time to first token and the
// aggregate tokens per second. A failed request counts in Errors; the
// first failure's reason is returned with the result when every request
// failed.
func Bench(ctx context.Context, o BenchOptions) (BenchResult, error) {
	res := BenchResult{Clients: o.Clients, Requests: o.Requests}
	if o.Clients < 1 || o.Requests < 1 || o.MaxTokens < 1 {
		return res, fmt.Errorf("server: bench: clients %d, requests %d, max tokens %d: each must be 1 or more", o.Clients, o.Requests, o.MaxTokens)
	}
	base := strings.TrimRight(o.URL, "/")
	if o.Model == "" {
		m, err := firstModel(ctx, base, o.APIKey)
		if err != nil {
			return res, err
		}
		o.Model = m
	}
	body, _ := json.Marshal(map[string]any{"model": o.Model, "prompt": o.Prompt, "max_tokens": o.MaxTokens, "stream": true,
		"temperature": 0, "ignore_eos": true})
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range o.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range o.Requests {
				ttft, n, err := benchRequest(ctx, base+"/v1/completions", o.APIKey, body)
				mu.Lock()
				if err != nil {
					res.Errors++
					firstErr = cmpErr(firstErr, err)
				} else {
					res.TTFT = append(res.TTFT, ttft)
					res.Tokens += n
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.Wall = time.Since(start)
	if firstErr != nil {
		res.FirstError = firstErr.Error()
	}
	if res.Errors == o.Clients*o.Requests {
		return res, fmt.Errorf("server: bench: every request failed: %w", firstErr)
	}
	return res, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// benchRequest sends one streaming completion and reads it to its end:
// the time to the first content chunk and the number of content chunks
// (one per token on modrun and on llama-server).
func benchRequest(ctx context.Context, url, key string, body []byte) (time.Duration, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	sent := time.Now()
	resp, err := benchClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, 0, fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	var ttft time.Duration
	n := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return ttft, n, nil
		}
		var chunk struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return 0, 0, fmt.Errorf("%s: a chunk that is not JSON: %w", url, err)
		}
		if len(chunk.Choices) > 0 && chunk.Choices[0].Text != "" {
			if n == 0 {
				ttft = time.Since(sent)
			}
			n++
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	return 0, 0, errors.New(url + ": the stream ended without data: [DONE]")
}

// benchClient opens a connection per request: llama-server closes idle
// keep-alive connections, and a POST on one it just closed fails (Go does
// not retry a POST); both servers are measured alike.
var benchClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func firstModel(ctx context.Context, base, key string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("server: bench: %w", err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) == 0 {
		return "", fmt.Errorf("server: bench: %s/v1/models lists no model (%v)", base, err)
	}
	return list.Data[0].ID, nil
}
