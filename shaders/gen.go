//go:build ignore

// gen compiles every variant of the table in shaders.go to spv/NAME.spv with
// glslc (Variant.Compile: the KHR cooperative-matrix variants through
// FixCoopKHR): `go generate ./shaders`. With -o DIR it writes there instead.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/modrun/modrun/shaders"
)

func main() {
	out := flag.String("o", "spv", "output directory")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "shaders/gen:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	glslc, err := exec.LookPath("glslc")
	if err != nil {
		return fmt.Errorf("glslc is not installed (Debian: glslc): %w", err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	want := map[string]bool{}
	for _, v := range shaders.Variants {
		path := filepath.Join(out, v.Name+".spv")
		want[v.Name+".spv"] = true
		if err := v.Compile(glslc, path); err != nil {
			return err
		}
	}
	// A variant removed from the table leaves no stale file behind.
	entries, err := os.ReadDir(out)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".spv") && !want[e.Name()] {
			if err := os.Remove(filepath.Join(out, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
