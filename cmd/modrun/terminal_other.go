//go:build !linux

package main

import "os"

// isTTY says whether f is a terminal; here, whether it is a character
// device (which /dev/null is too).
func isTTY(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
