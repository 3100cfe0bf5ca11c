package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bench --parallel times P sequences at once on the CPU backend's
// scheduler against a single stream (always measured), each sequence
// checked against its run alone first; --json rows carry parallel and
// aggregate_decode_tokens_per_s. With --backends cpu,vulkan each backend
// has its rows (Vulkan: lavapipe here; skipped without a device).
func TestBenchParallel(t *testing.T) {
	args := []string{"bench", "--synthetic", "stories260k", "--capacity", "0.25", "--parallel", "3", "--prompt", "8", "-n", "4", "--repeats", "1", "--json"}
	code, stdout, stderr := modrun(t, args...)
	require.Equal(t, 0, code, stderr)
	checkParallelRows(t, stdout, []string{"cpu"})
	if code, stdout, stderr = modrun(t, append(args, "--backends", "cpu,vulkan")...); code != 0 && strings.Contains(stderr, "Vulkan") {
		t.Logf("no Vulkan device: %s", stderr)
	} else {
		require.Equal(t, 0, code, stderr)
		checkParallelRows(t, stdout, []string{"cpu", "vulkan"})
	}
	assert.Contains(t, stderr, "against each sequence alone")

	for _, bad := range [][]string{
		{"--parallel", "0"}, {"--parallel", "x"}, {"--parallel", "2", "--backends", "reference"}, {"--parallel", "2", "--batch-tokens", "0"},
	} {
		code, _, stderr := modrun(t, append([]string{"bench", "--synthetic", "stories260k"}, bad...)...)
		assert.Equal(t, 2, code, "%v: %s", bad, stderr)
		assert.Contains(t, stderr, "--"+map[bool]string{true: "batch-tokens", false: "parallel"}[bad[len(bad)-2] == "--batch-tokens"], bad)
	}
}

// bench --temp times sampled decoding: the report says how the tokens were
// drawn, greedy by default; with --parallel each sequence's sampled tokens
// are still checked equal to its run alone (its own seed), so the rows are
// timed.
func TestBenchSampled(t *testing.T) {
	var rep struct {
		Sampling string `json:"sampling"`
		Rows     []struct {
			Decode   float64 `json:"decode_tokens_per_s"`
			OnDevice *bool   `json:"sampled_on_device"`
		} `json:"rows"`
	}
	base := []string{"bench", "--synthetic", "stories260k", "--backends", "cpu", "--prompt", "8", "-n", "8", "--repeats", "1", "--json"}
	code, stdout, stderr := modrun(t, base...)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	assert.Equal(t, "greedy", rep.Sampling)
	code, stdout, stderr = modrun(t, append(base, "--temp", "0.8", "--top-k", "40")...)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	assert.Equal(t, "sampled at temperature 0.8, top-k 40, top-p 1, min-p 0", rep.Sampling)
	require.Len(t, rep.Rows, 1)
	assert.Positive(t, rep.Rows[0].Decode)
	require.NotNil(t, rep.Rows[0].OnDevice, "sampled_on_device reported")
	assert.False(t, *rep.Rows[0].OnDevice, "the CPU draws on the host")
	code, stdout, stderr = modrun(t, append(base, "--temp", "1", "--parallel", "3")...)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	assert.Equal(t, "sampled at temperature 1, top-k 0, top-p 1, min-p 0", rep.Sampling)
	assert.Contains(t, stderr, "against each sequence alone")
	code, stdout, stderr = modrun(t, append(base, "--temp", "1", "--repeat-penalty", "1.1")...)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	assert.Equal(t, "sampled at temperature 1, top-k 0, top-p 1, min-p 0, repeat penalty 1.1", rep.Sampling)
	code, _, stderr = modrun(t, append(base, "--repeat-penalty", "1.1")...)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--repeat-penalty needs --temp above 0")
}

// checkParallelRows checks bench --parallel 3's --json rows: dense,
// router and predictor twin, each on each backend at 1 and 3.
func checkParallelRows(t *testing.T, stdout string, backends []string) {
	t.Helper()
	var rep struct {
		Rows []struct {
			Model     string  `json:"model"`
			Routing   string  `json:"routing"`
			Backend   string  `json:"backend"`
			Parallel  int     `json:"parallel"`
			Aggregate float64 `json:"aggregate_decode_tokens_per_s"`
			PerSeq    float64 `json:"decode_tokens_per_s_per_sequence"`
			TTFT      float64 `json:"time_to_first_token_ms"`
			VsSingle  float64 `json:"aggregate_decode_vs_single"`
			Steps     int     `json:"steps"`
			Chained   *int    `json:"chained_steps"`
		} `json:"rows"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	require.Len(t, rep.Rows, 6*len(backends), "dense, router and predictor twin, each on each backend at 1 and 3")
	for i, r := range rep.Rows {
		assert.Equal(t, []int{1, 3}[i%2], r.Parallel)
		assert.Equal(t, backends[i/2%len(backends)], r.Backend)
		assert.Positive(t, r.Aggregate)
		assert.Positive(t, r.PerSeq)
		assert.Positive(t, r.TTFT)
		assert.Positive(t, r.Steps)
		if assert.NotNil(t, r.Chained, "chained_steps") {
			assert.LessOrEqual(t, *r.Chained, r.Steps)
			if r.Backend == "cpu" || r.Parallel == 1 { // the CPU's steps, and the runner's own (which chains inside a step), count none
				assert.Zero(t, *r.Chained)
			}
		}
		if r.Parallel == 1 {
			assert.InDelta(t, 1, r.VsSingle, 1e-9)
		}
	}
}
