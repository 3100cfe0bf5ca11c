// Package publictest converts the public MoD implementations' fixture
// checkpoints (testdata/convert/NAME/, made by train/public_fixtures.py) to
// GGUF for tests of the backends that run them.
package publictest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod/convert"
	"github.com/modrun/modrun/mod/quant"
)

// Layouts are the fixture folders: MoD Llama 2 with and without its aux
// router, and the Mixture-AI wrapper under Meta and Hugging Face names.
var Layouts = []string{"modllama2-aux", "modllama2", "mixtureai-meta", "mixtureai-hf"}

// Convert converts fixture dir (one of Layouts) with F32 weights into a
// file under t.TempDir and returns its path and the fixture's tokens.
func Convert(t testing.TB, dir string) (path string, tokens []int32) {
	t.Helper()
	testdata := convertDir(t)
	root := filepath.Join(testdata, dir)
	raw, err := os.ReadFile(filepath.Join(root, "golden.json"))
	require.NoError(t, err)
	var g struct {
		Checkpoint, Config string
		Tokens             []int32
	}
	require.NoError(t, json.Unmarshal(raw, &g))
	src, err := convert.Load(filepath.Join(root, g.Checkpoint), filepath.Join(root, g.Config))
	require.NoError(t, err)
	vocab, err := gguf.Open(filepath.Join(testdata, "vocab512.gguf"))
	require.NoError(t, err)
	defer vocab.Close()
	f32, err := quant.Pure(gguf.TypeF32)
	require.NoError(t, err)
	w, err := convert.Convert(src.Checkpoint, src.Config, vocab, convert.Options{Scheme: f32})
	require.NoError(t, err)
	path = filepath.Join(t.TempDir(), dir+".gguf")
	require.NoError(t, w.WriteFile(path))
	return path, g.Tokens
}

// convertDir is the repository's testdata/convert, found from the working
// directory up: go test runs a package's tests in its folder, and the GPU
// bundle runs each test binary in the same folder of its src/, beside a
// copy of testdata/ (scripts/gpu-bundle.sh), where the source path that
// runtime.Caller gives is not there (-trimpath makes it a module path).
func convertDir(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	for dir := wd; ; dir = filepath.Dir(dir) {
		p := filepath.Join(dir, "testdata", "convert")
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
		if filepath.Dir(dir) == dir {
			require.FailNowf(t, "publictest: no fixtures", "no testdata/convert in %s or a folder above it", wd)
		}
	}
}
