// Command testsum reads `go test -json` on stdin and prints what a person
// needs from a test run: each package's result, the output of every failed
// test, every skipped test with its reason, and a closing line
// "N passed, N failed, N skipped". It exits 1 if anything failed, a package
// included (a build failure, a panic outside a test).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output events
	Test       string
	Output     string
	Elapsed    float64
}

type summary struct {
	passed, failed, skipped int
	failedPkgs              int
	output                  map[string][]string // package or package+test -> its output lines
	skips                   []string
	out                     io.Writer
}

func main() {
	s := &summary{output: map[string][]string{}, out: os.Stdout}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(s.out, sc.Text()) // not JSON: go test's own error text
			s.failedPkgs++
			continue
		}
		s.add(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "testsum: reading go test output: %v\n", err)
		os.Exit(1)
	}
	os.Exit(s.finish())
}

func (s *summary) add(e event) {
	key := e.Package + " " + e.Test
	switch e.Action {
	case "output", "build-output":
		if e.Action == "build-output" {
			key = e.ImportPath + " "
		}
		s.output[key] = append(s.output[key], e.Output)
	case "pass":
		if e.Test != "" {
			s.passed++
		} else {
			fmt.Fprintf(s.out, "ok    %s (%.1fs)\n", e.Package, e.Elapsed)
		}
		delete(s.output, key)
	case "skip":
		if e.Test != "" {
			s.skipped++
			s.skips = append(s.skips, fmt.Sprintf("SKIP  %s %s: %s", e.Package, e.Test, skipReason(s.output[key])))
		} else {
			fmt.Fprintf(s.out, "--    %s (no tests)\n", e.Package)
		}
		delete(s.output, key)
	case "fail":
		if e.Test != "" {
			s.failed++
			fmt.Fprintf(s.out, "FAIL  %s %s\n%s", e.Package, e.Test, strings.Join(s.output[key], ""))
		} else {
			s.failedPkgs++
			fmt.Fprintf(s.out, "FAIL  %s\n%s", e.Package, strings.Join(s.output[key], ""))
			fmt.Fprint(s.out, strings.Join(s.output[e.Package+" "], "")) // build output
		}
		delete(s.output, key)
	}
}

// skipReason is the message a test gave to t.Skip: its output lines, less
// go test's own "=== RUN" and "--- SKIP" lines.
func skipReason(lines []string) string {
	var parts []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " ")
}

func (s *summary) finish() int {
	for _, line := range s.skips {
		fmt.Fprintln(s.out, line)
	}
	if s.failedPkgs > 0 {
		fmt.Fprintf(s.out, "%d package(s) failed outside any test (build error, panic, or timeout)\n", s.failedPkgs)
	}
	fmt.Fprintf(s.out, "%d passed, %d failed, %d skipped\n", s.passed, s.failed, s.skipped)
	if s.failed > 0 || s.failedPkgs > 0 {
		return 1
	}
	return 0
}
