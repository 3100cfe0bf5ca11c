package main

import (
	"os"
	"syscall"
	"unsafe"
)

// isTTY says whether f is a terminal: it answers a terminal's ioctl.
// (/dev/null is a character device too, so the file's mode cannot say.)
func isTTY(f *os.File) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
