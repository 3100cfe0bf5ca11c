package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modrun/modrun/bench"
	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/quant"
	"github.com/modrun/modrun/mod/synth"
	"github.com/modrun/modrun/tokenizer"
)

// benchText fills the benchmark's prompt: plain story text, so that every
// model's tokenizer gives ordinary tokens.
const benchText = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " +
	"One day, she saw a big, red ball. She wanted to play with it, but it was too high. "

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

const benchArgs = "(-m A.gguf | --synthetic SHAPE)... [--type q8_0] [--capacity C] [--seed S] [--save FILE.gguf] [--backends cpu,reference,vulkan] [--routing router,predictor] [--ctx N] [--kv-type f16|f32] [--ubatch N] [--prompt N] [-n N] [--repeats N] [--validate N] [--out FILE.md] [--json] [--json-out FILE.json] [--parallel 1,4,8,16 [--batch-tokens N]]"

// benchFlags are bench's options, parsed.
type benchFlags struct {
	paths, shapes stringList
	scheme        quant.Scheme // of the synthetic models' matrices
	capacity      float64
	seed          uint64
	save          string
	backends      []string
	routings      []mod.Routing
	routingSet    bool
	device        int
	cache         cacheFlags
	o             bench.Options
	out, json     string
	asJSON        bool // --json: the report as JSON on stdout instead of its text
	par           parallelFlags
	so            engine.SamplerOptions // --temp, --top-k, --top-p, --min-p
}

func benchMain(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "serve" { // a running server, not a model file
		return benchServeMain(args[1:], stdout, stderr)
	}
	f, err := parseBenchFlags(args, stderr)
	if err != nil {
		return err
	}
	models, err := f.openModels(stderr)
	defer func() {
		for _, m := range models {
			m.close()
		}
	}()
	if err != nil {
		return err
	}
	if f.par.counts != nil { // bench_parallel.go
		return benchParallel(f, models, args, stdout, stderr)
	}
	// The yardstick first, on an otherwise idle device: how fast each
	// backend's device reads memory and computes.
	var devices []bench.Bandwidth
	var peaks []bench.Peaks
	for _, name := range f.backends {
		bw, err := bench.ProbeBandwidth(engine.BackendOptions{Name: name, Device: f.device})
		if err != nil {
			return fmt.Errorf("--backends %s: bandwidth probe: %w", name, err)
		}
		devices = append(devices, bw)
		pk, err := bench.ProbeCompute(engine.BackendOptions{Name: name, Device: f.device})
		if err != nil { // the rows still run: only their share of a peak is lost
			fmt.Fprintf(stderr, "bench: --backends %s: compute probe: %v\n", name, err)
			pk = bench.Peaks{Device: bw.Device, Method: "compute probe failed: " + err.Error()}
		}
		peaks = append(peaks, pk)
	}
	// Every row is opened and validated first; then the timed runs go round
	// by round over all rows, so that load on a shared machine falls on
	// every row alike and the ratios between rows stay meaningful.
	var rows []*benchRow
	defer func() {
		for _, row := range rows {
			row.close()
		}
	}()
	for _, m := range models {
		for _, routing := range f.routingsOf(m) {
			for i, name := range f.backends {
				fmt.Fprintf(stderr, "bench: validating %s %s on %s\n", m.name, routingName(m, routing), name)
				row, err := f.openBenchRow(m, routing, name, devices[i], peaks[i])
				if err != nil {
					return err
				}
				rows = append(rows, row)
			}
		}
	}
	for i := 0; i < f.o.Repeats; i++ {
		for _, row := range rows {
			if err := row.Time(); err != nil {
				return fmt.Errorf("%s on %s: %w", row.model.name, row.backend, err)
			}
		}
	}
	rep := newBenchReport(args, f.o, devices, peaks, rows)
	if err := writeReport(stdout, f.asJSON, rep, rep.markdown()); err != nil {
		return err
	}
	if f.out != "" {
		if err := os.WriteFile(f.out, []byte(rep.markdown()), 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	if f.json != "" {
		if err := rep.writeJSON(f.json); err != nil {
			return fmt.Errorf("--json-out: %w", err)
		}
	}
	return nil
}

func parseBenchFlags(args []string, stderr io.Writer) (*benchFlags, error) {
	fs := newFlags("bench", benchArgs, stderr)
	f := &benchFlags{}
	fs.Var(&f.paths, "m", "model `FILE`.gguf; repeat to compare (the first is the baseline of the others, e.g. the dense model)")
	fs.Var(&f.shapes, "synthetic", "a random-weight model of `SHAPE`, built in memory: stories260k, stories15m, tinyllama-1.1b, llama2-7b, llama3.2-1b, or d=2048,L=4,h=32,kv=4,ff=5632,vocab=32000[,ctx=N], or a name with sizes changed (llama3.2-1b,d=256,L=2); repeatable")
	typ := fs.String("type", "q8_0", "weight matrices of synthetic models: "+quant.Names()+" (q2_k, q3_k_s..q6_k: llama.cpp's mixes)")
	fs.Float64Var(&f.capacity, "capacity", 0, "with --synthetic: also bench each shape's MoD twin routing this fraction `C` (e.g. 0.125)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the synthetic weights (the same model on every machine)")
	fs.StringVar(&f.save, "save", "", "also write the synthetic model(s) to `FILE`.gguf (several: FILE-NAME.gguf each)")
	backends := fs.String("backends", "cpu,vulkan", "comma-separated backends to run: cpu, reference, vulkan")
	fs.IntVar(&f.device, "device", -1, "Vulkan device `N`, as modrun devices lists them. -1: $MODRUN_DEVICE or the best")
	f.cache.register(fs)
	routing := fs.String("routing", "router,predictor", "causal routing of MoD models, comma-separated: router, predictor (predictor only where the model has one, unless named)")
	fs.IntVar(&f.o.PromptTokens, "prompt", 64, "prompt tokens prefilled")
	fs.IntVar(&f.o.DecodeTokens, "n", 64, "tokens decoded")
	fs.IntVar(&f.o.Repeats, "repeats", 3, "timed runs; the median is reported")
	fs.IntVar(&f.o.ValidateTokens, "validate", 16, "greedy tokens `N` checked against the CPU reference before timing (fewer on a large model: the reference is slow); 0 = no validation")
	fs.StringVar(&f.out, "out", "", "also write the report to `FILE`.md (e.g. bench/results/...)")
	fs.BoolVar(&f.asJSON, "json", false, "print the report as one JSON document instead of its text")
	fs.StringVar(&f.json, "json-out", "", "also write the report as JSON to `FILE` (the text still goes to --out or stdout)")
	f.par.register(fs)
	f.so = engine.DefaultSampler()
	fs.Func("temp", "decode tokens drawn at temperature `T` (0 = greedy, the default), each run with the same seed", floatFlag(&f.so.Temperature))
	fs.IntVar(&f.so.TopK, "top-k", 0, "with --temp: keep the `K` most likely tokens (0 = all)")
	fs.Func("top-p", "with --temp: keep the most likely tokens up to probability `P` (default 1 = all)", floatFlag(&f.so.TopP))
	fs.Func("min-p", "with --temp: drop tokens less likely than `P` times the best (default 0 = none)", floatFlag(&f.so.MinP))
	fs.Func("repeat-penalty", "with --temp: penalty `R` on the last 64 tokens (default 1 = off; each token's logits then come back to the host)", floatFlag(&f.so.RepeatPenalty))
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if err := f.so.Check(); err != nil {
		return nil, flagError(err)
	}
	if f.so.Temperature > 0 {
		f.so.Seed = 1
		f.o.Sampler = &f.so
	} else {
		for _, name := range []string{"top-k", "top-p", "min-p", "repeat-penalty"} {
			if flagSet(fs, name) {
				return nil, fmt.Errorf("%w: --%s needs --temp above 0 (at temperature 0 a token is the argmax)", errUsage, name)
			}
		}
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if len(f.paths)+len(f.shapes) == 0 {
		return nil, fmt.Errorf("%w: give a model: -m FILE.gguf or --synthetic SHAPE", errUsage)
	}
	var err error
	if f.scheme, err = quant.Parse(*typ); err != nil {
		return nil, fmt.Errorf("%w: --type: %v", errUsage, err)
	}
	if flagSet(fs, "capacity") {
		if err := fractionFlag("capacity", f.capacity); err != nil {
			return nil, err
		}
		if len(f.shapes) == 0 {
			return nil, fmt.Errorf("%w: --capacity %g builds a MoD twin of a --synthetic model: give --synthetic", errUsage, f.capacity)
		}
	}
	if f.save != "" && len(f.shapes) == 0 {
		return nil, fmt.Errorf("%w: --save writes synthetic models: give --synthetic", errUsage)
	}
	if f.backends, err = engine.ParseBackends(*backends); err != nil {
		return nil, flagError(err)
	}
	f.routingSet = flagSet(fs, "routing")
	for _, name := range strings.Split(*routing, ",") {
		r, err := mod.ParseRouting(strings.TrimSpace(name))
		if err != nil || r == mod.RoutingTopK {
			return nil, fmt.Errorf("%w: --routing %q: want router and/or predictor", errUsage, name)
		}
		f.routings = append(f.routings, r)
	}
	if f.o.PromptTokens < 1 {
		return nil, fmt.Errorf("%w: --prompt %d: must be positive", errUsage, f.o.PromptTokens)
	}
	if f.o.Repeats < 1 {
		return nil, fmt.Errorf("%w: --repeats %d: must be positive", errUsage, f.o.Repeats)
	}
	if f.o.ValidateTokens < 0 {
		return nil, fmt.Errorf("%w: --validate %d: want a number of tokens, or 0 for none", errUsage, f.o.ValidateTokens)
	}
	if f.o.DecodeTokens < 2 {
		return nil, fmt.Errorf("%w: -n %d: decode is timed from the second token on (the first comes with the prompt): give at least 2", errUsage, f.o.DecodeTokens)
	}
	if err := f.check(fs); err != nil {
		return nil, err
	}
	if err := f.par.check(fs, f.backends); err != nil {
		return nil, err
	}
	return f, nil
}

// check validates what parseBenchFlags has not, before any model is loaded
// or built: the cache flags, --device, every shape, and every path read or
// written.
func (f *benchFlags) check(fs *flag.FlagSet) error {
	o := engine.BackendOptions{Name: f.backends[0], Device: f.device, ContextLen: f.cache.ctx, KVType: f.cache.kvType, UBatch: f.cache.ubatch}
	if err := checkFlags(o, engine.Flags{Backends: f.backends, UBatch: true}); err != nil {
		return err
	}
	for _, spec := range f.shapes {
		shape, err := synth.ParseShape(spec)
		if err != nil {
			return fmt.Errorf("%w: --synthetic: %v", errUsage, err)
		}
		if err := f.fits(shape); err != nil {
			return err
		}
	}
	for _, path := range f.paths {
		if err := inputFile("-m", path); err != nil {
			return err
		}
	}
	for _, o := range []struct{ name, path string }{{"--out", f.out}, {"--json-out", f.json}, {"--save", f.save}} {
		if o.path == "" {
			continue
		}
		if err := outputFile(o.name, o.path); err != nil {
			return err
		}
	}
	return nil
}

// fits checks --ctx, --prompt and -n against a synthetic shape's context
// length before the model is built (a file's is checked when it loads).
func (f *benchFlags) fits(shape synth.Shape) error {
	ctx := shape.ContextLen
	if f.cache.ctx > shape.ContextLen {
		return fmt.Errorf("%w: --ctx %d: must be in [1, %d] (the context length of %s)", errUsage, f.cache.ctx, shape.ContextLen, shape.Name)
	}
	if f.cache.ctx > 0 {
		ctx = f.cache.ctx
	}
	if n := f.o.PromptTokens + f.o.DecodeTokens; n > ctx {
		return fmt.Errorf("%w: --prompt %d + -n %d = %d tokens pass the context length %d of %s", errUsage, f.o.PromptTokens, f.o.DecodeTokens, n, ctx, shape.Name)
	}
	if n := f.o.PromptTokens + f.o.ValidateTokens; n > ctx {
		return fmt.Errorf("%w: --prompt %d + --validate %d = %d tokens pass the context length %d of %s", errUsage, f.o.PromptTokens, f.o.ValidateTokens, n, ctx, shape.Name)
	}
	return nil
}

// benchModel is a model under benchmark, from a file or built in memory.
type benchModel struct {
	name     string // the -m path, or the synthetic model's name
	model    *mod.Model
	tok      *tokenizer.Tokenizer
	baseline *benchModel // whose decode rate its rows are compared with (itself for a baseline)
	shape    string      // the synthetic shape, or ""
}

func (m *benchModel) close() { m.model.Close() }

// openModels loads the -m files, then builds each synthetic shape and, with
// --capacity, its MoD twin, saving them with --save. The first -m model is
// the baseline of the files; each shape's dense model that of its twin.
func (f *benchFlags) openModels(stderr io.Writer) ([]*benchModel, error) {
	var out []*benchModel
	for _, path := range f.paths {
		mf := modelFlags{path: path, backend: engine.BackendCPU, routing: "router"}
		l, err := mf.load(mod.RoutingRouter, "")
		if err != nil {
			return out, err
		}
		m := &benchModel{name: path, model: l.model, tok: l.tok}
		m.baseline = m
		if len(out) > 0 {
			m.baseline = out[0]
		}
		out = append(out, m)
	}
	nSynth := len(f.shapes) * (1 + btoi(f.capacity > 0))
	for _, spec := range f.shapes {
		shape, err := synth.ParseShape(spec)
		if err != nil {
			return out, fmt.Errorf("%w: --synthetic: %v", errUsage, err)
		}
		var dense *benchModel
		for _, capacity := range []float64{0, f.capacity} {
			if capacity == 0 && dense != nil {
				break
			}
			start := time.Now()
			sm, err := synth.Build(shape, synth.Options{Scheme: f.scheme, Seed: f.seed, Capacity: float32(capacity)})
			if err != nil {
				return out, fmt.Errorf("--synthetic %s: %w", spec, err)
			}
			fmt.Fprintf(stderr, "bench: built %s (%s, %.2f GiB, seed %d) in %.1fs\n", sm.Name, f.scheme, float64(len(sm.Data))/(1<<30), f.seed, time.Since(start).Seconds())
			tok, err := tokenizer.FromGGUF(sm.File)
			if err != nil {
				sm.Close()
				return out, fmt.Errorf("--synthetic %s: %w", spec, err)
			}
			m := &benchModel{name: sm.Name, model: sm.Model, tok: tok, shape: shape.Name}
			if dense == nil {
				dense, m.baseline = m, m
			} else {
				m.baseline = dense
			}
			out = append(out, m)
			if f.save != "" {
				path := f.save
				if nSynth > 1 {
					path = strings.TrimSuffix(f.save, filepath.Ext(f.save)) + "-" + sm.Name + ".gguf"
				}
				if err := sm.Save(path); err != nil {
					return out, fmt.Errorf("--save: %w", err)
				}
				fmt.Fprintf(stderr, "bench: wrote %s\n", path)
			}
		}
	}
	return out, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// routingsOf is the routings m is benched with: one row for a dense model;
// for a MoD model each --routing that it has (a predictor named with
// --routing that the model lacks is an error).
func (f *benchFlags) routingsOf(m *benchModel) []mod.Routing {
	if !m.model.Config.IsMoD() {
		return []mod.Routing{mod.RoutingRouter} // ignored
	}
	var out []mod.Routing
	for _, r := range f.routings {
		if r == mod.RoutingPredictor && !m.model.Config.HasPredictor() && !f.routingSet {
			continue
		}
		out = append(out, r)
	}
	return out
}

func routingName(m *benchModel, r mod.Routing) string {
	if !m.model.Config.IsMoD() {
		return "dense"
	}
	return r.String()
}

// plantError, set by a test only, wraps each row's runner before it is
// validated: how the tests plant a wrong kernel result and see bench
// refuse it.
var plantError func(engine.Runner) engine.Runner

// benchRow is one model with one routing on one backend, validated and
// ready to time.
type benchRow struct {
	*bench.Benchmark
	model   *benchModel
	routing mod.Routing
	backend string
	device  bench.Bandwidth
	peaks   bench.Peaks
	b       *engine.Backend
}

func (row *benchRow) close() {
	if row.b != nil {
		row.b.Close()
	}
}

func (f *benchFlags) openBenchRow(m *benchModel, routing mod.Routing, backend string, bw bench.Bandwidth, pk bench.Peaks) (_ *benchRow, err error) {
	if routing == mod.RoutingPredictor && m.model.Config.IsMoD() && !m.model.Config.HasPredictor() {
		return nil, fmt.Errorf("--routing predictor: %s has no predictor", m.name)
	}
	row := &benchRow{model: m, routing: routing, backend: backend, device: bw, peaks: pk}
	bo := engine.BackendOptions{Name: backend, Device: f.device}
	if err := f.cache.options(&bo, m.model); err != nil {
		return nil, err
	}
	if row.b, _, err = engine.OpenBackend(m.model, routing, bo); err != nil {
		return nil, fmt.Errorf("%s on %s: %w", m.name, backend, err)
	}
	if plantError != nil {
		row.b.Runner = plantError(row.b.Runner)
	}
	o := f.o
	prompt, err := m.tok.Encode(strings.Repeat(benchText, 1+o.PromptTokens/30), true)
	if err != nil {
		row.close()
		return nil, err
	}
	o = bench.ValidationFor(o, bench.Params(m.model))
	if row.Benchmark, err = bench.NewBenchmark(row.b, m.model, routing, prompt, o); err != nil {
		row.close()
		return nil, fmt.Errorf("%s on %s: %w", m.name, row.b.Name, err)
	}
	return row, nil
}
