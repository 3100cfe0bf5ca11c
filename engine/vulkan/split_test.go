package vulkan

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// splitRows is the one range splitter: all rows when they fit (or there is
// no limit), else the most whole steps that fit, and not ok when not one
// step does; alignedStep is the rows after which every binding is aligned
// again.
func TestSplitRows(t *testing.T) {
	for _, c := range []struct {
		maxRange  uint64
		n         int
		rowBytes  uint64
		step, per int
		ok        bool
	}{
		{0, 1000, 1 << 20, 64, 1000, true},
		{100, 10, 10, 4, 10, true},
		{100, 11, 10, 4, 8, true},
		{100, 11, 10, 1, 10, true},
		{100, 11, 30, 4, 0, false},
	} {
		per, ok := splitRows(c.maxRange, c.n, c.rowBytes, c.step)
		assert.Equal(t, c.per, per, "%+v", c)
		assert.Equal(t, c.ok, ok, "%+v", c)
	}
	assert.Equal(t, 64, alignedStep(256, 4))
	assert.Equal(t, 1, alignedStep(4, 4))
	assert.Equal(t, 1, alignedStep(1, 4), "no alignment")
	assert.Equal(t, 64, alignedStep(256, 48, 4), "16 rows of 48 bytes, 64 of 4: both every 64")
	assert.Equal(t, 16, alignedStep(256, 48))
}
