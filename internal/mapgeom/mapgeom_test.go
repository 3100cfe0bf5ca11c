package mapgeom

import (
	"image"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Cells tile the map with one Gap between neighbours and around the edge,
// and a cell's mark lies strictly inside it, centred.
func TestGeometry(t *testing.T) {
	assert.Equal(t, image.Pt(Gap, Gap), CellOrigin(0, 0))
	size := Size(5, 3)
	last := CellOrigin(4, 2).Add(image.Pt(Cell+Gap, Cell+Gap))
	assert.Equal(t, size, last, "the last cell and its gap end the map")
	assert.Equal(t, Cell+Gap, CellOrigin(1, 0).X-CellOrigin(0, 0).X)
	assert.Equal(t, Cell+Gap, CellOrigin(0, 1).Y-CellOrigin(0, 0).Y)
	cell := image.Rectangle{Min: CellOrigin(2, 1), Max: CellOrigin(2, 1).Add(image.Pt(Cell, Cell))}
	mark := MarkRect(2, 1)
	assert.True(t, mark.In(cell) && mark != cell && !mark.Empty())
	assert.Equal(t, cell.Min.Add(cell.Max), mark.Min.Add(mark.Max), "centred")
}
