package modrun_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeExample runs the README's embedding example as written: the
// program in its "Embedding in a Go program" section, in a module of its
// own that uses this checkout, run where models/ is.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "## Embedding in a Go program")
	require.True(t, ok, "README.md has the section")
	_, code, ok := strings.Cut(section, "```go\n")
	require.True(t, ok, "the section has a Go program")
	code, _, ok = strings.Cut(code, "```")
	require.True(t, ok)

	root, err := filepath.Abs(".")
	require.NoError(t, err)
	dir := t.TempDir()
	sum, err := os.ReadFile("go.sum")
	require.NoError(t, err)
	gomod := "module readme\n\ngo 1.22\n\nrequire github.com/modrun/modrun v0.0.0\n\nreplace github.com/modrun/modrun => " + root + "\n"
	for name, data := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": []byte(code)} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
	bin := filepath.Join(dir, "example")
	build := exec.Command("go", "build", "-mod=mod", "-o", bin, ".")
	build.Dir = dir
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	run := exec.Command(bin)
	run.Dir = root // models/tinystories-mod.gguf, as the README runs it
	var stderr strings.Builder
	run.Stderr = &stderr
	stdout, err := run.Output()
	require.NoError(t, err, "%s", stderr.String())
	assert.True(t, strings.HasPrefix(string(stdout), "Once upon a time, there was a little girl named Lily."), string(stdout))
}

// TestReadmeDemoIsTheMakefiles: the command the README says `make demo`
// runs is the Makefile's demo recipe, with its model.
func TestReadmeDemoIsTheMakefiles(t *testing.T) {
	makefile, err := os.ReadFile("Makefile")
	require.NoError(t, err)
	_, recipe, ok := strings.Cut(string(makefile), "\ndemo: ")
	require.True(t, ok, "the Makefile has a demo target")
	var command string
	for _, line := range strings.Split(recipe, "\n")[1:] {
		if strings.HasPrefix(line, "\tbin/modrun ") {
			command = strings.TrimPrefix(line, "\t")
			break
		}
	}
	require.NotEmpty(t, command, "the demo recipe runs bin/modrun")
	command = strings.ReplaceAll(command, "$(DEMO_MODEL)", "models/tinystories-mod.gguf")
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	assert.Contains(t, string(readme), "`make demo` runs `"+command+"`")
}
