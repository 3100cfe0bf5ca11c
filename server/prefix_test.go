package server

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"github.com/modrun/modrun"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChatPrefixCache: a chat front-end resends the whole conversation
// each turn. With the prefix cache (serve's default, here at --parallel 1)
// the second turn's prompt takes the first turn's blocks from the cache,
// says so in usage.prompt_tokens_details.cached_tokens and the metrics,
// and answers as a server without the cache does. Without it (a model of
// its own, so that no other test's sequence is on its runner), the runner
// still holds the last sequence: the second turn runs only what follows
// it, and says so too.
func TestChatPrefixCache(t *testing.T) {
	cached, err := modrun.Open(shipped, modrun.Options{Backend: modrun.BackendCPU, PrefixCache: true})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, cached.Close()) })
	type turn struct {
		reply                string
		prompt, cachedTokens int
	}
	conversation := func(m *modrun.Model) (turns []turn, metrics string) {
		_, hs := testServerOn(t, m, Config{})
		msgs := []map[string]string{
			{"role": "system", "content": "You tell short stories about a girl named Lily and her dog Max, who live by the sea."},
			{"role": "user", "content": "Tell me a story."},
		}
		for _, next := range []string{"And then?", "What did Max do?"} {
			body, err := json.Marshal(map[string]any{"messages": msgs, "max_tokens": 8, "temperature": 0})
			require.NoError(t, err)
			status, out := post(t, hs.URL+"/v1/chat/completions", string(body))
			require.Equal(t, http.StatusOK, status, "%v", out)
			reply := out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
			usage := out["usage"].(map[string]any)
			details := usage["prompt_tokens_details"].(map[string]any)
			turns = append(turns, turn{reply, int(usage["prompt_tokens"].(float64)), int(details["cached_tokens"].(float64))})
			msgs = append(msgs, map[string]string{"role": "assistant", "content": reply}, map[string]string{"role": "user", "content": next})
		}
		resp, err := http.Get(hs.URL + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return turns, string(b)
	}
	fresh, err := modrun.Open(shipped, modrun.Options{Backend: modrun.BackendCPU})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, fresh.Close()) })
	plain, plainMetrics := conversation(fresh)
	got, gotMetrics := conversation(cached)
	require.Len(t, got, 2)
	for i := range got {
		assert.Equal(t, plain[i].reply, got[i].reply, "turn %d answers as without the cache", i)
		assert.Equal(t, plain[i].prompt, got[i].prompt, "turn %d counts its whole prompt", i)
	}
	assert.Zero(t, plain[0].cachedTokens, "no cache: the first turn ran whole")
	assert.GreaterOrEqual(t, plain[1].cachedTokens, got[1].cachedTokens, "no pages: the runner held the whole first turn (the pages its full blocks)")
	assert.Zero(t, got[0].cachedTokens, "the first turn ran whole")
	assert.GreaterOrEqual(t, got[1].cachedTokens, 32, "the second turn took the first one's blocks")
	assert.Less(t, got[1].cachedTokens, got[1].prompt, "and ran its new message")
	cachedTotal := regexp.MustCompile(`(?m)^modrun_prompt_tokens_cached_total (\d+)$`)
	assert.Equal(t, strconv.Itoa(plain[1].cachedTokens), cachedTotal.FindStringSubmatch(plainMetrics)[1])
	assert.Equal(t, strconv.Itoa(got[1].cachedTokens), cachedTotal.FindStringSubmatch(gotMetrics)[1])
	// The loop's steps, and none chained on the CPU.
	steps := regexp.MustCompile(`(?m)^modrun_steps_total (\d+)$`).FindStringSubmatch(gotMetrics)
	require.NotNil(t, steps, "modrun_steps_total")
	n, _ := strconv.Atoi(steps[1])
	assert.Greater(t, n, 2, "steps")
	assert.Regexp(t, `(?m)^modrun_chained_steps_total 0$`, gotMetrics)
}
