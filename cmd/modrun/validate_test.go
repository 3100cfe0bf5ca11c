package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOutputFileTouchesNothing: checking that an output can be written
// leaves an existing file as it was and creates none.
func TestOutputFileTouchesNothing(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "report.md")
	require.NoError(t, os.WriteFile(existing, []byte("kept"), 0o644))
	require.NoError(t, outputFile("--out", existing))
	b, err := os.ReadFile(existing)
	require.NoError(t, err)
	assert.Equal(t, "kept", string(b))

	fresh := filepath.Join(dir, "new.png")
	require.NoError(t, outputFile("--routing-map", fresh))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no file created, no temporary file left")

	for _, c := range []struct{ path, want string }{
		{dir, "--out " + dir + ": is a directory, not a file"},
		{filepath.Join(existing, "x"), "--out " + filepath.Join(existing, "x") + ": "},
		{filepath.Join(dir, "no", "x"), "--out " + filepath.Join(dir, "no", "x") + ": directory " + filepath.Join(dir, "no") + " does not exist"},
	} {
		err := outputFile("--out", c.path)
		require.Error(t, err, c.path)
		assert.Contains(t, err.Error(), c.want)
	}
}

// TestInputFile: a missing file, a directory, and a FIFO (accepted without
// being opened: opening one waits for a writer).
func TestInputFile(t *testing.T) {
	dir := t.TempDir()
	err := inputFile("-f", filepath.Join(dir, "none.txt"))
	require.Error(t, err)
	assert.Equal(t, "-f "+filepath.Join(dir, "none.txt")+": no such file or directory", err.Error())
	err = inputFile("-f", dir)
	require.Error(t, err)
	assert.Equal(t, "-f "+dir+": is a directory, not a file", err.Error())

	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	done := make(chan error, 1)
	go func() { done <- inputFile("-f", fifo) }()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // let the open return
		require.NoError(t, err)
		w.Close()
		t.Fatal("inputFile opened the FIFO and waited for a writer")
	}
}
