package main

import (
	"context"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	api "github.com/modrun/modrun"
	"github.com/modrun/modrun/internal/mapgeom"
	"github.com/modrun/modrun/internal/maptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const shippedMoD = "../../models/tinystories-mod.gguf"

// TestRoutingMapFile: --routing-map writes a PNG whose marked cells are the
// API's routes for the same prompt and -n, and whose marks per row are the
// counts --stats prints.
func TestRoutingMapFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "map.png")
	code, out, stderr := modrun(t, "-m", shippedMoD, "-p", "Once upon", "-n", "40", "--backend", "cpu", "--stats", "--routing-map", path)
	require.Equal(t, 0, code, stderr)

	model, err := api.Open(shippedMoD, api.Options{Backend: api.BackendCPU})
	require.NoError(t, err)
	defer model.Close()
	var toks []api.Token
	text := ""
	_, err = model.NewSession().Generate(context.Background(), "Once upon", api.GenerateOptions{MaxTokens: 40}, func(tk api.Token) error {
		toks = append(toks, tk)
		text += tk.Text
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, text+"\n", out, "the same text")

	f, err := os.Open(path)
	require.NoError(t, err)
	img, err := png.Decode(f)
	f.Close()
	require.NoError(t, err)
	rows := len(model.Info().RoutedLayers)
	require.Equal(t, mapgeom.Size(len(toks), rows), img.Bounds().Size())
	marked := maptest.Read(img, image.Point{}, 1, len(toks), rows)
	assert.Equal(t, maptest.Marked(toks, rows), marked)

	stats := regexp.MustCompile(`layer +(\d+): +(\d+) of +(\d+) tokens went through`).FindAllStringSubmatch(stderr, -1)
	require.Len(t, stats, rows, stderr)
	for j, s := range stats {
		n := 0
		for i := range marked {
			if marked[i][j] {
				n++
			}
		}
		assert.Equal(t, s[2], strconv.Itoa(n), "layer %s: the map's marks are --stats' count", s[1])
		assert.Equal(t, s[3], strconv.Itoa(len(toks)-1), "every token but the last ran")
	}

	code, _, stderr = modrun(t, "-m", "../../models/tinystories-dense.gguf", "-p", "x", "-n", "2", "--routing-map", path)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "--routing-map: ../../models/tinystories-dense.gguf is a dense model")
	code, _, stderr = modrun(t, "-m", shippedMoD, "-p", "x", "-n", "2", "--backend", "cpu", "--routing-map", filepath.Join(t.TempDir(), "no", "such", "dir.png"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "such/dir.png: directory ")
}
