package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/modrun/modrun/vk"
)

// commit is set by the Makefile's build (-ldflags -X main.commit=...), for
// builds without the Go toolchain's VCS stamp (-buildvcs=false).
var commit string

// printVersion writes modrun's version: the module version and commit (as
// the Go toolchain stamped them into the binary), the Go version, and the
// Vulkan loader, if there is one.
func printVersion(w io.Writer) {
	version, rev, modified := "(unknown)", commit, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
	}
	switch {
	case rev == "":
		version += ", commit unknown (built without VCS information: make build stamps it)"
	case modified == "true":
		version += ", commit " + rev + " with uncommitted changes"
	default:
		version += ", commit " + rev
	}
	fmt.Fprintf(w, "modrun %s\n", version)
	fmt.Fprintf(w, "go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if v, err := vk.LoaderVersion(); err != nil {
		fmt.Fprintf(w, "vulkan loader: none (%v)\n", err)
	} else {
		fmt.Fprintf(w, "vulkan loader: libvulkan.so.1, Vulkan %s\n", v)
	}
}
