package vulkan

import (
	"testing"

	"github.com/modrun/modrun/shaders"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpsInPieces: the output matmul of a long window is cut into pieces of
// rows whose bindings fit the range, at offsets that are multiples of the
// alignment, covering every row once, each binding only its rows; a short
// window is one op, bound for its own rows only (the buffer may be sized
// for more, and over the range). A matrix in two pieces takes two ops per
// piece of rows.
func TestOpsInPieces(t *testing.T) {
	v, err := shaders.Lookup(shaders.MatmulName(shaders.MatvecF32))
	require.NoError(t, err)
	k := &kernel{v: v, spec: []uint32{128, 64, 64, 16, 8, 4}}
	const maxRange, align = 128 << 20, 256
	for _, sh := range []struct{ vocab, cols uint32 }{{32000, 288}, {128256, 2048}, {128256, 72}, {1001, 36}} {
		m := batchMat{mm: k, rows: sh.vocab, cols: sh.cols, parts: []matPart{{rows: sh.vocab, wRows: sh.vocab}}}
		xRow, yRow := 4*uint64(sh.cols), 4*uint64(sh.vocab)
		short := m.opsInPieces(maxRange, align, nil, nil, 3)
		if assert.Len(t, short, 1) {
			assert.Equal(t, 3*xRow, short[0].binds[1].Size, "x bound for 3 rows")
			assert.Equal(t, 3*yRow, short[0].binds[2].Size, "y bound for 3 rows")
		}
		ops := m.opsInPieces(maxRange, align, nil, nil, 4096)
		next := uint64(0)
		for _, o := range ops {
			x, y := o.binds[1], o.binds[2]
			assert.Equal(t, next*xRow, x.Offset)
			assert.Equal(t, next*yRow, y.Offset)
			assert.Zero(t, x.Offset%align, "x offset %d", x.Offset)
			assert.Zero(t, y.Offset%align, "y offset %d", y.Offset)
			assert.LessOrEqual(t, y.Size, uint64(maxRange))
			assert.LessOrEqual(t, x.Size, uint64(maxRange))
			assert.Equal(t, x.Size/xRow, y.Size/yRow, "x and y bound for the same rows")
			next += y.Size / yRow
		}
		assert.Equal(t, uint64(4096), next, "vocab %d: every row once", sh.vocab)
		if 4096*yRow > maxRange {
			assert.Greater(t, len(ops), 1, "vocab %d: over the range, in pieces", sh.vocab)
		}

		two := m
		two.parts = []matPart{{rows: sh.vocab / 2, wRows: sh.vocab / 2}, {rows: sh.vocab - sh.vocab/2, wRows: sh.vocab - sh.vocab/2, yOff: sh.vocab / 2}}
		assert.Len(t, two.opsInPieces(maxRange, align, nil, nil, 4096), 2*len(ops))
	}
	// No range (0): one op.
	m := batchMat{mm: k, rows: 32000, cols: 288, parts: []matPart{{rows: 32000, wRows: 32000}}}
	assert.Len(t, m.opsInPieces(0, 256, nil, nil, 4096), 1)
}
