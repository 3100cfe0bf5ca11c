package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"path/filepath"
	"strings"

	"github.com/modrun/modrun"
	"github.com/modrun/modrun/internal/mapgeom"
	xdraw "golang.org/x/image/draw"
	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
)

// The frame is drawn in Go into an image (here), which the GL thread
// uploads as one texture (gl.go). Its layout, top to bottom: a header
// (model, device, routing, speed), the prompt field, the story, the
// routing map with its layer labels, the status line and the keys.

var (
	background = color.RGBA{18, 20, 26, 255}
	panel      = color.RGBA{32, 36, 46, 255}
	textColour = color.RGBA{225, 228, 235, 255}
	dimColour  = color.RGBA{140, 146, 160, 255}
	accent     = color.RGBA{250, 170, 60, 255}
	errColour  = color.RGBA{255, 110, 100, 255}
)

const (
	margin   = 16
	lineH    = 20 // text line height
	mapLeft  = margin + 40
	mapScale = 2 // the routing map's cells, magnified
)

// layout is where each part of a frame of a given size goes.
type layout struct {
	size      image.Point
	header    image.Rectangle
	prompt    image.Rectangle
	story     image.Rectangle
	mapOrigin image.Point // the routing map's top-left corner
	mapCols   int         // the most token columns that fit
	status    image.Point // baseline of the status line
}

// layoutFor lays out a w x h frame for rows routed layers.
func layoutFor(w, h, rows int) layout {
	l := layout{size: image.Pt(w, h)}
	l.header = image.Rect(0, 0, w, 3*lineH+12)
	l.prompt = image.Rect(margin, l.header.Max.Y+8, w-margin, l.header.Max.Y+8+lineH+10)
	mapH := mapScale * mapgeom.Size(0, rows).Y
	l.status = image.Pt(margin, h-margin-lineH)
	l.mapOrigin = image.Pt(mapLeft, l.status.Y-lineH-8-mapH)
	l.story = image.Rect(margin, l.prompt.Max.Y+10, w-margin, l.mapOrigin.Y-lineH-14)
	l.mapCols = max(1, (w-mapLeft-margin-mapScale*mapgeom.Gap)/(mapScale*(mapgeom.Cell+mapgeom.Gap)))
	return l
}

// firstColumn is the first token shown when n tokens must fit in cols
// columns: the map scrolls to keep the newest.
func firstColumn(n, cols int) int { return max(0, n-cols) }

type painter struct {
	face font.Face
}

func newPainter() (*painter, error) {
	f, err := opentype.Parse(goregular.TTF)
	if err != nil {
		return nil, fmt.Errorf("font: %w", err)
	}
	face, err := opentype.NewFace(f, &opentype.FaceOptions{Size: 14, DPI: 72, Hinting: font.HintingFull})
	if err != nil {
		return nil, fmt.Errorf("font: %w", err)
	}
	return &painter{face: face}, nil
}

// text draws s with its baseline at (x, y), cut to fit before maxX.
func (p *painter) text(dst *image.RGBA, x, y, maxX int, c color.Color, s string) {
	for s != "" && x+font.MeasureString(p.face, s).Ceil() > maxX {
		s = s[:len(s)-1]
	}
	d := font.Drawer{Dst: dst, Src: image.NewUniform(c), Face: p.face, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// wrap breaks s into lines no wider than width, at spaces where it can.
func (p *painter) wrap(s string, width int) []string {
	var lines []string
	for _, para := range strings.Split(s, "\n") {
		line := ""
		for _, word := range strings.SplitAfter(para, " ") {
			if line != "" && font.MeasureString(p.face, line+word).Ceil() > width {
				lines = append(lines, line)
				line = ""
			}
			line += word
		}
		lines = append(lines, line)
	}
	return lines
}

// frame draws v into a w x h image.
func (p *painter) frame(v view, w, h int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.NewUniform(background), image.Point{}, draw.Src)
	rows := len(v.Info.RoutedLayers)
	l := layoutFor(w, h, rows)

	// Header: what runs where, and how fast.
	draw.Draw(img, l.header, image.NewUniform(panel), image.Point{}, draw.Src)
	title := "modrun-viewer"
	if v.Loaded {
		i := v.Info
		title = fmt.Sprintf("modrun-viewer  ·  %s (%s, %d layers, routed %s)", filepath.Base(i.Path), i.Arch, i.NLayer, ints(i.RoutedLayers))
	}
	p.text(img, margin, lineH, w-margin, textColour, title)
	if v.Loaded {
		dev := fmt.Sprintf("device: %s (%s)", v.Info.Device, v.Info.Backend)
		routing := "dense"
		if v.Info.Routing != "" {
			routing = string(v.Info.Routing) + " routing"
		}
		line := fmt.Sprintf("%s  ·  %s  ·  %.1f tokens/s", dev, routing, v.Rate)
		p.text(img, margin, 2*lineH+2, w-margin, dimColour, line)
		if v.Info.Notice != "" { // why the CPU: no Vulkan GPU, or only a software one
			p.text(img, margin, 3*lineH+4, w-margin, accent, strings.TrimPrefix(v.Info.Notice, "modrun: "))
		}
	}

	// The prompt field.
	draw.Draw(img, l.prompt, image.NewUniform(panel), image.Point{}, draw.Src)
	cursor := ""
	if !v.Running {
		cursor = "_"
	}
	p.text(img, l.prompt.Min.X+8, l.prompt.Min.Y+lineH, l.prompt.Max.X-8, textColour, "Prompt: "+v.Prompt+cursor)

	// The story, or why there is none.
	if v.Fatal != "" {
		y := l.story.Min.Y + lineH
		for _, line := range p.wrap(v.Fatal, l.story.Dx()) {
			p.text(img, l.story.Min.X, y, l.story.Max.X, errColour, line)
			y += lineH
		}
	} else {
		var b strings.Builder
		for _, t := range v.Tokens {
			b.WriteString(t.Text)
		}
		lines := p.wrap(b.String(), l.story.Dx())
		fit := max(1, l.story.Dy()/lineH)
		if len(lines) > fit {
			lines = lines[len(lines)-fit:]
		}
		for i, line := range lines {
			p.text(img, l.story.Min.X, l.story.Min.Y+(i+1)*lineH, l.story.Max.X, textColour, line)
		}
	}

	// The routing map: the newest tokens that fit, a row per routed layer.
	if rows > 0 {
		first := firstColumn(len(v.Tokens), l.mapCols)
		shown := v.Tokens[first:]
		label := fmt.Sprintf("routing map: tokens %d-%d (columns), routed layers (rows); colour: score, blue < 0 < orange; white: went through", first, first+len(shown))
		if len(shown) == 0 {
			label = "routing map: a column per token, a row per routed layer"
		}
		p.text(img, margin, l.mapOrigin.Y-8, w-margin, dimColour, label)
		for j, layer := range v.Info.RoutedLayers {
			y := l.mapOrigin.Y + mapScale*(mapgeom.CellOrigin(0, j).Y+mapgeom.Cell) - 4
			p.text(img, margin, y, mapLeft-4, dimColour, fmt.Sprintf("L%d", layer))
		}
		m := modrun.RoutingMap(shown, rows)
		dst := image.Rectangle{Min: l.mapOrigin, Max: l.mapOrigin.Add(m.Bounds().Size().Mul(mapScale))}
		xdraw.NearestNeighbor.Scale(img, dst, m, m.Bounds(), draw.Src, nil)
	}

	// Status and keys.
	status := v.Status
	if v.Running {
		status = fmt.Sprintf("generating: %d tokens", len(v.Tokens))
	}
	p.text(img, l.status.X, l.status.Y, w-margin, accent, status)
	p.text(img, l.status.X, l.status.Y+lineH, w-margin, dimColour,
		"Enter: start   Esc: stop   Ctrl+R: reset   Ctrl+T: router/predictor   type to edit the prompt")
	return img
}

func ints(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, " ")
}
