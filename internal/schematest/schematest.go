// Package schematest holds the grammar tests' JSON schemas
// (engine/grammar/testdata/schemas) and their independent validator,
// santhosh-tekuri/jsonschema, for the tests of every package that
// constrains generation to a schema.
package schematest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// Files are the test schemas by name (the file name without .json).
func Files(t testing.TB) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(schemaDir(t), "*.json"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(paths), 20, "the test schemas")
	out := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		out[strings.TrimSuffix(filepath.Base(p), ".json")] = b
	}
	return out
}

// Validator compiles schema with formats asserted (date, uuid, ...).
func Validator(t testing.TB, name string, schema []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource(name+".json", doc))
	s, err := c.Compile(name + ".json")
	require.NoError(t, err)
	return s
}

// schemaDir finds engine/grammar/testdata/schemas from the working directory
// up (a test runs in its package's folder; the GPU bundle's -trimpath
// binaries know no source path, as publictest's convertDir explains).
func schemaDir(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	for dir := wd; ; dir = filepath.Dir(dir) {
		p := filepath.Join(dir, "engine", "grammar", "testdata", "schemas")
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			return p
		}
		if filepath.Dir(dir) == dir {
			require.FailNowf(t, "schematest: no engine/grammar/testdata/schemas", "in %s or any folder above it", wd)
		}
	}
}
