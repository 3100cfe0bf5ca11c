package server

import (
	"embed"
	"net/http"
)

// The web page: one HTML file with its script and style inline, no build
// step, nothing fetched from elsewhere (it works offline).
//
//go:embed web/index.html
var webFiles embed.FS

func webPage() http.Handler {
	page, err := webFiles.ReadFile("web/index.html")
	if err != nil {
		panic("server: the embedded page is missing: " + err.Error()) // a broken build, not input
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(page)
	})
}
