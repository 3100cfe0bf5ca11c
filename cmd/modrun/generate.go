package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"
	"unicode/utf8"

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
	fs.IntVar(&mf.device, "device", -1, "Vulkan device `N`, as modrun devices lists them; with --backend auto it means vulkan. -1: $MODRUN_DEVICE or the best")
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
	usage := fmt.Sprintf("context length `N`: the longest sequence, and the KV cache's size; 0 = the model's, at most %d", engine.DefaultMaxContext)
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

// check refuses a negative --ctx, an unknown --kv-type (engine's check of
// the options) and a --ubatch under 1: the flag has no 0, its default is
// the number.
func (cf cacheFlags) check() error {
	if err := checkOptions(engine.BackendOptions{Name: engine.BackendAuto, ContextLen: cf.ctx, KVType: cf.kvType, UBatch: cf.ubatch}); err != nil {
		return err
	}
	if cf.ubatch < 1 {
		return fmt.Errorf("%w: --ubatch %d: must be at least 1", errUsage, cf.ubatch)
	}
	return nil
}

// checkOptions is engine's check of the options the flags fill, its error
// a usage error that names the flag.
func checkOptions(o engine.BackendOptions) error {
	err := o.Check()
	var oe *engine.OptionError
	if errors.As(err, &oe) {
		return fmt.Errorf("%w: %s", errUsage, oe.FlagError())
	}
	return err
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

// check validates the model flags before anything is loaded: -m is given,
// --backend and --device make sense together, and --routing is one of those
// the command accepts. The caller checks the -m file (inputFile) after its
// other usage errors, so that a usage error always exits 2.
func (mf *modelFlags) check(accepted ...mod.Routing) (mod.Routing, error) {
	if mf.path == "" {
		return 0, fmt.Errorf("%w: -m FILE.gguf is required", errUsage)
	}
	if err := checkOptions(engine.BackendOptions{Name: mf.backend}); err != nil {
		return 0, err
	}
	if err := deviceFlag(mf.device, mf.backend); err != nil {
		return 0, err
	}
	if mf.device >= 0 && mf.backend == engine.BackendAuto {
		mf.backend = engine.BackendVulkan // the device named, not a fallback to the CPU
	}
	if mf.routing == "" { // the model's own (llama-mod.mod.causal_routing), read at load
		return mod.RoutingRouter, nil
	}
	return routingFlag(mf.routing, accepted...)
}

// load opens the model named by -m (after check) and checks the flags that
// depend on it. needsMoD is the flag given that only a MoD model takes, as
// the user wrote it ("--routing topk", "--capacity 0.5"), or "".
func (mf *modelFlags) load(routing mod.Routing, needsMoD string) (*loaded, error) {
	m, err := mod.Open(mf.path)
	if err != nil {
		return nil, fmt.Errorf("-m %s: %w", mf.path, err)
	}
	if needsMoD != "" && !m.Config.IsMoD() {
		m.Close()
		return nil, fmt.Errorf("%s: %s is a dense model (architecture %q); it has no routers", needsMoD, mf.path, m.Config.Arch)
	}
	if mf.routing == "" && routing == mod.RoutingRouter && m.Config.IsMoD() {
		routing = m.Config.CausalRouting // the causal rule the model was trained for (mod.causal_routing)
	}
	if routing == mod.RoutingPredictor && m.Config.IsMoD() && !m.Config.HasPredictor() {
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
	var gf generationFlags
	gf.register(fs)
	prompt := fs.String("p", "", "prompt `TEXT` (BOS is added when the model's tokenizer asks for it)")
	n := fs.Int("n", 256, "new tokens at most (0 = until EOS or the context is full)")
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
	if !utf8.ValidString(*prompt) {
		return fmt.Errorf("%w: -p: the prompt is not valid UTF-8", errUsage)
	}
	if *routingMap != "" {
		if err := outputFile("--routing-map", *routingMap); err != nil {
			return err
		}
	}
	model, so, err := gf.open(fs, stderr, func(opts *api.Options) {
		opts.Profile = *profile
		opts.NoRoutes = *routingMap == "" // --stats counts from the KV caches
	})
	if err != nil {
		return err
	}
	defer model.Close()
	info := model.Info()
	if *routingMap != "" && len(info.RoutedLayers) == 0 {
		return fmt.Errorf("--routing-map: %s is a dense model (architecture %q); it has no routing to draw", gf.mf.path, info.Arch)
	}

	if err := promptFits(model, *prompt, info.ContextLen); err != nil {
		return err
	}

	var werr error
	var tokens []api.Token
	wrote := false
	session := model.NewSession()
	defer session.Close()
	watchingInterrupt.Store(true)
	res, err := session.Generate(interrupt, *prompt, generateOptions(so, *n), func(t api.Token) error {
		if *routingMap != "" {
			tokens = append(tokens, t)
		}
		if werr == nil && t.Text != "" {
			_, werr = io.WriteString(stdout, t.Text)
			wrote = true
		}
		return werr
	})
	watchingInterrupt.Store(false)
	if werr == nil && (err == nil || wrote || res.Tail != "") {
		_, werr = io.WriteString(stdout, res.Tail+"\n")
	}
	if errors.Is(err, context.Canceled) && interrupt.Err() != nil {
		return errInterrupted // what was generated is printed, with its newline
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

// promptFits refuses, before anything runs, a prompt longer than the
// context length ctxLen, naming both flags that decide it (the API's error
// knows neither): a usage error, as a --ctx past the model's is.
func promptFits(model *api.Model, prompt string, ctxLen int) error {
	ids, err := model.Tokenize(prompt, true) // as a new session encodes it: BOS when the tokenizer asks
	if err != nil {
		return fmt.Errorf("-p: %w", err)
	}
	if len(ids) > ctxLen {
		return fmt.Errorf("%w: -p: the prompt has %d tokens, more than the context length %d: shorten -p, or raise --ctx (up to the model's context length)", errUsage, len(ids), ctxLen)
	}
	return nil
}

// options checks the model flags of a command that generates (check, then
// the -m file) and turns them into the API's options.
func (mf *modelFlags) options() (api.Options, error) {
	if _, err := mf.check(mod.RoutingRouter, mod.RoutingPredictor); err != nil {
		return api.Options{}, err
	}
	if err := inputFile("-m", mf.path); err != nil {
		return api.Options{}, err
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
	capacity := fmt.Sprintf("%g", info.Capacity)
	if info.CapacityTokens > 0 {
		capacity = fmt.Sprintf("%d tokens", info.CapacityTokens)
	}
	fmt.Fprintf(w, "routing: %s, capacity %s (top-k in eval mode only)\n", info.Routing, capacity)
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
