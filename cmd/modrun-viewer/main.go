// Command modrun-viewer is a desktop window (GLFW, OpenGL) that tells a
// story with a MoD model and shows, live, how its routed layers route each
// token: one column per token, one row per routed layer, coloured by score,
// marked where the token went through.
//
//	modrun-viewer -m models/tinystories-mod.gguf -p "Once upon"
//	xvfb-run modrun-viewer -m models/tinystories-mod.gguf -p "Once upon" -n 40 --screenshot out.png
//
// The story from -p starts at once. Keys: Enter starts again (afresh, from
// the prompt field), Esc stops, Ctrl+R
// resets, Ctrl+T switches router and predictor routing; typing edits the
// prompt. With --screenshot the viewer generates from -p, writes the
// finished frame to a PNG and exits.
//
// GLFW and OpenGL calls run on the main goroutine, locked to the main OS
// thread; generation runs on a worker goroutine (state.go) through the
// embedding API (package modrun), and the frame is drawn in Go (frame.go).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"strconv"

	"github.com/go-gl/glfw/v3.3/glfw"
	"github.com/modrun/modrun"
	"github.com/modrun/modrun/internal/pngfile"
)

func init() {
	// GLFW must be called from the main thread: keep main on it.
	runtime.LockOSThread()
}

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// noDisplay is the error when there is no display to open a window on.
func noDisplay(why string) error {
	return fmt.Errorf("no display found (%s): run it under a virtual one: xvfb-run -a modrun-viewer -m FILE.gguf -p PROMPT -n 40 --screenshot out.png", why)
}

// initGLFW initialises GLFW, or says why it cannot. go-gl's Init only logs
// a platform error, such as X11's missing DISPLAY, and returns nil; the
// next GLFW call then panics (NotInitialized). So a display is looked for
// first, and what Init logs is taken as its failure.
func initGLFW() error {
	if runtime.GOOS != "windows" && runtime.GOOS != "darwin" && os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
		return noDisplay("neither DISPLAY nor WAYLAND_DISPLAY is set")
	}
	var logged bytes.Buffer
	out, flags := log.Writer(), log.Flags()
	log.SetOutput(&logged)
	log.SetFlags(0)
	err := glfw.Init()
	log.SetOutput(out)
	log.SetFlags(flags)
	if err != nil {
		return fmt.Errorf("cannot open a window: %w", err)
	}
	if msg := bytes.TrimSpace(logged.Bytes()); len(msg) > 0 {
		return noDisplay(string(msg))
	}
	return nil
}

// Exit statuses: 0 done, 1 the model or the window failed, 2 a bad command
// line.
const (
	exitFail  = 1
	exitUsage = 2
)

type flags struct {
	model, prompt, backend, routing, screenshot string
	n, device, width, height, closeAfter        int
}

func parse(args []string, stderr io.Writer) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("modrun-viewer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.model, "m", "", "model `FILE`.gguf (required)")
	fs.StringVar(&f.prompt, "p", "Once upon", "the prompt `TEXT` to start from")
	fs.IntVar(&f.n, "n", 200, "new tokens at most per generation")
	fs.StringVar(&f.backend, "backend", "auto", "auto (a Vulkan GPU if any, else the CPU) | cpu | vulkan (any Vulkan device, lavapipe too)")
	fs.IntVar(&f.device, "device", -1, "Vulkan device `N` (see modrun devices; default $MODRUN_DEVICE or the best)")
	fs.StringVar(&f.routing, "routing", "router", "causal routing of MoD blocks: router | predictor")
	fs.StringVar(&f.screenshot, "screenshot", "", "generate from -p, write the finished frame to `FILE`.png and exit")
	fs.IntVar(&f.width, "width", 960, "window width in pixels")
	fs.IntVar(&f.height, "height", 540, "window height in pixels")
	fs.IntVar(&f.closeAfter, "close-after", 0, "close the window after `N` new tokens (to test closing mid-generation)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: modrun-viewer -m FILE.gguf [-p PROMPT] [-n N] [--backend B] [--routing R] [--screenshot FILE.png -p PROMPT -n N]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	switch {
	case fs.NArg() > 0:
		return f, fmt.Errorf("unexpected argument %q (quote the prompt: -p \"...\")", fs.Arg(0))
	case f.model == "":
		return f, fmt.Errorf("-m FILE.gguf is required")
	case f.n < 0:
		return f, fmt.Errorf("-n %d: must be 0 or positive", f.n)
	case f.width < 320 || f.height < 240 || f.width > 8192 || f.height > 8192:
		return f, fmt.Errorf("--width %d --height %d: want at least 320 x 240 and at most 8192", f.width, f.height)
	}
	return f, nil
}

func (f flags) options() modrun.Options {
	o := modrun.Options{Backend: f.backend, Routing: modrun.Routing(f.routing)}
	if f.device >= 0 {
		o.Device = strconv.Itoa(f.device)
	}
	return o
}

func run(args []string, stderr io.Writer) int {
	f, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "modrun-viewer:", err)
		return exitUsage
	}
	if err := initGLFW(); err != nil {
		fmt.Fprintf(stderr, "modrun-viewer: %v\n", err)
		return exitFail
	}
	defer glfw.Terminate()
	glfw.WindowHint(glfw.ContextVersionMajor, 2)
	glfw.WindowHint(glfw.ContextVersionMinor, 1)
	glfw.WindowHint(glfw.DoubleBuffer, glfw.True)
	win, err := glfw.CreateWindow(f.width, f.height, "modrun-viewer", nil, nil)
	if err != nil {
		fmt.Fprintf(stderr, "modrun-viewer: cannot open a window: %v\n", err)
		return exitFail
	}
	defer win.Destroy()
	win.MakeContextCurrent()
	scr, err := newScreen()
	if err != nil {
		fmt.Fprintf(stderr, "modrun-viewer: cannot open a window: %v\n", err)
		return exitFail
	}
	defer scr.close()
	p, err := newPainter()
	if err != nil {
		fmt.Fprintln(stderr, "modrun-viewer:", err)
		return exitFail
	}

	st := &state{wake: glfw.PostEmptyEvent}
	st.v.Prompt = f.prompt
	wk := newWorker(st, f.model, f.options(), f.n, stderr)
	go wk.run()
	wk.send(cmdStart) // the story from -p starts at once, served once the model is loaded
	keys(win, st, wk)

	status := loop(win, scr, p, st, f, stderr)
	running := st.snapshot().Running
	wk.quit() // cancels a generation and frees the model before the window goes
	if running {
		fmt.Fprintln(stderr, "modrun-viewer: the window closed during generation: cancelled, model closed")
	}
	if wk.loadFail {
		return exitFail
	}
	return status
}

// loop draws a frame whenever the view changes, until the window closes or
// the screenshot is written. It returns the exit status.
func loop(win *glfw.Window, scr *screen, p *painter, st *state, f flags, stderr io.Writer) int {
	drawn, drawnW, drawnH := -1, 0, 0
	for !win.ShouldClose() {
		glfw.WaitEventsTimeout(0.25)
		v := st.snapshot()
		w, h := win.GetFramebufferSize()
		if v.Version == drawn && w == drawnW && h == drawnH {
			continue
		}
		if err := scr.show(p.frame(v, w, h)); err != nil {
			fmt.Fprintln(stderr, "modrun-viewer:", err)
			return exitFail
		}
		if f.screenshot != "" && v.Done && !v.Running {
			return screenshot(scr, w, h, f.screenshot, v, stderr)
		}
		win.SwapBuffers()
		drawn, drawnW, drawnH = v.Version, w, h
		if f.closeAfter > 0 && generated(v.Tokens) >= f.closeAfter {
			win.SetShouldClose(true)
		}
	}
	return 0
}

// screenshot writes the frame just drawn (read back from the GL
// framebuffer) to path.
func screenshot(scr *screen, w, h int, path string, v view, stderr io.Writer) int {
	img, err := scr.read(w, h)
	if err == nil {
		err = pngfile.Write(path, img)
	}
	if err != nil {
		fmt.Fprintln(stderr, "modrun-viewer: --screenshot:", err)
		return exitFail
	}
	if v.Fatal == "" {
		fmt.Fprintf(stderr, "modrun-viewer: %s: %d tokens on %s, %s\n", path, len(v.Tokens), v.Info.Device, v.Status)
	}
	return 0
}

func generated(tokens []modrun.Token) int {
	n := 0
	for _, t := range tokens {
		if !t.Prompt {
			n++
		}
	}
	return n
}

// keys wires the keyboard: GLFW calls these on the main thread, during
// WaitEvents.
func keys(win *glfw.Window, st *state, wk *worker) {
	win.SetCharCallback(func(_ *glfw.Window, r rune) {
		st.update(func(v *view) {
			if !v.Running {
				v.Prompt += string(r)
			}
		})
	})
	win.SetKeyCallback(func(_ *glfw.Window, key glfw.Key, _ int, action glfw.Action, mods glfw.ModifierKey) {
		if action == glfw.Release {
			return
		}
		v := st.snapshot()
		ctrl := mods&glfw.ModControl != 0
		switch {
		case key == glfw.KeyEnter || key == glfw.KeyKPEnter:
			if v.Loaded && !v.Running {
				wk.send(cmdStart)
			}
		case key == glfw.KeyEscape:
			wk.stop()
		case key == glfw.KeyBackspace:
			st.update(func(v *view) {
				if !v.Running && v.Prompt != "" {
					r := []rune(v.Prompt)
					v.Prompt = string(r[:len(r)-1])
				}
			})
		case ctrl && key == glfw.KeyR && v.Loaded:
			wk.stop()
			wk.send(cmdReset)
		case ctrl && key == glfw.KeyT && v.Loaded:
			wk.stop()
			wk.send(cmdRouting)
		}
	})
}
