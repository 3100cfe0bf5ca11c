// Package mapgeom is the routing map's geometry, in pixels: where each cell
// of modrun.RoutingMap lies and how big a map is. The API draws by it, and
// the viewer, the server's web page and the tests that read a map back
// (internal/maptest) place cells by it, so that all of them agree.
package mapgeom

import (
	"image"
	"image/color"
)

// Column i (the i-th token) and row j (the j-th routed layer) is the square
// cell at CellOrigin(i, j), Cell wide, with Gap of background around it.
const (
	Cell = 9
	Gap  = 1
)

// Mark is the colour of the square in the middle of a cell whose token went
// through the layer: a colour no score takes, so a reader can find it.
var Mark = color.RGBA{255, 255, 255, 255}

// Size is the size of a map of columns tokens and rows routed layers.
func Size(columns, rows int) image.Point {
	return image.Pt(Gap+columns*(Cell+Gap), Gap+rows*(Cell+Gap))
}

// CellOrigin is the top-left pixel of column i, row j.
func CellOrigin(i, j int) image.Point {
	return image.Pt(Gap+i*(Cell+Gap), Gap+j*(Cell+Gap))
}

// MarkRect is the marked square of the cell at column i, row j: its middle
// third.
func MarkRect(i, j int) image.Rectangle {
	o, m := CellOrigin(i, j), Cell/3
	return image.Rectangle{Min: o.Add(image.Pt(m, m)), Max: o.Add(image.Pt(Cell-m, Cell-m))}
}
