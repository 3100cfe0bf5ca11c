package modrun

import (
	"image"
	"image/color"
	"math"
)

// The routing map's geometry, in pixels. Column i (the i-th token) and row j
// (the j-th routed layer) is the square cell at MapCellOrigin(i, j), MapCell
// wide, with MapGap of background around it.
const (
	MapCell = 9
	MapGap  = 1
)

// Colours of the map. A cell is coloured by the token's score in that layer
// (negative: skipped, towards blue; positive: through, towards orange),
// scaled by the largest |score| in the map; a token that went through is
// marked by a MapMark square in its cell's middle, a colour no score takes.
var (
	MapBackground = color.RGBA{0, 0, 0, 255}
	MapNotRun     = color.RGBA{48, 48, 48, 255} // a token not run yet (the last one)
	MapMark       = color.RGBA{255, 255, 255, 255}
	mapZero       = [3]float64{96, 96, 104}
	mapNegative   = [3]float64{24, 64, 200}
	mapPositive   = [3]float64{250, 150, 20}
)

// MapSize is the size of a map of columns tokens and rows routed layers.
func MapSize(columns, rows int) image.Point {
	return image.Pt(MapGap+columns*(MapCell+MapGap), MapGap+rows*(MapCell+MapGap))
}

// MapCellOrigin is the top-left pixel of column i, row j.
func MapCellOrigin(i, j int) image.Point {
	return image.Pt(MapGap+i*(MapCell+MapGap), MapGap+j*(MapCell+MapGap))
}

// RoutingMap draws tokens' routing: one column per token, one row per routed
// layer (rows of them, Info.RoutedLayers in order), each cell coloured by
// the router score and marked when the token went through the layer.
func RoutingMap(tokens []Token, rows int) *image.RGBA {
	img := image.NewRGBA(image.Rectangle{Max: MapSize(len(tokens), rows)})
	DrawRoutingMap(img, image.Point{}, tokens, rows)
	return img
}

// DrawRoutingMap draws RoutingMap(tokens, rows) into dst with its top-left
// corner at at, clipped to dst's bounds.
func DrawRoutingMap(dst *image.RGBA, at image.Point, tokens []Token, rows int) {
	size := MapSize(len(tokens), rows)
	fill(dst, image.Rectangle{Min: at, Max: at.Add(size)}, MapBackground)
	scale := float32(0)
	for _, t := range tokens {
		for _, r := range t.Routes {
			scale = max(scale, float32(math.Abs(float64(r.Score))))
		}
	}
	for i, t := range tokens {
		for j := 0; j < rows; j++ {
			o := at.Add(MapCellOrigin(i, j))
			cell := image.Rectangle{Min: o, Max: o.Add(image.Pt(MapCell, MapCell))}
			if j >= len(t.Routes) {
				fill(dst, cell, MapNotRun)
				continue
			}
			r := t.Routes[j]
			fill(dst, cell, scoreColour(r.Score, scale))
			if r.Selected {
				m := MapCell / 3
				fill(dst, image.Rectangle{Min: o.Add(image.Pt(m, m)), Max: o.Add(image.Pt(MapCell-m, MapCell-m))}, MapMark)
			}
		}
	}
}

// scoreColour blends from mapZero towards mapNegative or mapPositive with
// |score| / scale. No blend reaches MapMark's white.
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

// ReadRoutingMap reads back, from a picture holding a routing map of
// columns tokens and rows layers with its top-left corner at at, magnified
// scale times (1: as drawn), which cells are marked: [column][row]. It lets
// a test or a tool check a screenshot or a PNG against a generation's
// routes.
func ReadRoutingMap(img image.Image, at image.Point, scale, columns, rows int) [][]bool {
	out := make([][]bool, columns)
	for i := range out {
		out[i] = make([]bool, rows)
		for j := range out[i] {
			c := at.Add(MapCellOrigin(i, j).Add(image.Pt(MapCell/2, MapCell/2)).Mul(scale)).Add(image.Pt(scale/2, scale/2))
			r, g, b, _ := img.At(c.X, c.Y).RGBA()
			out[i][j] = r>>8 == 255 && g>>8 == 255 && b>>8 == 255
		}
	}
	return out
}

// Marked is what ReadRoutingMap should find for tokens: [column][row],
// true where a token went through a layer.
func Marked(tokens []Token, rows int) [][]bool {
	out := make([][]bool, len(tokens))
	for i, t := range tokens {
		out[i] = make([]bool, rows)
		for j := 0; j < rows && j < len(t.Routes); j++ {
			out[i][j] = t.Routes[j].Selected
		}
	}
	return out
}
