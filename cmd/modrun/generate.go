package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	api "github.com/modrun/modrun"
	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/internal/pngfile"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/tokenizer"
)

// modelFlags are the flags every command that loads a model shares.
type modelFlags struct {
	path    string
	backend string
	device  int
	routing string
}

func (mf *modelFlags) register(fs *flag.FlagSet, defaultRouting, routingHelp string) {
	fs.StringVar(&mf.path, "m", "", "model `FILE`.gguf (required)")
	fs.StringVar(&mf.backend, "backend", "auto", "auto (a Vulkan GPU if any, else the CPU) | cpu (fast: all cores, SIMD) | reference (mod's plain Go forward pass, the oracle) | vulkan (any Vulkan device, lavapipe too)")
	fs.IntVar(&mf.device, "device", -1, "Vulkan device `N` (see modrun devices; default $MODRUN_DEVICE or the best)")
	fs.StringVar(&mf.routing, "routing", defaultRouting, routingHelp)
}

// cacheFlags are the KV cache and prompt batch flags of the commands that
// generate (run and bench): they fill engine.BackendOptions.ContextLen,
// KVType and UBatch.
type cacheFlags struct {
	ctx    int
	kvType string
	ubatch int
}

func (cf *cacheFlags) register(fs *flag.FlagSet) {
	usage := fmt.Sprintf("context length `N`: the longest sequence, and the KV cache's size (default: the model's, at most %d)", engine.DefaultMaxContext)
	fs.IntVar(&cf.ctx, "c", 0, usage)
	fs.IntVar(&cf.ctx, "ctx", 0, usage)
	fs.StringVar(&cf.kvType, "kv-type", "", "KV cache type on the GPU: f16 | f32 (default: f16 on a GPU, f32 on a CPU emulation such as lavapipe)")
	fs.IntVar(&cf.ubatch, "ubatch", engine.DefaultUBatch, "a prompt runs batched over chunks of at most `N` tokens (Vulkan: one graph per chunk; CPU: batched products)")
}

// options sets o's context length and KV cache type, checking the flags
// against model m.
func (cf cacheFlags) options(o *engine.BackendOptions, m *mod.Model) error {
	if limit := m.Config.ContextLen; cf.ctx > limit {
		return fmt.Errorf("%w: --ctx %d: must be in [1, %d] (the context length of the model)", errUsage, cf.ctx, limit)
	}
	if err := cf.check(); err != nil {
		return err
	}
	o.ContextLen, o.KVType, o.UBatch = cf.ctx, cf.kvType, cf.ubatch
	return nil
}

// check refuses a negative --ctx, an unknown --kv-type and a --ubatch
// under 1.
func (cf cacheFlags) check() error {
	if cf.ctx < 0 {
		return fmt.Errorf("%w: --ctx %d: must be positive (0: the model's)", errUsage, cf.ctx)
	}
	if cf.ubatch < 1 {
		return fmt.Errorf("%w: --ubatch %d: must be at least 1", errUsage, cf.ubatch)
	}
	switch cf.kvType {
	case "", "f16", "f32":
		return nil
	}
	return fmt.Errorf("%w: --kv-type %q is not f16 or f32", errUsage, cf.kvType)
}

// apiOptions sets the API's context length and KV cache type; the API
// checks the context length against the model's.
func (cf cacheFlags) apiOptions(o *api.Options) error {
	if err := cf.check(); err != nil {
		return err
	}
	o.ContextLen, o.KVType, o.UBatch = cf.ctx, cf.kvType, cf.ubatch
	return nil
}

// loaded is a model with its tokenizer.
type loaded struct {
	model   *mod.Model
	tok     *tokenizer.Tokenizer
	routing mod.Routing
}

// load opens the model named by -m and checks the flags that depend on it.
// routingSet says whether --routing was given on the command line.
func (mf *modelFlags) load(routingSet bool) (*loaded, error) {
	if mf.path == "" {
		return nil, fmt.Errorf("%w: -m FILE.gguf is required", errUsage)
	}
	switch mf.backend {
	case engine.BackendAuto, engine.BackendCPU, engine.BackendReference, engine.BackendVulkan:
	default:
		return nil, fmt.Errorf("%w: --backend %q is not auto, cpu, reference or vulkan", errUsage, mf.backend)
	}
	routing, err := mod.ParseRouting(mf.routing)
	if err != nil {
		return nil, fmt.Errorf("%w: --routing: %v", errUsage, err)
	}
	m, err := mod.Open(mf.path)
	if err != nil {
		return nil, fmt.Errorf("-m %s: %w", mf.path, err)
	}
	if routingSet && !m.Config.IsMoD() {
		m.Close()
		return nil, fmt.Errorf("--routing %s: %s is a dense model (architecture %q); it has no routers", mf.routing, mf.path, m.Config.Arch)
	}
	if routing == mod.RoutingPredictor && m.Config.IsMoD() && m.Config.PredictorHidden == 0 {
		m.Close()
		return nil, fmt.Errorf("--routing predictor: %s has no predictor (%s = 0); use --routing router", mf.path, mod.ArchKey(m.Config.Arch, mod.KeyPredictorHidden))
	}
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("-m %s: %w", mf.path, err)
	}
	return &loaded{model: m, tok: tok, routing: routing}, nil
}

// flagSet reports whether the named flag was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

const generateArgs = "-m FILE.gguf -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] [--routing router|predictor] [--stats] [--profile] [--routing-map FILE.png]"

// generateMain is modrun's default command: generate text from a prompt,
// through the embedding API (package modrun).
func generateMain(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("run", generateArgs, stderr)
	var mf modelFlags
	mf.register(fs, "router", "causal routing of MoD blocks: router (r > 0) | predictor (p > 0)")
	var cf cacheFlags
	cf.register(fs)
	prompt := fs.String("p", "", "prompt `TEXT` (BOS is added when the model's tokenizer asks for it)")
	n := fs.Int("n", 256, "new tokens at most (0 = until EOS or the context is full)")
	so := engine.DefaultSampler()
	fs.Func("temp", "sampling temperature `T` (0 = greedy, the default)", floatFlag(&so.Temperature))
	fs.IntVar(&so.TopK, "top-k", 0, "keep the `K` most likely tokens (0 = all)")
	fs.Func("top-p", "keep the most likely tokens up to probability `P` (default 1 = all)", floatFlag(&so.TopP))
	fs.Func("min-p", "drop tokens less likely than `P` times the best (default 0 = none)", floatFlag(&so.MinP))
	fs.Func("repeat-penalty", "penalty `R` on the last --repeat-last-n tokens (default 1 = off)", floatFlag(&so.RepeatPenalty))
	fs.IntVar(&so.RepeatLastN, "repeat-last-n", so.RepeatLastN, "tokens the repetition penalty looks back at")
	seed := fs.Int64("seed", -1, "random seed; -1 picks one from the clock (printed with --stats)")
	stats := fs.Bool("stats", false, "print speed and per-layer routing to stderr")
	profile := fs.Bool("profile", false, "print each GPU kernel's time to stderr (Vulkan backend)")
	routingMap := fs.String("routing-map", "", "write the routing map to `FILE`.png: a column per token, a row per routed layer, coloured by score, marked where the token went through")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (quote the prompt: -p \"...\")", errUsage, fs.Arg(0))
	}
	if *n < 0 {
		return fmt.Errorf("%w: -n %d: must be 0 or positive", errUsage, *n)
	}
	if *seed < 0 {
		*seed = time.Now().UnixNano() & (1<<62 - 1)
	}
	so.Seed = uint64(*seed)
	if err := so.Check(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	opts, err := mf.options()
	if err != nil {
		return err
	}
	opts.Profile = *profile
	if err := cf.apiOptions(&opts); err != nil {
		return err
	}
	opts.NoRoutes = *routingMap == "" // --stats counts from the KV caches
	model, err := mf.open(opts, flagSet(fs, "routing"))
	if err != nil {
		return err
	}
	defer model.Close()
	info := model.Info()
	if info.Notice != "" {
		fmt.Fprintln(stderr, info.Notice)
	}
	if *routingMap != "" && len(info.RoutedLayers) == 0 {
		return fmt.Errorf("--routing-map: %s is a dense model (architecture %q); it has no routing to draw", mf.path, info.Arch)
	}

	var werr error
	var tokens []api.Token
	session := model.NewSession()
	defer session.Close()
	res, err := session.Generate(context.Background(), *prompt, api.GenerateOptions{
		MaxTokens: *n, Temperature: so.Temperature, TopK: so.TopK, TopP: so.TopP, MinP: so.MinP,
		RepeatPenalty: so.RepeatPenalty, RepeatLastN: repeatLastN(so.RepeatLastN), Seed: so.Seed,
	}, func(t api.Token) error {
		if *routingMap != "" {
			tokens = append(tokens, t)
		}
		if werr == nil && t.Text != "" {
			_, werr = io.WriteString(stdout, t.Text)
		}
		return werr
	})
	if werr == nil {
		_, werr = io.WriteString(stdout, res.Tail+"\n")
	}
	if err != nil {
		return err
	}
	if res.Stop == api.StopContextFull {
		fmt.Fprintf(stderr, "modrun: stopped: the sequence filled the context length (%d tokens; --ctx sets it)\n", info.ContextLen)
	}
	if *stats {
		printStats(stderr, info, res, so.Seed)
	}
	if *profile {
		printProfile(stderr, info, model.Profile())
	}
	if *routingMap != "" {
		if err := pngfile.Write(*routingMap, api.RoutingMap(tokens, len(info.RoutedLayers))); err != nil {
			return fmt.Errorf("--routing-map: %w", err)
		}
	}
	return werr
}

// repeatLastN is --repeat-last-n as the API takes it (0 there means 64).
func repeatLastN(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// options turns the model flags into the API's options; a bad flag is a
// usage error.
func (mf *modelFlags) options() (api.Options, error) {
	if mf.path == "" {
		return api.Options{}, fmt.Errorf("%w: -m FILE.gguf is required", errUsage)
	}
	switch mf.backend {
	case engine.BackendAuto, engine.BackendCPU, engine.BackendReference, engine.BackendVulkan:
	default:
		return api.Options{}, fmt.Errorf("%w: --backend %q is not auto, cpu, reference or vulkan", errUsage, mf.backend)
	}
	r, err := mod.ParseRouting(mf.routing)
	if err == nil && r == mod.RoutingTopK {
		err = fmt.Errorf("generation needs causal routing, router or predictor, not topk")
	}
	if err != nil {
		return api.Options{}, fmt.Errorf("%w: --routing: %v", errUsage, err)
	}
	opts := api.Options{Backend: mf.backend, Routing: api.Routing(mf.routing)}
	if mf.device >= 0 {
		opts.Device = strconv.Itoa(mf.device)
	}
	return opts, nil
}

// open opens the model through the API, naming the flags in its errors.
// routingSet says whether --routing was given on the command line.
func (mf *modelFlags) open(opts api.Options, routingSet bool) (*api.Model, error) {
	model, err := api.Open(mf.path, opts)
	var ctxErr *api.ContextLengthError
	if errors.As(err, &ctxErr) {
		return nil, fmt.Errorf("%w: --ctx %d: must be in [1, %d] (the context length of the model)", errUsage, ctxErr.Asked, ctxErr.Model)
	}
	if errors.Is(err, api.ErrNoPredictor) {
		return nil, fmt.Errorf("--routing predictor: %s has no predictor (%s = 0); use --routing router", mf.path, mod.ArchKey(mod.ArchMoD, mod.KeyPredictorHidden))
	}
	if err != nil {
		return nil, err
	}
	if info := model.Info(); routingSet && len(info.RoutedLayers) == 0 {
		model.Close()
		return nil, fmt.Errorf("--routing %s: %s is a dense model (architecture %q); it has no routers", mf.routing, mf.path, info.Arch)
	}
	return model, nil
}

// printProfile prints the GPU time per kernel, or why there is none.
func printProfile(w io.Writer, info api.Info, entries []api.ProfileEntry) {
	if info.Backend != api.BackendVulkan {
		fmt.Fprintf(w, "profile: --profile times GPU kernels; backend %s has none (use --backend vulkan)\n", info.Backend)
		return
	}
	if len(entries) == 0 {
		fmt.Fprintf(w, "profile: backend vulkan: %s cannot write GPU timestamps\n", info.Device)
		return
	}
	var total uint64
	for _, e := range entries {
		total += e.NS
	}
	fmt.Fprintf(w, "%-20s %8s %10s %10s %6s\n", "kernel", "calls", "total ms", "us/call", "%")
	for _, e := range entries {
		fmt.Fprintf(w, "%-20s %8d %10.3f %10.2f %5.1f%%\n", e.Kernel, e.Calls, float64(e.NS)/1e6,
			float64(e.NS)/1e3/float64(e.Calls), 100*float64(e.NS)/float64(total))
	}
	fmt.Fprintf(w, "%-20s %8s %10.3f\n", "GPU total", "", float64(total)/1e6)
}

func printStats(w io.Writer, info api.Info, res api.Result, seed uint64) {
	backend := info.Backend
	if backend == api.BackendVulkan {
		backend += ": " + info.Device
	}
	fmt.Fprintf(w, "backend %s, seed %d, stop: %s\n", backend, seed, res.Stop)
	fmt.Fprintf(w, "prefill: %d tokens in %v (%.1f tokens/s)\n", res.PromptTokens, res.Prefill.Round(time.Microsecond), res.PrefillRate())
	fmt.Fprintf(w, "decode:  %d tokens in %v (%.1f tokens/s)\n", res.DecodeSteps, res.Decode.Round(time.Microsecond), res.DecodeRate())
	if info.Backend == api.BackendVulkan {
		fmt.Fprintf(w, "GPU memory: %s (weights %s, KV cache %s, scratch %s)\n",
			mib(info.GPUWeights+info.GPUKVCache+info.GPUScratch), mib(info.GPUWeights), mib(info.GPUKVCache), mib(info.GPUScratch))
		fmt.Fprintf(w, "KV cache: %s, %d tokens (--kv-type, --ctx)\n", info.KVType, info.ContextLen)
	}
	if len(info.RoutedLayers) == 0 {
		return
	}
	fmt.Fprintf(w, "routing: %s, capacity %g (top-k in eval mode only)\n", info.Routing, info.Capacity)
	for _, s := range res.Layers {
		frac := 0.0
		if s.Seen > 0 {
			frac = float64(s.Selected) / float64(s.Seen)
		}
		fmt.Fprintf(w, "  layer %2d: %4d of %4d tokens went through (%.1f%%)\n", s.Layer, s.Selected, s.Seen, 100*frac)
	}
}

// mib is n bytes in MiB.
func mib(n uint64) string { return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20)) }

// floatFlag parses a float32 flag value into dst.
func floatFlag(dst *float32) func(string) error {
	return func(s string) error {
		var v float64
		if _, err := fmt.Sscan(s, &v); err != nil {
			return fmt.Errorf("%q is not a number", s)
		}
		*dst = float32(v)
		return nil
	}
}
