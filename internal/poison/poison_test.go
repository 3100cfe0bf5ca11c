package poison

import (
	"math"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCopy: the copy differs from the shipped model in the one element.
func TestCopy(t *testing.T) {
	const src, name = "../../models/tinystories-mod.gguf", "blk.0.attn_q.weight"
	path := Copy(t, src, name, 5, float32(math.NaN()))
	read := func(p string) []float32 {
		f, err := gguf.Open(p)
		require.NoError(t, err)
		defer f.Close()
		v, err := f.TensorFloat32(name)
		require.NoError(t, err)
		return v
	}
	was, is := read(src), read(path)
	for i := range was {
		if math.IsNaN(float64(is[i])) {
			assert.Equal(t, 5, i, "only element 5 is NaN")
			continue
		}
		assert.Equal(t, was[i], is[i], "element %d", i)
	}
	assert.True(t, math.IsNaN(float64(is[5])))
}
