package modrun_test

import (
	"bytes"
	"image"
	"image/png"
	"testing"

	"github.com/modrun/modrun"
	"github.com/modrun/modrun/internal/mapgeom"
	"github.com/modrun/modrun/internal/maptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRoutingMapRoundTrip: the marks of a map drawn from a generation, once
// written to PNG and decoded, read back as the tokens' decisions; the map
// is not blank (both signs of score show).
func TestRoutingMapRoundTrip(t *testing.T) {
	m := open(t, modrun.Options{Backend: modrun.BackendCPU})
	toks, _ := run(t, m, "Once upon", 40)
	rows := len(m.Info().RoutedLayers)
	img := modrun.RoutingMap(toks, rows)
	assert.Equal(t, mapgeom.Size(43, 4), img.Bounds().Size())

	var buf bytes.Buffer
	require.NoError(t, png.Encode(&buf, img))
	back, err := png.Decode(&buf)
	require.NoError(t, err)
	want := maptest.Marked(toks, rows)
	assert.Equal(t, want, maptest.Read(back, image.Point{}, 1, len(toks), rows))
	marks := 0
	for _, col := range want {
		for _, m := range col {
			if m {
				marks++
			}
		}
	}
	assert.Positive(t, marks, "some token went through some layer")
	colours := map[[3]uint32]bool{}
	for y := 0; y < img.Bounds().Dy(); y++ {
		for x := 0; x < img.Bounds().Dx(); x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r, g, b}] = true
		}
	}
	assert.Greater(t, len(colours), 20, "cells coloured by score")

	// Drawn at an offset inside a bigger picture, clipped at its edge.
	big := image.NewRGBA(image.Rect(0, 0, 300, 100))
	modrun.DrawRoutingMap(big, image.Pt(7, 30), toks[:20], rows)
	assert.Equal(t, want[:20], maptest.Read(big, image.Pt(7, 30), 1, 20, rows))
	modrun.DrawRoutingMap(big, image.Pt(250, 90), toks, rows) // mostly outside: no panic
}
