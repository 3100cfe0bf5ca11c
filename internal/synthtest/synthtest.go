// Package synthtest builds the small synthetic model that the tests of
// engine and bench share (mod/synth's generator at the tiny shape), so that
// both run the same model without a copy of its shape in each; and saves
// the random-weight models of the grammar and server tests (Save).
package synthtest

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod/synth"
)

// Tiny is a synthetic shape with GQA and widths the quantized types take.
var Tiny = synth.Shape{Name: "tiny", NEmbd: 128, NLayer: 4, NHead: 4, NKVHead: 2, NFF: 256, NVocab: 600, ContextLen: 128}

// Build makes Tiny with weights of typ (seed 5) and routed layers of
// capacity (0: dense), closed when t ends.
func Build(t testing.TB, typ gguf.TensorType, capacity float32) *synth.Model {
	t.Helper()
	m, err := synth.Build(Tiny, synth.Options{Type: typ, Seed: 5, Capacity: capacity})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// Save builds a random-weight model of shape spec (synth.ParseShape: a
// preset and/or key=value sizes) with F32 weights (seed 3), saves it under
// t.TempDir and returns its path.
func Save(t testing.TB, spec string) string {
	t.Helper()
	sh, err := synth.ParseShape(spec)
	require.NoError(t, err)
	sm, err := synth.Build(sh, synth.Options{Type: gguf.TypeF32, Seed: 3})
	require.NoError(t, err)
	defer sm.Close()
	path := filepath.Join(t.TempDir(), "synth.gguf")
	require.NoError(t, sm.Save(path))
	return path
}
