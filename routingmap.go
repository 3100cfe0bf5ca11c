package modrun

import (
	"image"
	"image/color"
	"math"

	"github.com/modrun/modrun/internal/mapgeom"
)

// Colours of the map. A cell is coloured by the token's score in that layer
// (negative: skipped, towards blue; positive: through, towards orange),
// scaled by the largest |score| in the map; a token that went through is
// marked by a white square in its cell's middle, a colour no score takes
// (internal/maptest reads the marks back by it). Where the cells lie is
// internal/mapgeom's.
var (
	mapBackground = color.RGBA{0, 0, 0, 255}
	mapNotRun     = color.RGBA{48, 48, 48, 255} // a token not run yet (the last one)
	mapZero       = [3]float64{96, 96, 104}
	mapNegative   = [3]float64{24, 64, 200}
	mapPositive   = [3]float64{250, 150, 20}
)

// RoutingMap draws tokens' routing: one column per token, one row per routed
// layer (rows of them, Info.RoutedLayers in order), each cell coloured by
// the router score and marked when the token went through the layer. Each
// cell is 9 pixels square with a pixel of background around it.
func RoutingMap(tokens []Token, rows int) *image.RGBA {
	img := image.NewRGBA(image.Rectangle{Max: mapgeom.Size(len(tokens), rows)})
	DrawRoutingMap(img, image.Point{}, tokens, rows)
	return img
}

// DrawRoutingMap draws RoutingMap(tokens, rows) into dst with its top-left
// corner at at, clipped to dst's bounds.
func DrawRoutingMap(dst *image.RGBA, at image.Point, tokens []Token, rows int) {
	size := mapgeom.Size(len(tokens), rows)
	fill(dst, image.Rectangle{Min: at, Max: at.Add(size)}, mapBackground)
	scale := float32(0)
	for _, t := range tokens {
		for _, r := range t.Routes {
			scale = max(scale, float32(math.Abs(float64(r.Score))))
		}
	}
	for i, t := range tokens {
		for j := 0; j < rows; j++ {
			o := at.Add(mapgeom.CellOrigin(i, j))
			cell := image.Rectangle{Min: o, Max: o.Add(image.Pt(mapgeom.Cell, mapgeom.Cell))}
			if j >= len(t.Routes) {
				fill(dst, cell, mapNotRun)
				continue
			}
			r := t.Routes[j]
			fill(dst, cell, scoreColour(r.Score, scale))
			if r.Selected {
				fill(dst, mapgeom.MarkRect(i, j).Add(at), mapgeom.Mark)
			}
		}
	}
}

// scoreColour blends from mapZero towards mapNegative or mapPositive with
// |score| / scale. No blend reaches mapgeom.Mark's white.
func scoreColour(score, scale float32) color.RGBA {
	to, t := mapPositive, 0.0
	if scale > 0 {
		t = float64(score / scale)
	}
	if t < 0 {
		to, t = mapNegative, -t
	}
	t = math.Sqrt(min(t, 1)) // small scores still show their sign
	var c [3]uint8
	for k := range c {
		c[k] = uint8(mapZero[k] + t*(to[k]-mapZero[k]) + 0.5)
	}
	return color.RGBA{c[0], c[1], c[2], 255}
}

func fill(dst *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(dst.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			dst.SetRGBA(x, y, c)
		}
	}
}
