package server

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBench: the load tool counts every streamed token of every request,
// a TTFT per request, and no errors, against modrun's server; a server
// that is not there is an error.
func TestBench(t *testing.T) {
	_, hs := testServer(t, Config{Parallel: 2})
	res, err := Bench(context.Background(), BenchOptions{URL: hs.URL, Clients: 3, Requests: 2, Prompt: "Once upon a time", MaxTokens: 12})
	require.NoError(t, err)
	assert.Zero(t, res.Errors)
	assert.Equal(t, 3*2*12, res.Tokens)
	assert.Len(t, res.TTFT, 6)
	assert.Positive(t, res.TokensPerSecond())
	assert.LessOrEqual(t, res.TTFTQuantile(0.5), res.TTFTQuantile(0.99))

	_, err = Bench(context.Background(), BenchOptions{URL: "http://127.0.0.1:1", Model: "m", Clients: 1, Requests: 1, MaxTokens: 1})
	assert.ErrorContains(t, err, "every request failed")
	_, err = Bench(context.Background(), BenchOptions{URL: hs.URL, Clients: 0, Requests: 1, MaxTokens: 1})
	assert.ErrorContains(t, err, "clients 0")
}
