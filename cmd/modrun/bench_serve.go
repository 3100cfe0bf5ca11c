package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/modrun/modrun/server"
)

const benchServeArgs = "--url URL [--clients 1,4,8] [--requests N] [--prompt TEXT] [-n N] [--model NAME] [--api-key K] [--json]"

// benchServeMain measures a running OpenAI-compatible server (modrun
// serve, llama-server) with concurrent streaming clients: time to first
// token and aggregate tokens/s at each client count.
func benchServeMain(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench serve", benchServeArgs, stderr)
	url := fs.String("url", "", "the server's root `URL`, e.g. http://127.0.0.1:8080 (required)")
	clients := fs.String("clients", "1,4,8", "concurrent streaming clients: a comma-separated `LIST` of counts, measured in turn")
	requests := fs.Int("requests", 4, "completions each client sends, one after another `N`")
	prompt := fs.String("prompt", "Once upon a time", "every request's prompt `TEXT`")
	n := fs.Int("n", 64, "max_tokens of every request `N` (with ignore_eos, which llama-server honours)")
	model := fs.String("model", "", "the model `NAME` to ask for (default: the first of /v1/models)")
	key := fs.String("api-key", "", "Bearer `KEY` for a server started with one")
	asJSON := fs.Bool("json", false, "print one JSON document instead of the table")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *url == "" {
		return fmt.Errorf("%w: --url is required", errUsage)
	}
	var counts []int
	for _, f := range strings.Split(*clients, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 {
			return fmt.Errorf("%w: --clients %q: want counts of 1 or more, such as 1,4,8", errUsage, *clients)
		}
		counts = append(counts, c)
	}
	if *requests < 1 || *n < 1 {
		return fmt.Errorf("%w: --requests %d, -n %d: each must be 1 or more", errUsage, *requests, *n)
	}
	type row struct {
		Clients    int     `json:"clients"`
		Requests   int     `json:"requests"`
		Tokens     int     `json:"tokens"`
		Errors     int     `json:"errors"`
		WallS      float64 `json:"wall_s"`
		TokPerS    float64 `json:"tok_per_s"`
		TTFTP50MS  float64 `json:"ttft_p50_ms"`
		TTFTP99MS  float64 `json:"ttft_p99_ms"`
		FirstError string  `json:"first_error,omitempty"`
	}
	var rows []row
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	if !*asJSON {
		fmt.Fprintf(stdout, "%s, %d requests per client, max_tokens %d, streaming\n", *url, *requests, *n)
		fmt.Fprintf(stdout, "%8s %9s %7s %7s %10s %12s %12s\n", "clients", "requests", "tokens", "errors", "tok/s", "TTFT p50 ms", "TTFT p99 ms")
	}
	for _, c := range counts {
		res, err := server.Bench(context.Background(), server.BenchOptions{URL: *url, Model: *model, Clients: c, Requests: *requests,
			Prompt: *prompt, MaxTokens: *n, APIKey: *key})
		if err != nil {
			return fmt.Errorf("--url %s: %w", *url, err)
		}
		r := row{Clients: c, Requests: c * *requests, Tokens: res.Tokens, Errors: res.Errors, WallS: res.Wall.Seconds(),
			TokPerS: res.TokensPerSecond(), TTFTP50MS: ms(res.TTFTQuantile(0.5)), TTFTP99MS: ms(res.TTFTQuantile(0.99)), FirstError: res.FirstError}
		rows = append(rows, r)
		if !*asJSON {
			fmt.Fprintf(stdout, "%8d %9d %7d %7d %10.1f %12.1f %12.1f\n", r.Clients, r.Requests, r.Tokens, r.Errors, r.TokPerS, r.TTFTP50MS, r.TTFTP99MS)
			if r.FirstError != "" {
				fmt.Fprintf(stdout, "         first error: %s\n", r.FirstError)
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"url": *url, "max_tokens": *n, "requests_per_client": *requests, "rows": rows})
	}
	return nil
}
