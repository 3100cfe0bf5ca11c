package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/internal/shared"
)

// envRunMain makes the test binary run modrun's main instead of the tests,
// so that a test can send a signal to a real modrun process.
const envRunMain = "MODRUN_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// modrunProcess starts this test binary as modrun with args.
func modrunProcess(t *testing.T, ctx context.Context, args ...string) (*exec.Cmd, io.Reader, *bytes.Buffer) {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), envRunMain+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	return cmd, stdout, &stderr
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "the process ended: %v", err)
	return exit.ExitCode() // -1 when a signal killed it
}

// TestInterruptRun: ^C during generation keeps what was printed (with its
// newline), says so in one line and exits 130.
func TestInterruptRun(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang fails, not blocks
	defer cancel()
	// -n 0: until the context is full, 2048 greedy tokens (seconds), never EOS.
	cmd, stdout, stderr := modrunProcess(t, ctx, "-m", model, "-p", "Once", "-n", "0", "--backend", "cpu")
	out := interruptOnOutput(t, cmd, stdout, stderr)
	assert.True(t, strings.HasPrefix(out, "Once"), out)
	assert.True(t, strings.HasSuffix(out, "\n"), "the text printed so far ends its line")
	assert.Less(t, len(out), 2048*8, "it stopped early")
	assert.Equal(t, "modrun: interrupted\n", lastLine(stderr.String()))
	assert.Equal(t, 1, strings.Count(stderr.String(), "interrupted"))
}

// TestInterruptBusyCommand: a command that does not watch for ^C (here
// perplexity, blocked reading its text from a FIFO) ends at once with the
// same line and status.
func TestInterruptBusyCommand(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	fifo := filepath.Join(t.TempDir(), "text")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, _, stderr := modrunProcess(t, ctx, "perplexity", "-m", model, "-f", fifo, "--backend", "cpu")
	// Opening the FIFO waits for modrun to open it (reading -f, after the
	// model loads): main has its handler by then, and modrun blocks reading.
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer w.Close()
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	code := exitCode(t, cmd.Wait())
	assert.Equal(t, exitInterrupted, code, stderr.String())
	assert.Equal(t, "modrun: interrupted\n", stderr.String())
}

// lastLine is the last line of s, with its newline.
func lastLine(s string) string {
	i := strings.LastIndex(strings.TrimSuffix(s, "\n"), "\n")
	return s[i+1:]
}

// TestInterruptPipedChat: ^C during a piped chat's reply ends the reply's
// line on stdout, so that "modrun: interrupted" has a line of its own, and
// exits 130.
func TestInterruptPipedChat(t *testing.T) {
	model := shared.Path(t, "models/stories260K.gguf")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "chat", "-m", model, "--chat-template", "chatml", "-n", "0", "--backend", "cpu")
	cmd.Env = append(os.Environ(), envRunMain+"=1")
	cmd.Stdin = strings.NewReader("Once upon a time\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	out := interruptOnOutput(t, cmd, stdout, &stderr)
	assert.True(t, strings.HasSuffix(out, "\n"), "the reply's line is ended: %q", out)
	assert.Equal(t, "modrun: interrupted\n", lastLine(stderr.String()))
}

// interruptOnOutput sends ^C once the first byte of output comes (the work
// has begun: main has its handler), checks that modrun exits 130, and
// returns all it printed.
func interruptOnOutput(t *testing.T, cmd *exec.Cmd, stdout io.Reader, stderr *bytes.Buffer) string {
	t.Helper()
	first := make([]byte, 1)
	if _, err := io.ReadFull(stdout, first); err != nil {
		_ = cmd.Wait() // stderr is complete, and no longer written, after Wait
		t.Fatalf("no output: %v; stderr: %s", err, stderr)
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	rest, err := io.ReadAll(stdout)
	require.NoError(t, err)
	assert.Equal(t, exitInterrupted, exitCode(t, cmd.Wait()), stderr.String())
	return string(first) + string(rest)
}
