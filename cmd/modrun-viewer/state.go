package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/modrun/modrun"
)

// view is what the window shows. The worker goroutine writes it, the GL
// thread reads a copy of it (snapshot) for each frame; mu guards it.
type view struct {
	Prompt  string // the prompt field
	Tokens  []modrun.Token
	Info    modrun.Info
	Loaded  bool
	Status  string // one line: what happens, or what happened last
	Fatal   string // the model could not be loaded: shown instead of a story
	Running bool
	Done    bool    // a generation has ended (the screenshot waits for it)
	Rate    float64 // new tokens per second of the generation shown
	Version int     // moves on every change: the frame is redrawn
}

type state struct {
	mu   sync.Mutex
	v    view
	wake func() // tells the GL thread to look (glfw.PostEmptyEvent)
}

func (s *state) update(fn func(v *view)) {
	s.mu.Lock()
	fn(&s.v)
	s.v.Version++
	s.mu.Unlock()
	if s.wake != nil {
		s.wake()
	}
}

func (s *state) snapshot() view {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.v
	v.Tokens = append([]modrun.Token(nil), v.Tokens...)
	return v
}

// command is what the GL thread asks the worker to do.
type command int

const (
	cmdStart   command = iota // generate from the prompt field, afresh
	cmdReset                  // clear the story and the map
	cmdRouting                // switch router <-> predictor routing (reopens the model)
)

// worker owns the model and its session; it runs off the GL thread, one
// command at a time. Stop is not a command: the GL thread cancels the
// running generation directly.
type worker struct {
	st       *state
	path     string
	opts     modrun.Options
	maxNew   int
	stderr   io.Writer
	model    *modrun.Model
	session  *modrun.Session
	cmds     chan command
	done     chan struct{}
	mu       sync.Mutex
	cancel   context.CancelFunc // of the running generation; nil when idle
	loadFail bool
}

func newWorker(st *state, path string, opts modrun.Options, maxNew int, stderr io.Writer) *worker {
	return &worker{st: st, path: path, opts: opts, maxNew: maxNew, stderr: stderr,
		cmds: make(chan command, 8), done: make(chan struct{})}
}

// run loads the model, then serves commands until quit closes cmds.
func (w *worker) run() {
	defer close(w.done)
	if w.load() {
		for c := range w.cmds {
			switch c {
			case cmdStart:
				w.generate()
			case cmdReset:
				if err := w.session.Reset(); err != nil {
					w.st.update(func(v *view) { v.Status = err.Error() })
					continue
				}
				w.st.update(func(v *view) { v.Tokens, v.Rate, v.Status = nil, 0, "reset" })
			case cmdRouting:
				w.switchRouting()
			}
		}
	}
	for range w.cmds { // after a failed load, until quit
	}
	w.close()
}

// load opens the model; on failure the window and stderr say why.
func (w *worker) load() bool {
	w.st.update(func(v *view) { v.Status = "loading " + w.path })
	m, err := modrun.Open(w.path, w.opts)
	if err != nil {
		msg := fmt.Sprintf("cannot load the model: %v", err)
		fmt.Fprintln(w.stderr, "modrun-viewer:", msg)
		w.loadFail = true
		w.st.update(func(v *view) { v.Fatal, v.Status, v.Done = msg, "", true })
		return false
	}
	w.model, w.session = m, m.NewSession()
	info := m.Info()
	if info.Notice != "" {
		fmt.Fprintln(w.stderr, info.Notice)
	}
	w.st.update(func(v *view) {
		v.Info, v.Loaded, v.Tokens = info, true, nil
		v.Status = "ready"
		if info.Notice != "" {
			v.Status = info.Notice
		}
	})
	return true
}

func (w *worker) close() {
	if w.model != nil {
		w.session.Close()
		if err := w.model.Close(); err != nil {
			fmt.Fprintln(w.stderr, "modrun-viewer:", err)
		}
		w.model = nil
	}
}

func (w *worker) switchRouting() {
	next := modrun.RoutingPredictor
	if w.model.Info().Routing == modrun.RoutingPredictor {
		next = modrun.RoutingRouter
	}
	opts := w.opts
	opts.Routing = next
	m, err := modrun.Open(w.path, opts)
	if err != nil {
		w.st.update(func(v *view) { v.Status = fmt.Sprintf("cannot switch to %s routing: %v", next, err) })
		return
	}
	w.close()
	w.opts, w.model, w.session = opts, m, m.NewSession()
	info := m.Info()
	w.st.update(func(v *view) {
		v.Info, v.Tokens, v.Rate = info, nil, 0
		v.Status = fmt.Sprintf("%s routing: press Enter to generate", next)
	})
}

// generate runs the prompt field afresh, streaming tokens into the view.
func (w *worker) generate() {
	ctx, cancel := context.WithCancel(context.Background())
	w.mu.Lock()
	w.cancel = cancel
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.cancel = nil
		w.mu.Unlock()
		cancel()
	}()
	prompt := w.st.snapshot().Prompt
	if err := w.session.Reset(); err != nil {
		w.st.update(func(v *view) { v.Status = err.Error() })
		return
	}
	w.st.update(func(v *view) {
		v.Tokens, v.Rate, v.Running, v.Done = nil, 0, true, false
		v.Status = "generating"
	})
	var first time.Time
	generated := 0
	res, err := w.session.Generate(ctx, prompt, modrun.GenerateOptions{MaxTokens: w.maxNew}, func(t modrun.Token) error {
		if !t.Prompt {
			if generated == 0 {
				first = time.Now()
			}
			generated++
		}
		w.st.update(func(v *view) {
			v.Tokens = append(v.Tokens, t)
			if generated > 1 {
				v.Rate = float64(generated-1) / time.Since(first).Seconds()
			}
		})
		return nil
	})
	w.st.update(func(v *view) {
		v.Running, v.Done = false, true
		switch {
		case err == context.Canceled:
			v.Status = fmt.Sprintf("stopped after %d tokens", res.Tokens)
		case err != nil:
			v.Status = "error: " + err.Error()
		default:
			v.Rate = res.DecodeRate()
			v.Status = fmt.Sprintf("done: %d tokens, stop: %s", res.Tokens, res.Stop)
		}
	})
}

// stop cancels the running generation, if any; it returns at once.
func (w *worker) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		w.cancel()
	}
}

// send queues a command unless the worker is busy with many.
func (w *worker) send(c command) {
	select {
	case w.cmds <- c:
	default:
	}
}

// quit stops the generation, ends the worker and waits until the model
// and every GPU object it held are freed.
func (w *worker) quit() {
	w.stop()
	close(w.cmds)
	<-w.done
}
