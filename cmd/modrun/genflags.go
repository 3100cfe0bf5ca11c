package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	api "github.com/modrun/modrun"
	"github.com/modrun/modrun/engine"
)

// generationFlags are the flags of the commands that generate through the
// API (run, chat): model, cache and sampling.
type generationFlags struct {
	mf modelFlags
	cf cacheFlags
	sf samplingFlags
}

func (gf *generationFlags) register(fs *flag.FlagSet) {
	gf.mf.register(fs, "", "causal routing of MoD blocks: router (r > 0) | predictor (p > 0) (default: the one the model was trained for, llama-mod.mod.causal_routing, else router)")
	gf.cf.register(fs)
	gf.sf.register(fs)
}

// generationCommand is the flag set run and chat share: the model, cache
// and sampling flags, -n, --parse-special, --stop and -t.
type generationCommand struct {
	fs           *flag.FlagSet
	gf           generationFlags
	n            int
	parseSpecial bool
	stops        []string
	threads      int
	seed         uint64   // the sampler's seed, after open (-1 drawn from the clock)
	gpuOnly      []string // flags given that only the Vulkan backend uses, as "--profile"
	grammar      *grammarFlags
}

// newGenerationCommand makes the flag set of command name (run or chat);
// parseSpecialHelp says what --parse-special reads there.
func newGenerationCommand(name, argsUsage, nHelp, parseSpecialHelp string, stderr io.Writer) *generationCommand {
	g := &generationCommand{fs: newFlags(name, argsUsage, stderr)}
	g.gf.register(g.fs)
	g.fs.IntVar(&g.n, "n", 256, nHelp)
	g.fs.BoolVar(&g.parseSpecial, "parse-special", false, parseSpecialHelp)
	g.fs.Func("stop", "stop at `TEXT`, which is not printed (repeatable: the first found stops)", func(v string) error {
		g.stops = append(g.stops, v) // checked as GenerateOptions.Stop
		return nil
	})
	g.fs.IntVar(&g.threads, "t", 0, "threads `N` of the CPU backends (default 0: one per core)")
	g.grammar = registerGrammarFlags(g.fs)
	return g
}

// parse parses args and checks the shared flags' values; argHint says
// where the input comes from, for an unexpected argument's error.
func (g *generationCommand) parse(args []string, argHint string) error {
	if err := parseFlags(g.fs, args); err != nil {
		return err
	}
	if g.n == -1 || g.n == -2 {
		g.n = 0 // llama.cpp's "until the end" (-1) and "until the context is full" (-2): modrun's 0 is both
	}
	switch {
	case g.fs.NArg() > 0 && g.gf.mf.path == "" && strings.HasSuffix(g.fs.Arg(0), ".gguf"):
		return fmt.Errorf("%w: unexpected argument %q: the model goes with -m: modrun %s -m %s ...", errUsage, g.fs.Arg(0), g.fs.Name(), g.fs.Arg(0))
	case g.fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q (%s)", errUsage, g.fs.Arg(0), argHint)
	case g.n < 0:
		return fmt.Errorf("%w: %s %d: must be -1 (until the end), 0 (the same) or positive", errUsage, asTyped(g.fs, "n"), g.n)
	case g.threads < 0:
		return fmt.Errorf("%w: -t %d: must be 0 (one per core) or positive", errUsage, g.threads)
	}
	if err := (api.GenerateOptions{Stop: g.stops}).Check(); err != nil { // the API's check of --stop, before the model loads
		return flagError(err)
	}
	return g.grammar.compile()
}

// ignoredBy lists the flags given that backend (as resolved) does not use,
// with why: the GPU's flags on a CPU backend, -t on Vulkan, --kv-type and
// --ubatch on the reference.
func (g *generationCommand) ignoredBy(backend string) []string {
	var out []string
	if backend == engine.BackendVulkan {
		if flagSet(g.fs, "t") {
			out = append(out, "-t sets the CPU backends' threads; the vulkan backend runs on the GPU")
		}
		return out
	}
	for _, name := range g.gpuOnly {
		out = append(out, fmt.Sprintf("%s applies to the vulkan backend only, not to %s", name, backend))
	}
	if backend == engine.BackendReference && flagSet(g.fs, "kv-type") {
		out = append(out, "--kv-type sets the vulkan and cpu backends' KV cache; the reference's is float32")
	}
	if backend == engine.BackendReference && flagSet(g.fs, "ubatch") {
		out = append(out, "--ubatch sets the vulkan and cpu backends' prompt batch; the reference runs a prompt 32 tokens at a time")
	}
	return out
}

// open checks the flags, refuses those the named backend ignores and opens
// the model (set adjusts the API's options and checks the command's inputs); gpuOnly are the command's own
// flags given that only the Vulkan backend uses. A flag that --backend auto
// ends up ignoring (no GPU) gets a one-line warning. It prints the API's
// notice (the CPU fallback) to stderr and returns the options of one
// generation.
func (g *generationCommand) open(stderr io.Writer, gpuOnly []string, set func(*api.Options) error) (*api.Model, api.GenerateOptions, error) {
	g.gpuOnly = gpuOnly
	if b := g.gf.mf.backend; b != engine.BackendAuto {
		if ignored := g.ignoredBy(b); len(ignored) > 0 {
			return nil, api.GenerateOptions{}, fmt.Errorf("%w: %s", errUsage, ignored[0])
		}
	}
	if cores := runtime.NumCPU(); g.threads > cores {
		// More threads than cores only makes them wait for each other.
		fmt.Fprintf(stderr, "modrun %s: %s %d: this machine has %d cores; using %d\n", g.fs.Name(), asTyped(g.fs, "t"), g.threads, cores, cores)
		g.threads = cores
	}
	if g.threads > 0 {
		runtime.GOMAXPROCS(g.threads) // read once, when the CPU backend starts its workers
	}
	model, so, err := g.gf.open(g.fs, stderr, set)
	if err != nil {
		return nil, api.GenerateOptions{}, err
	}
	for _, w := range g.ignoredBy(model.Info().Backend) {
		fmt.Fprintf(stderr, "modrun %s: warning: %s\n", g.fs.Name(), w)
	}
	g.seed = so.Seed
	opts := generateOptions(so, g.n)
	opts.ParseSpecial = g.parseSpecial
	opts.Grammar = g.grammar.g
	opts.Stop = g.stops
	return model, opts, nil
}

// open checks the flags and opens the model, with set adjusting the API's
// options first (and checking what the command reads before the model
// loads, after the flags); it prints the API's notice (the CPU fallback)
// to stderr.
func (gf *generationFlags) open(fs *flag.FlagSet, stderr io.Writer, set func(*api.Options) error) (*api.Model, engine.SamplerOptions, error) {
	so, err := gf.sf.options()
	if err != nil {
		return nil, so, err
	}
	if err := gf.cf.check(); err != nil { // usage errors before -m's file
		return nil, so, err
	}
	opts, err := gf.mf.options()
	if err != nil {
		return nil, so, err
	}
	if err := gf.cf.apiOptions(&opts); err != nil {
		return nil, so, err
	}
	if err := set(&opts); err != nil {
		return nil, so, err
	}
	model, err := gf.mf.open(opts, flagSet(fs, "routing"))
	if err != nil {
		return nil, so, err
	}
	if notice := model.Info().Notice; notice != "" {
		fmt.Fprintln(stderr, notice)
	}
	return model, so, nil
}

// samplingFlags are the sampling flags of the commands that generate.
type samplingFlags struct {
	so   engine.SamplerOptions
	seed int64
}

func (sf *samplingFlags) register(fs *flag.FlagSet) {
	sf.so = engine.DefaultSampler()
	so := &sf.so
	fs.Func("temp", "sampling temperature `T` (0 = greedy, the default)", floatFlag(&so.Temperature))
	fs.IntVar(&so.TopK, "top-k", 0, "keep the `K` most likely tokens (0 = all)")
	fs.Func("top-p", "keep the most likely tokens up to probability `P` (default 1 = all)", floatFlag(&so.TopP))
	fs.Func("min-p", "drop tokens less likely than `P` times the best (default 0 = none)", floatFlag(&so.MinP))
	fs.Func("repeat-penalty", "penalty `R` on the last --repeat-last-n tokens (default 1 = off)", floatFlag(&so.RepeatPenalty))
	fs.IntVar(&so.RepeatLastN, "repeat-last-n", so.RepeatLastN, "tokens the penalties look back at")
	fs.Func("presence-penalty", "subtract `P` from the logit of each token among the last --repeat-last-n (default 0 = off)", floatFlag(&so.PresencePenalty))
	fs.Func("frequency-penalty", "subtract `F` times its count there from each recent token's logit (default 0 = off)", floatFlag(&so.FrequencyPenalty))
	fs.Int64Var(&sf.seed, "seed", -1, "random seed; -1 picks one from the clock")
}

// options checks the flags; a seed of -1 becomes one from the clock.
func (sf *samplingFlags) options() (engine.SamplerOptions, error) {
	so := sf.so
	seed := sf.seed
	if seed < -1 {
		return sf.so, fmt.Errorf("%w: --seed %d: want 0 or more, or -1 for one from the clock", errUsage, seed)
	}
	if seed == -1 {
		seed = time.Now().UnixNano() & (1<<62 - 1)
	}
	so.Seed = uint64(seed)
	if err := so.Check(); err != nil { // the API's check (GenerateOptions.Sampler), before the model loads
		return so, flagError(err)
	}
	return so, nil
}

// generateOptions are the API's options for sampler so, as the flags set
// it, and at most n new tokens.
func generateOptions(so engine.SamplerOptions, n int) api.GenerateOptions {
	return api.GenerateOptions{MaxTokens: n, Sampler: &so}
}
