//go:build unix

package gguf

import (
	"fmt"
	"os"
	"syscall"
)

// mmap maps size bytes of fh read-only. The mapping outlives fh.
func mmap(fh *os.File, size int) ([]byte, func() error, error) {
	data, err := syscall.Mmap(int(fh.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %s: %w", fh.Name(), err)
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}
