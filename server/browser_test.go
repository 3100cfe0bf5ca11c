package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modrun/modrun"
	"github.com/modrun/modrun/internal/maptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envScreenshot names a file for TestWebPage's screenshot (the README's
// picture is made so: MODRUN_SCREENSHOT=$PWD/docs/serve.png).
const envScreenshot = "MODRUN_SCREENSHOT"

// chromium finds Debian's chromium (make test's setup installs it), or
// skips saying so.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH: the browser test needs it (make test installs Debian's chromium)")
	return ""
}

// TestWebPage: in headless Chromium, the page at / takes a prompt typed
// into it, streams the answer (the API's own greedy answer), and draws the
// turn's routing map on its canvas: read back from the canvas's pixels,
// every cell's mark is where the stream's routing says.
func TestWebPage(t *testing.T) {
	exe := chromium(t)
	_, hs := testServer(t, Config{})
	// Chromium's helper processes may still write to its profile after
	// the browser exits, so the profile is removed with retries, not by
	// t.TempDir's one RemoveAll (which failed the test on it).
	profile, mkErr := os.MkdirTemp("", "modrun-chromium-")
	require.NoError(t, mkErr)
	t.Cleanup(func() {
		for try := 0; try < 50 && os.RemoveAll(profile) != nil; try++ {
			time.Sleep(100 * time.Millisecond)
		}
	})
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile), chromedp.WindowSize(1200, 800),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang fails, never blocks
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	// This chromedp's protocol tables predate some of Chromium's newer
	// event fields ("could not unmarshal event"); those events are not
	// ones the test waits on. Any other error is logged.
	logf := func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "could not unmarshal event") {
			t.Log(msg)
		}
	}
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithErrorf(logf))
	defer cancelBrowser()

	const system, prompt = "Tell a short story.", "Once upon a time"
	var answer, columns, rows, dataURL, state string
	var shot []byte
	err := chromedp.Run(bctx,
		chromedp.Navigate(hs.URL+"/"),
		chromedp.WaitVisible("#prompt", chromedp.ByID),
		chromedp.SetValue("#temperature", "0", chromedp.ByID),
		chromedp.SetValue("#max_tokens", "24", chromedp.ByID),
		chromedp.SendKeys("#system", system, chromedp.ByID),
		chromedp.SendKeys("#prompt", prompt, chromedp.ByID),
		chromedp.Click("#send", chromedp.ByID),
		chromedp.WaitVisible(`body[data-state="done"]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.body.dataset.state`, &state),
		chromedp.Text(".assistant .text", &answer, chromedp.ByQuery),
		chromedp.AttributeValue("#map", "data-columns", &columns, nil, chromedp.ByID),
		chromedp.AttributeValue("#map", "data-rows", &rows, nil, chromedp.ByID),
		chromedp.Evaluate(`document.getElementById("map").toDataURL("image/png")`, &dataURL),
		chromedp.FullScreenshot(&shot, 100), // 100: PNG,
	)
	require.NoError(t, err)
	require.Equal(t, "done", state)
	path := filepath.Join(t.TempDir(), "serve.png")
	if p := os.Getenv(envScreenshot); p != "" {
		path = p
	}
	require.NoError(t, os.WriteFile(path, shot, 0o644))
	t.Logf("screenshot: %s", path)

	// The same turn through the API: its answer and its tokens' routing.
	want, toks := streamChat(t, hs.URL, system, prompt, 24)
	assert.Equal(t, want, answer, "the page shows the streamed answer")
	assert.NotEmpty(t, answer)
	assert.Equal(t, len(toks), atoi(t, columns), "a column per token of the turn")
	nRows := len(model(t).Info().RoutedLayers)
	assert.Equal(t, nRows, atoi(t, rows))
	img, err := png.Decode(base64.NewDecoder(base64.StdEncoding, strings.NewReader(strings.TrimPrefix(dataURL, "data:image/png;base64,"))))
	require.NoError(t, err)
	got := maptest.Read(img, img.Bounds().Min, 1, len(toks), nRows)
	assert.Equal(t, maptest.Marked(toks, nRows), got, "the canvas's marks are the stream's routing")
	marks := 0
	for _, col := range got {
		for _, m := range col {
			if m {
				marks++
			}
		}
	}
	assert.Positive(t, marks, "some token went through some layer")
}

// streamChat runs one streamed chat turn through the API: the answer and
// every token of the turn with its routing, as the page receives them.
func streamChat(t *testing.T, url, system, prompt string, n int) (string, []modrun.Token) {
	body, _ := json.Marshal(map[string]any{"stream": true, "temperature": 0, "max_tokens": n,
		"messages": []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": prompt}}})
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var answer strings.Builder
	var toks []modrun.Token
	for _, ev := range events(t, resp.Body) {
		if ch := ev["choices"].([]any); len(ch) > 0 {
			if d, ok := ch[0].(map[string]any)["delta"].(map[string]any); ok {
				if s, ok := d["content"].(string); ok {
					answer.WriteString(s)
				}
			}
		}
		mod, ok := ev["mod"].(map[string]any)
		if !ok {
			continue
		}
		for _, raw := range mod["tokens"].([]any) {
			tk := raw.(map[string]any)
			toks = append(toks, modrun.Token{Pos: int(tk["pos"].(float64)), Routes: jsonRoutes(tk["routes"])})
		}
		routed, _ := mod["routed"].([]any) // tokens sent before they ran
		for _, raw := range routed {
			r := raw.(map[string]any)
			i := slices.IndexFunc(toks, func(t modrun.Token) bool { return t.Pos == int(r["pos"].(float64)) })
			require.GreaterOrEqual(t, i, 0, "routing for a token not sent: %v", r)
			toks[i].Routes = jsonRoutes(r["routes"])
		}
	}
	return answer.String(), toks
}

// jsonRoutes reads a mod chunk's routes of one token.
func jsonRoutes(v any) []modrun.Route {
	var routes []modrun.Route
	for _, r := range v.([]any) {
		r := r.(map[string]any)
		routes = append(routes, modrun.Route{Score: float32(r["score"].(float64)), Selected: r["selected"].(bool)})
	}
	return routes
}

func atoi(t *testing.T, s string) int {
	var n int
	require.NoError(t, json.Unmarshal([]byte(s), &n), "%q", s)
	return n
}
