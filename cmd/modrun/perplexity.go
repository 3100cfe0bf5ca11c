package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/mod"
)

func perplexityMain(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("perplexity", "-m FILE.gguf -f TEXT [--ctx N] [--routing topk|router|predictor] [--capacity C] [--backend B] [--device N]", stderr)
	var mf modelFlags
	mf.register(fs, "topk", "topk (eval mode: the training semantics) | router | predictor (causal, as in generation)")
	textPath := fs.String("f", "", "`TEXT` file to score (required)")
	ctx := fs.Int("ctx", 0, "window length `N` in tokens, BOS included; 0 = the model's context length")
	fs.IntVar(ctx, "c", 0, "short for --ctx")
	capacity := fs.Float64("capacity", 0, "override the routed fraction `C` of --routing topk, in (0, 1] (default: the model's)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *textPath == "" {
		return fmt.Errorf("%w: -f TEXT is required", errUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *ctx < 0 || *ctx == 1 {
		return fmt.Errorf("%w: --ctx %d: must be at least 2 (BOS and one token to score), or 0: the model's", errUsage, *ctx)
	}
	routing, err := mf.check(mod.RoutingTopK, mod.RoutingRouter, mod.RoutingPredictor)
	if err != nil {
		return err
	}
	needsMoD := "" // the flag, as given, that only a MoD model takes
	if flagSet(fs, "routing") {
		needsMoD = "--routing " + mf.routing
	}
	if flagSet(fs, "capacity") {
		if err := fractionFlag("capacity", *capacity); err != nil {
			return err
		}
		if routing != mod.RoutingTopK {
			return fmt.Errorf("%w: --capacity sets the fraction of --routing topk; --routing %s routes by sign, with no fraction", errUsage, routing)
		}
		needsMoD = fmt.Sprintf("--capacity %g", *capacity)
	}
	if err := inputFile("-m", mf.path); err != nil {
		return err
	}
	if err := inputFile("-f", *textPath); err != nil {
		return err
	}
	l, err := mf.load(routing, needsMoD)
	if err != nil {
		return err
	}
	defer l.model.Close()
	cfg := &l.model.Config
	if flagSet(fs, "capacity") {
		cfg.Capacity, cfg.CapacityTokens = float32(*capacity), 0 // a fraction, also for a model whose k is a token count
	}
	window := cfg.ContextLen
	if *ctx != 0 {
		if *ctx > cfg.ContextLen {
			return fmt.Errorf("%w: --ctx %d: must be in [2, %d] (the context length of %s)", errUsage, *ctx, cfg.ContextLen, mf.path)
		}
		window = *ctx
	}
	raw, err := os.ReadFile(*textPath)
	if err != nil {
		return fmt.Errorf("-f: %w", err)
	}
	ids, err := l.tok.Encode(string(raw), false)
	if err != nil {
		return fmt.Errorf("-f %s: %w", *textPath, err)
	}
	if len(ids) == 0 {
		return fmt.Errorf("-f %s: the file has no text to score", *textPath)
	}
	scorer, notice, err := engine.OpenScorer(l.model, l.routing, engine.BackendOptions{Name: mf.backend, Device: mf.device, ContextLen: window})
	if err != nil {
		return fmt.Errorf("--backend %s: %w", mf.backend, err)
	}
	defer scorer.Close()
	if notice != "" {
		fmt.Fprintln(stderr, notice)
	}
	var progress func(done, total int)
	if !*quiet {
		progress = progressBar(stderr, time.Now())
	}
	start := time.Now()
	res, err := engine.Perplexity(scorer, ids, l.tok.BOS(), window, progress)
	if progress != nil {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		return err
	}
	routed := "dense"
	if cfg.IsMoD() {
		routed = routing.String()
		if routing == mod.RoutingTopK {
			if cfg.CapacityTokens > 0 {
				routed += fmt.Sprintf(" (capacity %d tokens)", cfg.CapacityTokens)
			} else {
				routed += fmt.Sprintf(" (capacity %g)", cfg.Capacity)
			}
		}
	}
	fmt.Fprintf(stdout, "model %s, text %s, routing %s, backend %s\n", mf.path, *textPath, routed, scorer.Name)
	windows := "windows"
	if res.Windows == 1 {
		windows = "window"
	}
	fmt.Fprintf(stdout, "%d tokens in %d %s of at most %d: NLL %.4f nats/token, perplexity %.3f (%.0f tokens/s)\n",
		res.Tokens, res.Windows, windows, window, res.NLL, res.Perplexity(), float64(res.Tokens)/time.Since(start).Seconds())
	return nil
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
