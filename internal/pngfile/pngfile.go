// Package pngfile writes an image to a PNG file: the routing map of
// `modrun --routing-map` and the viewer's screenshot.
package pngfile

import (
	"fmt"
	"image"
	"image/png"
	"os"
)

// Write encodes img as PNG into the file at path, created or truncated.
func Write(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
