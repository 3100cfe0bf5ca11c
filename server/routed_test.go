package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/modrun/modrun"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStreamRoutesLate: a streamed token goes out as soon as it is drawn,
// before it runs (the time to first token is the prompt's step alone), so
// its routing comes in a later chunk's mod.routed; merged by position, the
// stream's routing is the API's for the same turn, every token of it,
// whether the sessions take turns or share steps.
func TestStreamRoutesLate(t *testing.T) {
	batched, err := modrun.Open(shipped, modrun.Options{Backend: modrun.BackendCPU, Parallel: 2})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, batched.Close()) })
	const system, prompt, n = "Tell a short story.", "Once upon a time", 12
	want := chatRoutes(t, system, prompt, n)
	for _, c := range []struct {
		name string
		m    *modrun.Model
	}{{"turns", model(t)}, {"shared steps", batched}} {
		t.Run(c.name, func(t *testing.T) {
			_, hs := testServerOn(t, c.m, Config{})
			_, got := streamChat(t, hs.URL, system, prompt, n)
			require.Len(t, got, len(want))
			for i := range want {
				require.Len(t, got[i].Routes, len(want[i]), "token %d", i)
				for j, w := range want[i] {
					g := got[i].Routes[j]
					assert.Equal(t, w.Selected, g.Selected, "token %d, routed layer %d", i, j)
					// The shared step's products sum in another order than
					// the lone runner's: scores agree to ~1e-6 of their size.
					assert.InDelta(t, w.Score, g.Score, 1e-4, "token %d, routed layer %d", i, j)
				}
			}
			// Each token's routing goes with the next token's chunk (the
			// last token's never comes: it does not run).
			assert.Equal(t, 5, routedChunks(t, hs.URL+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":6,"stream":true}`),
				"completions: routing sent with the next token")
			assert.Equal(t, 5, routedChunks(t, hs.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":6,"stream":true}`),
				"chat: routing sent with the next token")
		})
	}
}

// chatRoutes is the routing of every token of a chat turn (the prompt's,
// then the answer's; the last new token's nil: it never ran) from the API.
func chatRoutes(t *testing.T, system, prompt string, n int) [][]modrun.Route {
	chat, err := model(t).NewChat("chatml")
	require.NoError(t, err)
	defer chat.Close()
	var out [][]modrun.Route
	_, err = chat.Reply(context.Background(), []modrun.Message{{Role: modrun.RoleSystem, Content: system}, {Role: modrun.RoleUser, Content: prompt}},
		modrun.ChatOptions{GenerateOptions: modrun.GenerateOptions{MaxTokens: n}}, func(tk modrun.Token) error {
			var routes []modrun.Route // as the stream has them: no layer numbers
			for _, r := range tk.Routes {
				routes = append(routes, modrun.Route{Score: r.Score, Selected: r.Selected})
			}
			out = append(out, routes)
			return nil
		})
	require.NoError(t, err)
	require.Nil(t, out[len(out)-1])
	return out
}

// routedChunks counts a stream's chunks with mod.routed entries, each
// the routing of one token.
func routedChunks(t *testing.T, url, body string) int {
	resp, err := http.Post(url, "application/json", bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	defer resp.Body.Close()
	n := 0
	for _, ev := range events(t, resp.Body) {
		b, _ := json.Marshal(ev["mod"])
		var mod struct {
			Routed []modRouted `json:"routed"`
		}
		require.NoError(t, json.Unmarshal(b, &mod))
		if len(mod.Routed) > 0 {
			assert.Len(t, mod.Routed, 1)
			n++
		}
	}
	return n
}
