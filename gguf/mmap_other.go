//go:build !unix

package gguf

import (
	"io"
	"os"
)

// mmap reads the file into memory where no memory mapping is available.
func mmap(fh *os.File, size int) ([]byte, func() error, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(fh, data); err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
