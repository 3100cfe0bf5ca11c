package main

import (
	"fmt"
	"image"

	"github.com/go-gl/gl/v2.1/gl"
)

// screen shows a frame image through OpenGL 2.1, which Mesa's software
// renderer (llvmpipe, under Xvfb) has too: the image is one texture drawn
// on a quad that covers the viewport, texel for pixel (nearest filtering),
// so what the window shows is the image exactly. Every call runs on the GL
// thread.
type screen struct {
	tex uint32
}

func newScreen() (*screen, error) {
	if err := gl.Init(); err != nil {
		return nil, fmt.Errorf("OpenGL: %w", err)
	}
	s := &screen{}
	gl.GenTextures(1, &s.tex)
	gl.BindTexture(gl.TEXTURE_2D, s.tex)
	gl.TexParameteri(gl.TEXTURE_2D, gl.TEXTURE_MIN_FILTER, gl.NEAREST)
	gl.TexParameteri(gl.TEXTURE_2D, gl.TEXTURE_MAG_FILTER, gl.NEAREST)
	gl.TexParameteri(gl.TEXTURE_2D, gl.TEXTURE_WRAP_S, gl.CLAMP_TO_EDGE)
	gl.TexParameteri(gl.TEXTURE_2D, gl.TEXTURE_WRAP_T, gl.CLAMP_TO_EDGE)
	gl.PixelStorei(gl.UNPACK_ALIGNMENT, 1)
	gl.PixelStorei(gl.PACK_ALIGNMENT, 1)
	if err := glError("texture setup"); err != nil {
		return nil, err
	}
	return s, nil
}

// show draws img over the whole w x h framebuffer (the back buffer).
func (s *screen) show(img *image.RGBA) error {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	gl.Viewport(0, 0, int32(w), int32(h))
	gl.ClearColor(0, 0, 0, 1)
	gl.Clear(gl.COLOR_BUFFER_BIT)
	gl.BindTexture(gl.TEXTURE_2D, s.tex)
	gl.TexImage2D(gl.TEXTURE_2D, 0, gl.RGBA8, int32(w), int32(h), 0, gl.RGBA, gl.UNSIGNED_BYTE, gl.Ptr(img.Pix))
	gl.Enable(gl.TEXTURE_2D)
	gl.Begin(gl.QUADS) // image row 0 is the top; GL's y goes up
	gl.TexCoord2f(0, 0)
	gl.Vertex2f(-1, 1)
	gl.TexCoord2f(1, 0)
	gl.Vertex2f(1, 1)
	gl.TexCoord2f(1, 1)
	gl.Vertex2f(1, -1)
	gl.TexCoord2f(0, 1)
	gl.Vertex2f(-1, -1)
	gl.End()
	gl.Disable(gl.TEXTURE_2D)
	return glError("drawing the frame")
}

// read returns the w x h back buffer as an image, top row first: what the
// window shows after the next swap.
func (s *screen) read(w, h int) (*image.RGBA, error) {
	gl.Finish()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	buf := make([]byte, 4*w*h)
	gl.ReadBuffer(gl.BACK)
	gl.ReadPixels(0, 0, int32(w), int32(h), gl.RGBA, gl.UNSIGNED_BYTE, gl.Ptr(buf))
	if err := glError("reading the frame back"); err != nil {
		return nil, err
	}
	for y := 0; y < h; y++ { // GL's first row is the bottom one
		copy(img.Pix[y*img.Stride:(y+1)*img.Stride], buf[(h-1-y)*4*w:(h-y)*4*w])
	}
	return img, nil
}

func (s *screen) close() {
	gl.DeleteTextures(1, &s.tex)
}

func glError(what string) error {
	if e := gl.GetError(); e != gl.NO_ERROR {
		return fmt.Errorf("OpenGL: %s: error 0x%x", what, e)
	}
	return nil
}
