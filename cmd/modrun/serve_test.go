package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServeSignals: modrun serve answers once ready, and SIGTERM or SIGINT
// drains it: it stops accepting, says so, and exits 0.
func TestServeSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang fails, not blocks
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "serve", "-m", "../../models/tinystories-mod.gguf", "--port", "0",
				"--backend", "cpu", "--chat-template", "chatml", "--shutdown-timeout", "5s")
			cmd.Env = append(os.Environ(), envRunMain+"=1")
			stderr, err := cmd.StderrPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			lines := bufio.NewScanner(stderr)
			var log strings.Builder
			url := ""
			for url == "" && lines.Scan() {
				log.WriteString(lines.Text() + "\n")
				if m := regexp.MustCompile(`^modrun serve: (http://\S+) `).FindStringSubmatch(lines.Text()); m != nil {
					url = m[1]
				}
			}
			require.NotEmpty(t, url, log.String())
			for lines.Scan() && !strings.Contains(lines.Text(), "ready") {
				log.WriteString(lines.Text() + "\n")
			}
			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"Once upon a time","max_tokens":100,"stream":true}`))
			require.NoError(t, err)
			first, err := bufio.NewReader(resp.Body).ReadString('\n')
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(first, "data: "), first)
			require.NoError(t, cmd.Process.Signal(sig))
			_, _ = io.Copy(io.Discard, resp.Body) // the stream in flight ends
			resp.Body.Close()
			rest, _ := io.ReadAll(readerOf(lines))
			log.Write(rest)
			require.NoError(t, cmd.Wait(), "exit status 0\n%s", log.String())
			assert.Contains(t, log.String(), "draining")
			assert.Contains(t, log.String(), "modrun serve: stopped")
			_, err = http.Get(url + "/health")
			assert.Error(t, err, "nothing listens any more")
		})
	}
}

// readerOf is the rest of a scanner's input, a line at a time.
func readerOf(s *bufio.Scanner) io.Reader {
	var b strings.Builder
	for s.Scan() {
		b.WriteString(s.Text() + "\n")
	}
	return strings.NewReader(b.String())
}

// TestServeFlags: bad flags are usage errors (exit status 2) naming the flag.
func TestServeFlags(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"--port 70000", "--port 70000"},
		{"--parallel 0", "--parallel 0"},
		{"--queue -1", "--queue -1"},
		{"--chat-template nope", `--chat-template "nope" is unknown`},
		{"", "-m FILE.gguf is required"},
	} {
		var stderr strings.Builder
		args := append([]string{"serve"}, strings.Fields(c.args)...)
		if c.args != "" {
			args = append(args, "-m", "../../models/tinystories-mod.gguf")
		}
		code := run(args, strings.NewReader(""), io.Discard, &stderr)
		assert.Equal(t, 2, code, c.args)
		assert.Contains(t, stderr.String(), c.want, c.args)
	}
}
