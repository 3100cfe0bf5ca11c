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
	fmt.Fprintf(&report, "`modrun bench %s` on %s/%s, %d CPUs. Each row was validated first: %d greedy tokens equal to the CPU reference's, logits within %g. Rates are medians of %d runs, taken round by round over all rows: prefill of %d tokens, decode of %d.\n\n",
		strings.Join(args, " "), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), o.ValidateTokens, o.ValidateTol, o.Repeats, o.PromptTokens, o.DecodeTokens)
	fmt.Fprintf(&report, "| model | backend | prefill tok/s | decode tok/s | decode × first model | decode × cpu | routed %% per layer | max Δlogit |\n|---|---|---|---|---|---|---|---|\n")
	// Every row is opened and validated first; then the timed runs go round
	// by round over all rows, so that load on a shared machine falls on
	// every row alike and the ratios between rows stay meaningful.
	var rows []*benchRow
	defer func() {
		for _, row := range rows {
			row.close()
		}
	}()
	for _, path := range models {
		for _, name := range strings.Split(*backends, ",") {
			row, err := openBenchRow(path, strings.TrimSpace(name), *device, r, o)
			if err != nil {
				return err
			}
			rows = append(rows, row)
		}
	}
	for i := 0; i < o.Repeats; i++ {
		for _, row := range rows {
			if err := row.Time(); err != nil {
				return fmt.Errorf("%s on %s: %w", row.path, row.backend, err)
			}
		}
	}
	baseline := map[string]float64{} // backend -> decode rate of the first model
	cpuRate := map[string]float64{}  // model -> its decode rate on the CPU
	for _, row := range rows {
		res := row.Result()
		if _, ok := baseline[row.backend]; !ok {
			baseline[row.backend] = res.DecodeRate
		}
		if row.backend == engine.BackendCPU {
			cpuRate[row.path] = res.DecodeRate
		}
		vsCPU := "—"
		if c := cpuRate[row.path]; c > 0 {
			vsCPU = fmt.Sprintf("%.2f", res.DecodeRate/c)
		}
		fmt.Fprintf(&report, "| %s | %s | %.0f | %.0f | %.2f | %s | %s | %.2g |\n", row.path, res.Backend, res.PrefillRate, res.DecodeRate,
			res.DecodeRate/baseline[row.backend], vsCPU, percents(res.RoutedPercent), res.MaxLogitDiff)
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

// benchRow is one model open on one backend, validated and ready to time.
type benchRow struct {
	*engine.Benchmark
	path, backend string
	model         *mod.Model
	b             *engine.Backend
}

func (row *benchRow) close() {
	if row.b != nil {
		row.b.Close()
	}
	row.model.Close()
}

func openBenchRow(path, backend string, device int, r mod.Routing, o engine.BenchOptions) (_ *benchRow, err error) {
	if backend == engine.BackendAuto {
		return nil, fmt.Errorf("%w: --backends: name cpu or vulkan, not auto", errUsage)
	}
	mf := modelFlags{path: path, backend: backend, device: device, routing: r.String()}
	l, err := mf.load(false)
	if err != nil {
		return nil, err
	}
	row := &benchRow{path: path, backend: backend, model: l.model}
	defer func() {
		if err != nil {
			row.close()
		}
	}()
	routing := r
	if !l.model.Config.IsMoD() {
		routing = mod.RoutingRouter // dense: ignored
	} else if r == mod.RoutingPredictor && l.model.Config.PredictorHidden == 0 {
		return nil, fmt.Errorf("--routing predictor: %s has no predictor", path)
	}
	if row.b, _, err = engine.OpenBackend(l.model, routing, engine.BackendOptions{Name: backend, Device: device}); err != nil {
		return nil, fmt.Errorf("%s on %s: %w", path, backend, err)
	}
	prompt, err := l.tok.Encode(strings.Repeat(benchText, 1+o.PromptTokens/30), true)
	if err != nil {
		return nil, err
	}
	if row.Benchmark, err = engine.NewBenchmark(row.b, l.model, routing, prompt, o); err != nil {
		return nil, fmt.Errorf("%s on %s: %w", path, row.b.Name, err)
	}
	return row, nil
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
