// Package poison writes, for tests, a copy of a GGUF file with one tensor
// element replaced by a value of the test's choosing (a NaN, an Inf), to
// show that a non-finite weight is never hidden.
package poison

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/modrun/modrun/gguf"
)

// Copy writes src to a new file in t.TempDir() with element i of tensor
// set to v, and returns its path. An F32 or F16 tensor takes v as its
// element; a block-quantized one (Q4_0 to Q8_0, whose 32-element blocks open
// with an F16 scale) takes v as the scale of element i's block, which puts
// v (or NaN) in every element of that block once dequantized.
func Copy(t testing.TB, src, tensor string, i uint64, v float32) string {
	t.Helper()
	path, err := write(src, filepath.Join(t.TempDir(), filepath.Base(src)), tensor, i, v)
	if err != nil {
		t.Fatalf("poison: %v", err)
	}
	return path
}

func write(src, dst, tensor string, i uint64, v float32) (string, error) {
	f, err := gguf.Open(src)
	if err != nil {
		return "", err
	}
	info, ok := f.Tensor(tensor)
	dataOffset := uint64(f.DataOffset)
	f.Close()
	if !ok {
		return "", fmt.Errorf("%s: no tensor %q", src, tensor)
	}
	if i >= info.Elements() {
		return "", fmt.Errorf("%s: tensor %q has %d elements, not %d", src, tensor, info.Elements(), i+1)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	at := dataOffset + info.Offset
	half, ok := f16(v)
	switch {
	case info.Type == gguf.TypeF32:
		binary.LittleEndian.PutUint32(b[at+4*i:], math.Float32bits(v))
	case info.Type == gguf.TypeBF16:
		binary.LittleEndian.PutUint16(b[at+2*i:], uint16(math.Float32bits(v)>>16))
	case !ok:
		return "", fmt.Errorf("%s: tensor %q is %s: only NaN and Inf go into an F16 or a block scale", src, tensor, info.Type)
	case info.Type == gguf.TypeF16:
		binary.LittleEndian.PutUint16(b[at+2*i:], half)
	case info.Type.BlockSize() == 32: // Q4_0 to Q8_0 (a K-quant keeps its scales elsewhere)
		block, size := uint64(info.Type.BlockSize()), uint64(info.Type.BlockBytes())
		binary.LittleEndian.PutUint16(b[at+i/block*size:], half)
	default:
		return "", fmt.Errorf("%s: tensor %q: type %s is not one poison knows", src, tensor, info.Type)
	}
	return dst, os.WriteFile(dst, b, 0o644)
}

// f16 is v's IEEE half-precision bits when v is NaN or an Inf (all a test
// of non-finite values needs).
func f16(v float32) (uint16, bool) {
	switch {
	case math.IsNaN(float64(v)):
		return 0x7e00, true
	case math.IsInf(float64(v), 1):
		return 0x7c00, true
	case math.IsInf(float64(v), -1):
		return 0xfc00, true
	}
	return 0, false
}
