package server

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStopStrings: the text ends before the first stop string, which is
// never sent, streamed or not (a stop string split over tokens included),
// and finish_reason is "stop".
func TestStopStrings(t *testing.T) {
	_, hs := testServer(t, Config{})
	_, full := greedy(t, "Once upon a time", 40)
	// full: ", there was a little girl named Lily. She ..."
	i := strings.Index(full, "girl")
	require.Positive(t, i, full)
	for _, stop := range []string{"girl", "irl nam", "l"} {
		want := full[:strings.Index(full, stop)]
		body := `{"prompt":"Once upon a time","temperature":0,"max_tokens":40,"stop":["zzz","` + stop + `"]}`
		status, out := post(t, hs.URL+"/v1/completions", body)
		require.Equal(t, http.StatusOK, status, "%v", out)
		ch := out["choices"].([]any)[0].(map[string]any)
		assert.Equal(t, want, ch["text"], "stop %q", stop)
		assert.Equal(t, "stop", ch["finish_reason"])

		resp, err := http.Post(hs.URL+"/v1/completions", "application/json", strings.NewReader(strings.Replace(body, `{`, `{"stream":true,`, 1)))
		require.NoError(t, err)
		streamed, reason := "", ""
		for _, ev := range events(t, resp.Body) {
			c := ev["choices"].([]any)[0].(map[string]any)
			streamed += c["text"].(string)
			if r, ok := c["finish_reason"].(string); ok {
				reason = r
			}
		}
		resp.Body.Close()
		assert.Equal(t, want, streamed, "stop %q, streamed", stop)
		assert.Equal(t, "stop", reason)
	}
	// A stop string that never comes holds nothing back at the end.
	status, out := post(t, hs.URL+"/v1/completions", `{"prompt":"Once upon a time","temperature":0,"max_tokens":40,"stop":"Lily!!"}`)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, full, out["choices"].([]any)[0].(map[string]any)["text"])
}
