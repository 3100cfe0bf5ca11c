package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/modrun/modrun/bench"
	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/mod"
)

const perplexityArgs = "-m FILE.gguf -f TEXT [--ctx N] [--routing topk|router|predictor] [--capacity C] [--backend B] [--device N] [--kv-type f16|f32] [--compare BACKEND|FILE.gguf] [--json] [--quiet]"

// perplexityFlags are perplexity's options, parsed.
type perplexityFlags struct {
	mf       modelFlags
	text     string
	compare  string // a backend name or a model file, or ""
	kvType   string // --kv-type: the scorer's KV cache, "" = the backend's default
	asJSON   bool
	quiet    bool
	opts     engine.PerplexityOptions
	needsMoD string // the flag, as given, that only a MoD model takes
}

// scored, set by a test only, is called after each window with the tokens
// scored so far: how a test interrupts a run part way.
var scored func(done int)

func perplexityMain(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	f, err := parsePerplexityFlags(args, stderr)
	if err != nil {
		return err
	}
	l, err := f.mf.load(f.opts.Routing, f.needsMoD)
	if err != nil {
		return err
	}
	defer l.model.Close()
	window, err := f.opts.Apply(l.model)
	if err != nil {
		return flagError(err)
	}
	raw, err := os.ReadFile(f.text)
	if err != nil {
		return fmt.Errorf("-f: %w", err)
	}
	ids, err := l.tok.Encode(string(raw), false)
	if err != nil {
		return fmt.Errorf("-f %s: %w", f.text, err)
	}
	if len(ids) == 0 {
		return fmt.Errorf("-f %s: the file has no text to score", f.text)
	}
	scorer, err := f.openScorer(l.model, l.routing, f.mf.backend, f.kvType, window, stderr)
	if err != nil {
		return err
	}
	defer scorer.Close()
	if scorer.Emulated && len(ids) > lavapipeQuick {
		fmt.Fprintf(stderr, "modrun perplexity: %s is a CPU emulation: %d tokens will take minutes there (--backend cpu is much faster)\n",
			strings.TrimPrefix(scorer.Name, "vulkan: "), len(ids))
	}
	rep := &perplexityReport{Model: f.mf.path, Text: f.text, Routing: routingOf(&l.model.Config, l.routing),
		Backend: scorer.Name, KVType: f.kvType, Window: window, TextTokens: len(ids)}
	var ref *engine.ScorerBackend // --compare's scorer
	if f.compare != "" {
		if ref, rep.Compare, err = f.openReference(l, scorer.Name, window, stderr); err != nil {
			return err
		}
		defer ref.Close()
	}

	var bar func(done, total int)
	if !f.quiet {
		bar = progressBar(stderr, time.Now())
	}
	progress := func(done, total int) {
		if bar != nil {
			bar(done, total)
		}
		if scored != nil {
			scored(done)
		}
	}
	start := time.Now()
	// ^C stops between windows, and the windows scored so far are printed.
	watchingInterrupt.Store(true)
	if ref == nil {
		var res engine.PerplexityResult
		res, err = engine.PerplexityContext(interrupt, scorer, ids, l.tok.BOS(), window, progress)
		rep.PerplexityResult = res
	} else {
		var res bench.CompareResult
		res, err = bench.Compare(interrupt, scorer, ref, ids, l.tok.BOS(), window, progress)
		rep.PerplexityResult = engine.PerplexityResult{Tokens: res.Tokens, Windows: res.Windows, NLL: res.NLL, NLLErr: res.NLLErr}
		rep.Compare.CompareResult = &res
	}
	watchingInterrupt.Store(false)
	if bar != nil {
		fmt.Fprintln(stderr)
	}
	rep.Interrupted = errors.Is(err, context.Canceled) && interrupt.Err() != nil
	if err != nil && !(rep.Interrupted && rep.Tokens > 0) {
		if rep.Interrupted {
			return errInterrupted
		}
		return err
	}
	rep.Perplexity = rep.PerplexityResult.Perplexity()
	rep.TokensPerS = float64(rep.Tokens) / time.Since(start).Seconds()
	if err := rep.write(stdout, f.asJSON); err != nil {
		return err
	}
	if rep.Interrupted {
		return errInterrupted // what was scored is printed
	}
	return nil
}

func parsePerplexityFlags(args []string, stderr io.Writer) (*perplexityFlags, error) {
	fs := newFlags("perplexity", perplexityArgs, stderr)
	f := &perplexityFlags{}
	f.mf.register(fs, "topk", "topk (eval mode: the training semantics) | router | predictor (causal, as in generation)")
	fs.StringVar(&f.text, "f", "", "`TEXT` file to score (required)")
	fs.IntVar(&f.opts.Window, "ctx", 0, "window length `N` in tokens, BOS included; 0 = the model's context length")
	fs.IntVar(&f.opts.Window, "c", 0, "short for --ctx")
	capacity := fs.Float64("capacity", 0, "override the routed fraction `C` of --routing topk, in (0, 1] (default: the model's)")
	fs.StringVar(&f.compare, "compare", "", "also score with `BACKEND` (cpu, reference, vulkan, auto: the same model) or FILE.gguf (another model with the same vocabulary, on --backend), "+
		"the reference, and print the ΔNLL, the mean KL divergence from the reference's next-token distributions and the top-1 agreement")
	fs.StringVar(&f.kvType, "kv-type", "", "the KV cache's type on the cpu backend and in Vulkan's causal scoring: f16 | f32 (default f32; --compare FILE too, not --compare BACKEND)")
	fs.BoolVar(&f.asJSON, "json", false, "print the result as one JSON document instead of its text")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if f.text == "" {
		return nil, fmt.Errorf("%w: -f TEXT is required", errUsage)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	var err error
	if f.opts.Routing, err = f.mf.check(mod.RoutingTopK, mod.RoutingRouter, mod.RoutingPredictor); err != nil {
		return nil, err
	}
	if flagSet(fs, "routing") {
		f.needsMoD = "--routing " + f.mf.routing
	}
	if flagSet(fs, "capacity") {
		f.opts.Capacity = capacity
		f.needsMoD = fmt.Sprintf("--capacity %g", *capacity)
	}
	if err := f.opts.Check(); err != nil {
		return nil, flagError(err)
	}
	if err := checkFlags(engine.BackendOptions{Name: engine.BackendAuto, Device: -1, KVType: f.kvType}, engine.Flags{}); err != nil {
		return nil, err
	}
	if f.kvType != "" && f.mf.backend == engine.BackendReference {
		return nil, fmt.Errorf("%w: --kv-type sets the vulkan and cpu backends' KV cache; the reference's is float32", errUsage)
	}
	if err := inputFile("-m", f.mf.path); err != nil {
		return nil, err
	}
	if err := inputFile("-f", f.text); err != nil {
		return nil, err
	}
	if f.compare != "" && !isBackend(f.compare) {
		if err := inputFile("--compare", f.compare); err != nil {
			return nil, fmt.Errorf("%w (want a backend, %s, or a model file)", err, "auto, cpu, reference or vulkan")
		}
	}
	return f, nil
}

// lavapipeQuick is the most tokens a CPU emulation of Vulkan scores without
// a warning: lavapipe scores 180-1,100 tokens/s (eval mode the slower), so
// models/tinystories-valid.txt's 47,529 take minutes where 4,096 take
// seconds. A var: a test lowers it.
var lavapipeQuick = 4096

// isBackend says whether --compare's value names a backend, not a file.
func isBackend(s string) bool {
	switch s {
	case engine.BackendAuto, engine.BackendCPU, engine.BackendReference, engine.BackendVulkan:
		return true
	}
	return false
}

// openScorer opens m's scorer on backend with a KV cache of kvType ("":
// the backend's default), saying on stderr where auto fell back.
func (f *perplexityFlags) openScorer(m *mod.Model, r mod.Routing, backend, kvType string, window int, stderr io.Writer) (*engine.ScorerBackend, error) {
	sc, notice, err := engine.OpenScorer(m, r, engine.BackendOptions{Name: backend, Device: f.mf.device, ContextLen: window, KVType: kvType})
	if err != nil {
		return nil, fmt.Errorf("--backend %s: %w", backend, err)
	}
	if notice != "" {
		fmt.Fprintln(stderr, notice)
	}
	return sc, nil
}

// openReference opens --compare's scorer: l's model on another backend, or
// another model file on the backend the scorer runs on (backend).
func (f *perplexityFlags) openReference(l *loaded, backend string, window int, stderr io.Writer) (*engine.ScorerBackend, *compareReport, error) {
	if isBackend(f.compare) {
		sc, err := f.openScorer(l.model, l.routing, f.compare, "", window, stderr)
		if err != nil {
			return nil, nil, fmt.Errorf("--compare: %w", err)
		}
		return sc, &compareReport{With: f.compare, Backend: sc.Name, Model: f.mf.path}, nil
	}
	mf := f.mf
	mf.path = f.compare
	other, err := mf.load(f.opts.Routing, f.needsMoD)
	if err != nil {
		return nil, nil, fmt.Errorf("--compare: %w", err)
	}
	defer other.model.Close() // the scorer has what it needs
	if _, err := f.opts.Apply(other.model); err != nil {
		return nil, nil, fmt.Errorf("--compare %s: %w", f.compare, flagError(err))
	}
	if a, b := l.model.Config.NVocab, other.model.Config.NVocab; a != b || l.tok.BOS() != other.tok.BOS() {
		return nil, nil, fmt.Errorf("--compare %s: its vocabulary (%d tokens, BOS %d) is not that of %s (%d tokens, BOS %d): the two cannot score the same tokens",
			f.compare, b, other.tok.BOS(), f.mf.path, a, l.tok.BOS())
	}
	sc, err := f.openScorer(other.model, other.routing, backend, f.kvType, window, stderr)
	if err != nil {
		return nil, nil, fmt.Errorf("--compare %s: %w", f.compare, err)
	}
	return sc, &compareReport{With: f.compare, Backend: sc.Name, Model: f.compare}, nil
}

// routingOf names how a model is scored: dense, or its routing and the
// capacity of top-k.
func routingOf(cfg *mod.Config, routing mod.Routing) string {
	if !cfg.IsMoD() {
		return "dense"
	}
	s := routing.String()
	if routing == mod.RoutingTopK {
		if cfg.CapacityTokens > 0 {
			s += fmt.Sprintf(" (capacity %d tokens)", cfg.CapacityTokens)
		} else {
			s += fmt.Sprintf(" (capacity %g)", cfg.Capacity)
		}
	}
	return s
}

// progressBar draws "[#####.....] 42% 1234/5678 tokens" on one line of w,
// at most five times a second, and only when w is a terminal: a log file
// gets the result alone.
func progressBar(w io.Writer, start time.Time) func(done, total int) {
	if f, ok := w.(*os.File); !ok || !isTerminal(f) {
		return nil
	}
	var last time.Time
	return func(done, total int) {
		if time.Since(last) < 200*time.Millisecond && done < total {
			return
		}
		last = time.Now()
		const width = 30
		n := width * done / total
		rate := float64(done) / time.Since(start).Seconds()
		fmt.Fprintf(w, "\r[%s%s] %3d%% %d/%d tokens, %.0f tokens/s", strings.Repeat("#", n), strings.Repeat(".", width-n),
			100*done/total, done, total, rate)
	}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
