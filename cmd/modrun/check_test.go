package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/poison"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInspectCheck: --check names each tensor holding NaN or infinite
// values (dequantized: a Q8_0 block's NaN scale spoils its 32 elements,
// past the first chunk) and exits 1; a clean file passes.
func TestInspectCheck(t *testing.T) {
	const shipped = "../../models/tinystories-mod.gguf"
	code, out, stderr := modrun(t, "inspect", "--check", shipped)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "check: every value of the 95 tensors is finite")

	// A Q8_0 tensor longer than one chunk, and an F32 one.
	n := checkChunk + 64
	w := gguf.NewWriter()
	require.NoError(t, w.SetKV("general.architecture", gguf.Scalar("none")))
	big := make([]float32, n)
	for i := range big {
		big[i] = float32(i%7) - 3
	}
	require.NoError(t, w.AddFloat32("big", gguf.TypeQ8_0, []uint64{uint64(n)}, big))
	require.NoError(t, w.AddFloat32("small", gguf.TypeF32, []uint64{4, 2}, []float32{1, 2, 3, 4, 5, 6, 7, 8}))
	clean := filepath.Join(t.TempDir(), "q8.gguf")
	require.NoError(t, w.WriteFile(clean))
	bad := poison.Copy(t, clean, "big", uint64(checkChunk+40), float32(math.NaN()))
	bad = poison.Copy(t, bad, "small", 6, float32(math.Inf(-1)))

	code, out, stderr = modrun(t, "inspect", "--check", bad)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "check: 2 of 2 tensors hold NaN or infinite values:")
	assert.Contains(t, out, "big: 32 non-finite of 1048640, the first at element 1048608 (NaN)")
	assert.Contains(t, out, "small: 1 non-finite of 8, the first at element 6 (-Inf)")
	assert.Contains(t, stderr, "2 tensors hold NaN or infinite values, the first big")

	code, out, _ = modrun(t, "inspect", "--check", "--json", bad)
	assert.Equal(t, 1, code)
	var r report
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.NotNil(t, r.Check)
	assert.Equal(t, []nonFinite{{"big", 32, 1048608, "NaN"}, {"small", 1, 6, "-Inf"}}, r.Check.NonFinite)
}
