// Package maptest reads a routing map (modrun.RoutingMap) back from a
// picture, so that tests of the API, the CLI's --routing-map and the viewer
// can check a PNG or a screenshot against a generation's routes. It is for
// tests only; the API exports the drawing, not the reading.
package maptest

import (
	"image"

	"github.com/modrun/modrun"
	"github.com/modrun/modrun/internal/mapgeom"
)

// Read reads back, from img holding a routing map of columns tokens and rows
// layers with its top-left corner at at, magnified scale times (1: as drawn),
// which cells are marked: [column][row]. A mark is a white square in a
// cell's middle, a colour no score takes.
func Read(img image.Image, at image.Point, scale, columns, rows int) [][]bool {
	out := make([][]bool, columns)
	for i := range out {
		out[i] = make([]bool, rows)
		for j := range out[i] {
			c := at.Add(mapgeom.CellOrigin(i, j).Add(image.Pt(mapgeom.Cell/2, mapgeom.Cell/2)).Mul(scale)).Add(image.Pt(scale/2, scale/2))
			r, g, b, _ := img.At(c.X, c.Y).RGBA()
			mr, mg, mb, _ := mapgeom.Mark.RGBA()
			out[i][j] = r == mr && g == mg && b == mb
		}
	}
	return out
}

// Marked is what Read should find for tokens: [column][row], true where a
// token went through a layer.
func Marked(tokens []modrun.Token, rows int) [][]bool {
	out := make([][]bool, len(tokens))
	for i, t := range tokens {
		out[i] = make([]bool, rows)
		for j := 0; j < rows && j < len(t.Routes); j++ {
			out[i][j] = t.Routes[j].Selected
		}
	}
	return out
}
