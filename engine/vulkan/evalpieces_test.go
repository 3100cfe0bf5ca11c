package vulkan

import (
	"testing"

	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
)

// TestOpsInPieces: the output matmul of a long window is cut into pieces of
// a multiple of 64 rows whose bindings fit maxStorageBufferRange, at offsets
// that are multiples of 256 bytes, covering every row once; a short window
// is one op. A matrix in two pieces takes two ops per piece of rows.
func TestOpsInPieces(t *testing.T) {
	k := &kernel{spec: []uint32{128, 64, 64, 16, 8, 4}}
	m := evalMat{mm: k, rows: 32000, cols: 288, parts: []matPart{{rows: 32000, wRows: 32000}}}
	lim := vk.Limits{MaxStorageBufferRange: 128 << 20}
	assert.Len(t, m.opsInPieces(lim, nil, nil, 1000), 1)
	ops := m.opsInPieces(lim, nil, nil, 4096)
	per := int(lim.MaxStorageBufferRange / (4 * 32000) / 64 * 64)
	assert.Len(t, ops, (4096+per-1)/per)
	next := uint64(0)
	for _, o := range ops {
		x, y := o.binds[1], o.binds[2]
		assert.Equal(t, next*4*288, x.Offset)
		assert.Equal(t, next*4*32000, y.Offset)
		assert.Zero(t, x.Offset%256)
		assert.Zero(t, y.Offset%256)
		assert.LessOrEqual(t, y.Size, lim.MaxStorageBufferRange)
		next += y.Size / (4 * 32000)
	}
	assert.Equal(t, uint64(4096), next)

	two := m
	two.parts = []matPart{{rows: 20000, wRows: 20000}, {rows: 12000, wRows: 12000, yOff: 20000}}
	assert.Len(t, two.opsInPieces(lim, nil, nil, 4096), 2*len(ops))
}
