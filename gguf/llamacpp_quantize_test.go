package gguf

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/internal/shared"
)

// TestQuantizeMatchesLlamaCpp: quantizing the F32 model's tensors gives the
// bytes llama-quantize wrote for the same tensor in each mix (it quantizes
// with ggml's reference quantizers when it has no importance matrix), block
// for block.
func TestQuantizeMatchesLlamaCpp(t *testing.T) {
	dir := filepath.Dir(shared.Path(t, "quant/kq-f32.gguf"))
	src, err := Open(filepath.Join(dir, "kq-f32.gguf"))
	require.NoError(t, err)
	defer src.Close()
	seen := map[TensorType]int{}
	for _, mix := range []string{"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"} {
		t.Run(mix, func(t *testing.T) {
			f, err := Open(shared.Path(t, "quant/kq-"+mix+".gguf"))
			require.NoError(t, err)
			defer f.Close()
			for _, ti := range f.Tensors {
				if ti.Type == TypeF32 {
					continue // norms stay F32
				}
				x, err := src.TensorFloat32(ti.Name)
				require.NoError(t, err)
				got, err := Quantize(ti.Type, x)
				require.NoError(t, err, ti.Name)
				want, err := f.TensorData(ti.Name)
				require.NoError(t, err)
				seen[ti.Type]++
				if !bytes.Equal(want, got) {
					bb := ti.Type.BlockBytes()
					bad := 0
					first := -1
					for b := 0; b < len(want)/bb; b++ {
						if !bytes.Equal(want[b*bb:(b+1)*bb], got[b*bb:(b+1)*bb]) {
							bad++
							if first < 0 {
								first = b
							}
						}
					}
					t.Errorf("%s (%s): %d of %d blocks differ, first %d:\n got %x\nwant %x", ti.Name, ti.Type, bad, len(want)/bb, first,
						got[first*bb:(first+1)*bb], want[first*bb:(first+1)*bb])
				}
			}
		})
	}
	for _, typ := range SupportedTypes[3:] {
		assert.Positive(t, seen[typ], "no llama.cpp tensor of type %s was compared", typ)
	}
}
