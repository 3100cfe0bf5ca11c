package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/mod"
)

// benchText fills the benchmark's prompt: plain story text, so that every
// model's tokenizer gives ordinary tokens.
const benchText = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " +
	"One day, she saw a big, red ball. She wanted to play with it, but it was too high. "

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func benchMain(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("bench", "-m A.gguf [-m B.gguf ...] [--backends cpu,vulkan] [--prompt N] [-n N] [--repeats N] [--out FILE.md]", stderr)
	var models stringList
	fs.Var(&models, "m", "model `FILE`.gguf; repeat to compare (the first is the baseline, e.g. the dense model)")
	backends := fs.String("backends", "cpu,vulkan", "comma-separated backends to run: cpu, vulkan")
	device := fs.Int("device", -1, "Vulkan device `N` (default $MODRUN_DEVICE or the best)")
	routing := fs.String("routing", "router", "causal routing of MoD models: router | predictor")
	o := engine.BenchOptions{ValidateTokens: 16, ValidateTol: 1e-3}
	fs.IntVar(&o.PromptTokens, "prompt", 64, "prompt tokens prefilled")
	fs.IntVar(&o.DecodeTokens, "n", 64, "tokens decoded")
	fs.IntVar(&o.Repeats, "repeats", 3, "timed runs; the median is reported")
	out := fs.String("out", "", "also write the report to `FILE`.md (e.g. bench/results/...)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if len(models) == 0 {
		return fmt.Errorf("%w: -m FILE.gguf is required", errUsage)
	}
	r, err := mod.ParseRouting(*routing)
	if err != nil || r == mod.RoutingTopK {
		return fmt.Errorf("%w: --routing %q: want router or predictor", errUsage, *routing)
	}
	if o.PromptTokens < 1 || o.DecodeTokens < 1 || o.Repeats < 1 {
		return fmt.Errorf("%w: --prompt, -n and --repeats must be positive", errUsage)
	}
	var report strings.Builder
	fmt.Fprintf(&report, "# modrun bench, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&report, "`modrun bench %s` on %s/%s, %d CPUs. Each row was validated first: %d greedy tokens equal to the CPU reference's, logits within %g. Rates are medians of %d runs: prefill of %d tokens, decode of %d.\n\n",
		strings.Join(args, " "), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), o.ValidateTokens, o.ValidateTol, o.Repeats, o.PromptTokens, o.DecodeTokens)
	fmt.Fprintf(&report, "| model | backend | prefill tok/s | decode tok/s | decode × first model | decode × cpu | routed %% per layer | max Δlogit |\n|---|---|---|---|---|---|---|---|\n")
	baseline := map[string]float64{} // backend -> decode rate of the first model
	for _, path := range models {
		cpuRate := 0.0
		for _, name := range strings.Split(*backends, ",") {
			row, err := benchOne(path, strings.TrimSpace(name), *device, r, o)
			if err != nil {
				return err
			}
			if _, ok := baseline[name]; !ok {
				baseline[name] = row.DecodeRate
			}
			if name == engine.BackendCPU {
				cpuRate = row.DecodeRate
			}
			vsCPU := "—"
			if cpuRate > 0 {
				vsCPU = fmt.Sprintf("%.2f", row.DecodeRate/cpuRate)
			}
			fmt.Fprintf(&report, "| %s | %s | %.0f | %.0f | %.2f | %s | %s | %.2g |\n", path, row.Backend, row.PrefillRate, row.DecodeRate,
				row.DecodeRate/baseline[name], vsCPU, percents(row.RoutedPercent), row.MaxLogitDiff)
		}
	}
	if _, err := io.WriteString(stdout, report.String()); err != nil {
		return err
	}
	if *out != "" {
		if err := os.WriteFile(*out, []byte(report.String()), 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	return nil
}

func benchOne(path, backend string, device int, r mod.Routing, o engine.BenchOptions) (engine.BenchResult, error) {
	mf := modelFlags{path: path, backend: backend, device: device, routing: r.String()}
	l, err := mf.load(false)
	if err != nil {
		return engine.BenchResult{}, err
	}
	defer l.model.Close()
	routing := r
	if !l.model.Config.IsMoD() {
		routing = mod.RoutingRouter // dense: ignored
	} else if r == mod.RoutingPredictor && l.model.Config.PredictorHidden == 0 {
		return engine.BenchResult{}, fmt.Errorf("--routing predictor: %s has no predictor", path)
	}
	if backend == engine.BackendAuto {
		return engine.BenchResult{}, fmt.Errorf("%w: --backends: name cpu or vulkan, not auto", errUsage)
	}
	b, _, err := engine.OpenBackend(l.model, routing, engine.BackendOptions{Name: backend, Device: device})
	if err != nil {
		return engine.BenchResult{}, fmt.Errorf("%s on %s: %w", path, backend, err)
	}
	defer b.Close()
	prompt, err := l.tok.Encode(strings.Repeat(benchText, 1+o.PromptTokens/30), true)
	if err != nil {
		return engine.BenchResult{}, err
	}
	res, err := engine.Bench(b, l.model, routing, prompt, o)
	if err != nil {
		return res, fmt.Errorf("%s on %s: %w", path, b.Name, err)
	}
	return res, nil
}

func percents(p []float64) string {
	if len(p) == 0 {
		return "dense"
	}
	parts := make([]string, len(p))
	for i, v := range p {
		parts[i] = fmt.Sprintf("%.0f", v)
	}
	return strings.Join(parts, ", ")
}
