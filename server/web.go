package server

import (
	"bytes"
	"embed"
	"fmt"
	"net/http"

	"github.com/modrun/modrun/internal/mapgeom"
)

// The web page: one HTML file with its script and style inline, no build
// step, nothing fetched from elsewhere (it works offline). Its routing map
// takes the geometry of internal/mapgeom, filled in here, so that it lies
// cell for cell where modrun.RoutingMap's would (the browser test reads it
// back with internal/maptest).
//
//go:embed web/index.html
var webFiles embed.FS

func webPage() http.Handler {
	page, err := webFiles.ReadFile("web/index.html")
	if err != nil {
		panic("server: the embedded page is missing: " + err.Error()) // a broken build, not input
	}
	m := mapgeom.Mark
	for k, v := range map[string]string{"{{CELL}}": fmt.Sprint(mapgeom.Cell), "{{GAP}}": fmt.Sprint(mapgeom.Gap),
		"{{MARK}}": fmt.Sprintf("%d, %d, %d", m.R, m.G, m.B)} {
		page = bytes.ReplaceAll(page, []byte(k), []byte(v))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(page)
	})
}
