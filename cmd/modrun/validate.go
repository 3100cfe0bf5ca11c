package main

// Checks that every command runs on its flags before it loads or builds
// anything, so that a bad flag or path is reported at once, naming the flag:
// a usage error (exit 2) for a value no run could accept, a plain error
// (exit 1) for a path that is missing or cannot be written.

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/modrun/modrun/mod"
)

// inputFile checks that path, given with flag name, is a file that can be
// opened for reading. A pipe or device is not opened: opening a FIFO waits
// for its writer, and closing it again would leave the writer no reader.
func inputFile(name, path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", name, path, plainPathError(err))
	}
	if st.IsDir() {
		return fmt.Errorf("%s %s: is a directory, not a file", name, path)
	}
	if !st.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", name, path, plainPathError(err))
	}
	return f.Close()
}

// outputFile checks that path, given with flag name, can be written, without
// touching what is there: an existing file must open for writing, and a new
// one's directory must take a file (a temporary one, removed at once).
func outputFile(name, path string) error {
	st, err := os.Stat(path)
	switch {
	case err == nil && st.IsDir():
		return fmt.Errorf("%s %s: is a directory, not a file", name, path)
	case err == nil:
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("%s %s: cannot write it: %w", name, path, plainPathError(err))
		}
		return f.Close()
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: %w", name, path, plainPathError(err))
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("%s %s: directory %s does not exist", name, path, dir)
	}
	f, err := os.CreateTemp(dir, ".modrun-check-*")
	if err != nil {
		return fmt.Errorf("%s %s: cannot write in %s: %w", name, path, dir, plainPathError(err))
	}
	f.Close()
	return os.Remove(f.Name())
}

// plainPathError drops the operation and path of an *fs.PathError, which the
// caller's message names already: "no such file or directory".
func plainPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// routingFlag parses --routing, listing in its error only what the command
// accepts.
func routingFlag(value string, accepted ...mod.Routing) (mod.Routing, error) {
	r, err := mod.ParseRouting(value)
	for _, a := range accepted {
		if err == nil && r == a {
			return r, nil
		}
	}
	want := accepted[len(accepted)-1].String()
	if n := len(accepted); n > 1 {
		names := make([]string, n-1)
		for i, a := range accepted[:n-1] {
			names[i] = a.String()
		}
		want = strings.Join(names, ", ") + " or " + want
	}
	return 0, fmt.Errorf("%w: --routing %q: want %s", errUsage, value, want)
}

// floatFlag parses a float32 flag value into dst; NaN and the infinities are
// no setting of any knob.
func floatFlag(dst *float32) func(string) error {
	return func(s string) error {
		var v float64
		if _, err := fmt.Sscan(s, &v); err != nil {
			return fmt.Errorf("%q is not a number", s)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > math.MaxFloat32 {
			return fmt.Errorf("%q is not a finite number", s)
		}
		*dst = float32(v)
		return nil
	}
}

// fractionFlag checks a capacity-like flag: a fraction in (0, 1].
func fractionFlag(name string, v float64) error {
	if !(v > 0 && v <= 1) {
		return fmt.Errorf("%w: --%s %g: want a fraction in (0, 1]", errUsage, name, v)
	}
	return nil
}
