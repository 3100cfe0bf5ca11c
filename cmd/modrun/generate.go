package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	api "github.com/modrun/modrun"
	"github.com/modrun/modrun/bench"
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
	ngl     int // llama.cpp's -ngl: 0 = the CPU; otherwise no effect
}

func (mf *modelFlags) register(fs *flag.FlagSet, defaultRouting, routingHelp string) {
	fs.StringVar(&mf.path, "m", "", "model `FILE`.gguf (required)")
	fs.StringVar(&mf.backend, "backend", "auto", "auto (a Vulkan GPU if any, else the CPU) | cpu (fast: all cores, SIMD) | reference (mod's plain Go forward pass, the oracle) | vulkan (any Vulkan device, lavapipe too)")
	fs.IntVar(&mf.device, "device", -1, "Vulkan device `N`, as modrun devices lists them; with --backend auto it means vulkan. -1: $MODRUN_DEVICE or the best")
	fs.StringVar(&mf.routing, "routing", defaultRouting, routingHelp)
	fs.IntVar(&mf.ngl, "ngl", -1, "llama.cpp's GPU layers `N`: modrun runs the whole model on one backend, so 0 means --backend cpu and any other N changes nothing")
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
	fs.StringVar(&cf.kvType, "kv-type", "", "KV cache type: f16 | f32 (default: f16 on a GPU, f32 on the cpu backend and on a CPU emulation such as lavapipe)")
	fs.IntVar(&cf.ubatch, "ubatch", engine.DefaultUBatch, "a prompt runs batched over chunks of at most `N` tokens (Vulkan: one graph per chunk; CPU: batched products)")
}

// options sets o's context length and KV cache type, checking the flags
// against model m.
func (cf cacheFlags) options(o *engine.BackendOptions, m *mod.Model) error {
	if err := cf.check(); err != nil {
		return err
	}
	o.ContextLen, o.KVType, o.UBatch = cf.ctx, cf.kvType, cf.ubatch
	return flagError(o.CheckFor(m.Config))
}

// check refuses a negative --ctx, an unknown --kv-type and a --ubatch
// under 1 (engine's check of the flags).
func (cf cacheFlags) check() error {
	return checkFlags(engine.BackendOptions{Name: engine.BackendAuto, Device: -1, ContextLen: cf.ctx, KVType: cf.kvType, UBatch: cf.ubatch},
		engine.Flags{UBatch: true})
}

// checkFlags is engine's check of the options the flags fill, its error
// a usage error that names the flag.
func checkFlags(o engine.BackendOptions, f engine.Flags) error { return flagError(o.CheckFlags(f)) }

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
	if err := checkFlags(engine.BackendOptions{Name: mf.backend, Device: mf.device}, engine.Flags{}); err != nil {
		return 0, err
	}
	if mf.ngl == 0 { // llama.cpp's "no layers on the GPU"
		if mf.backend != engine.BackendAuto && mf.backend != engine.BackendCPU && mf.backend != engine.BackendReference {
			return 0, fmt.Errorf("%w: -ngl 0 (no GPU layers) and --backend %s: use one", errUsage, mf.backend)
		}
		if mf.backend == engine.BackendAuto {
			mf.backend = engine.BackendCPU
		}
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

const generateArgs = "-m FILE.gguf (-p PROMPT | -f FILE) [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] [--stop TEXT] [--parse-special] [--no-display-prompt] [--json] [-t N] [--routing router|predictor] [--stats] [--profile] [--routing-map FILE.png]"

// generateMain is modrun's default command: generate text from a prompt,
// through the embedding API (package modrun).
func generateMain(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	g := newGenerationCommand("run", generateArgs, "new tokens at most (0, or llama.cpp's -1, = until EOS or the context is full)",
		"read special-token text in the prompt, such as <|eot_id|>, as those tokens (default: plain text)", stderr)
	fs := g.fs
	fs.Lookup("seed").Usage += " (printed with --stats and --json)"
	prompt := fs.String("p", "", "prompt `TEXT` (BOS is added when the model's tokenizer asks for it)")
	promptFile := fs.String("f", "", "read the prompt from `FILE` (- = stdin), whole, its last newline included")
	noDisplay := fs.Bool("no-display-prompt", false, "print only the generated text, not the prompt before it")
	asJSON := fs.Bool("json", false, "print one JSON document (text, token ids, timings, routing) instead of the text")
	stats := fs.Bool("stats", false, "print speed and per-layer routing to stderr")
	profile := fs.Bool("profile", false, "print each GPU kernel's time to stderr (Vulkan backend)")
	routingMap := fs.String("routing-map", "", "write the routing map to `FILE`.png: a column per token, a row per routed layer, coloured by score, marked where the token went through")
	if err := g.parse(args, `quote the prompt: -p "..."`); err != nil {
		return err
	}
	if *promptFile != "" && flagSet(fs, "p") {
		return fmt.Errorf("%w: -p and -f both give the prompt: use one", errUsage)
	}
	if *routingMap != "" {
		if err := outputFile("--routing-map", *routingMap); err != nil {
			return err
		}
	}
	var gpuOnly []string
	if *profile {
		gpuOnly = append(gpuOnly, "--profile")
	}
	if !utf8.ValidString(*prompt) {
		return fmt.Errorf("%w: -p: the prompt is not valid UTF-8", errUsage)
	}
	model, opts, err := g.open(stderr, gpuOnly, func(o *api.Options) error {
		o.Profile = *profile
		o.NoRoutes = *routingMap == "" // --stats counts from the KV caches
		if *promptFile != "" {         // after the flags' checks, before the model loads
			text, err := readPromptFile(*promptFile, stdin)
			if err != nil {
				return err
			}
			if !utf8.ValidString(text) {
				return fmt.Errorf("-f %s: the prompt is not valid UTF-8", *promptFile)
			}
			*prompt = text
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer model.Close()
	info := model.Info()
	if *routingMap != "" && len(info.RoutedLayers) == 0 {
		return fmt.Errorf("--routing-map: %s is a dense model (architecture %q); it has no routing to draw", g.gf.mf.path, info.Arch)
	}
	if err := promptFits(model, *prompt, promptFlag(*promptFile), opts.ParseSpecial, info.ContextLen); err != nil {
		return err
	}
	if !flagSet(fs, "p") && *promptFile == "" {
		fmt.Fprintln(stderr, "modrun run: no prompt (-p or -f): generating from BOS alone")
	}

	out := &runOutput{w: stdout, noPrompt: *noDisplay || *asJSON, quiet: *asJSON, keepTokens: *routingMap != "" || *asJSON}
	session := model.NewSession()
	defer session.Close()
	watchingInterrupt.Store(true)
	res, err := session.Generate(interrupt, *prompt, opts, out.token)
	watchingInterrupt.Store(false)
	out.end(res, err)
	if errors.Is(err, context.Canceled) && interrupt.Err() != nil {
		return errInterrupted // what was generated is printed, with its newline
	}
	if err != nil {
		return err
	}
	if out.err != nil {
		return out.err
	}
	if res.Stop == api.StopContextFull {
		fmt.Fprintf(stderr, "modrun: stopped: the sequence filled the context length (%d tokens; --ctx sets it)\n", info.ContextLen)
	}
	if *asJSON {
		if err := writeRunJSON(stdout, *prompt, out, info, res, g.seed); err != nil {
			return err
		}
	}
	if *stats {
		seed := fmt.Sprintf("seed %d", g.seed)
		if opts.Sampler.Greedy() {
			seed = "greedy" // no draw: a seed would change nothing
		}
		printStats(stderr, info, res, seed)
	}
	if *profile && info.Backend == api.BackendVulkan {
		entries := model.Profile()
		var peaks *bench.Peaks
		var probeErr, bwErr error
		var bw bench.Bandwidth
		if len(entries) > 0 { // the peaks and bandwidth a kernel's rates are shares of, on the same device
			o := engine.BackendOptions{Name: engine.BackendVulkan, Device: g.gf.mf.device}
			pk, err := bench.ProbeCompute(o)
			peaks, probeErr = &pk, err
			bw, bwErr = bench.ProbeBandwidth(o)
		}
		printProfile(stderr, info, entries, peaks, probeErr, bw, bwErr, res.Prefill+res.Decode)
	}
	if *routingMap != "" {
		if err := pngfile.Write(*routingMap, api.RoutingMap(out.tokens, len(info.RoutedLayers))); err != nil {
			return fmt.Errorf("--routing-map: %w", err)
		}
	}
	return nil
}

// promptFlag names the flag the prompt came from.
func promptFlag(file string) string {
	if file != "" {
		return "-f " + file
	}
	return "-p"
}

// readPromptFile reads -f: a file, or stdin for "-".
func readPromptFile(path string, stdin io.Reader) (string, error) {
	if path == "-" {
		b, err := io.ReadAll(io.LimitReader(stdin, maxPromptBytes+1))
		if err != nil {
			return "", fmt.Errorf("-f -: reading stdin: %w", err)
		}
		if len(b) > maxPromptBytes {
			return "", fmt.Errorf("%w: -f -: the prompt is longer than %d bytes", errUsage, maxPromptBytes)
		}
		return string(b), nil
	}
	if err := inputFile("-f", path); err != nil {
		return "", err
	}
	st, err := os.Stat(path)
	if err == nil && st.Size() > maxPromptBytes {
		return "", fmt.Errorf("%w: -f %s: %d bytes, longer than a prompt may be (%d)", errUsage, path, st.Size(), maxPromptBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("-f: %w", err)
	}
	return string(b), nil
}

// maxPromptBytes bounds a prompt read with -f (the tokenizer's own limit).
const maxPromptBytes = 64 << 20

// runOutput writes run's text as it comes: the prompt unless noPrompt, the
// generated text (the API cuts it at a --stop string), nothing at all when
// quiet (--json). It keeps the tokens when asked.
type runOutput struct {
	w               io.Writer
	noPrompt, quiet bool
	keepTokens      bool
	tokens          []api.Token
	text            strings.Builder // the generated text
	wrote           bool
	err             error
}

func (o *runOutput) write(s string) {
	if o.err == nil && s != "" && !o.quiet {
		_, o.err = io.WriteString(o.w, s)
		o.wrote = true
	}
}

// token is Generate's callback.
func (o *runOutput) token(t api.Token) error {
	if o.keepTokens {
		o.tokens = append(o.tokens, t)
	}
	switch {
	case t.Prompt:
		if !o.noPrompt {
			o.write(t.Text)
		}
	default:
		o.text.WriteString(t.Text)
		o.write(t.Text)
	}
	return o.err
}

// end writes the text held back at the end of a character, and the last
// newline.
func (o *runOutput) end(res api.Result, err error) {
	o.text.WriteString(res.Tail)
	o.write(res.Tail)
	if o.err == nil && !o.quiet && (err == nil || o.wrote) {
		_, o.err = io.WriteString(o.w, "\n")
	}
}

// promptFits refuses, before anything runs, a prompt longer than the
// context length ctxLen, naming both flags that decide it (the API's error
// knows neither): a usage error, as a --ctx past the model's is.
func promptFits(model *api.Model, prompt, flagName string, parseSpecial bool, ctxLen int) error {
	ids, err := model.TokenizeWith(prompt, true, parseSpecial) // as a new session encodes it
	if err != nil {
		return fmt.Errorf("%s: %w", flagName, err)
	}
	if len(ids) > ctxLen {
		what := "-p"
		if flagName != "-p" {
			what = "the prompt"
		}
		return fmt.Errorf("%w: %s: the prompt has %d tokens, more than the context length %d: shorten %s, or raise --ctx (up to the model's context length)", errUsage, flagName, len(ids), ctxLen, what)
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
	if errors.As(err, new(*api.OptionError)) { // --ctx longer than the model's (api.ContextLengthError), or another option
		return nil, flagError(err)
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

// printStats prints --stats; seed is "seed N", or "greedy" where none is used.
func printStats(w io.Writer, info api.Info, res api.Result, seed string) {
	backend := info.Backend
	if backend == api.BackendVulkan {
		backend += ": " + info.Device
	}
	fmt.Fprintf(w, "backend %s, %s, stop: %s\n", backend, seed, res.Stop)
	fmt.Fprintf(w, "prefill: %s in %v (%.1f tokens/s)\n", count(res.PromptTokens, "token"), res.Prefill.Round(time.Microsecond), res.PrefillRate())
	fmt.Fprintf(w, "decode:  %s in %v (%.1f tokens/s)\n", count(res.DecodeSteps, "token"), res.Decode.Round(time.Microsecond), res.DecodeRate())
	if info.Backend == api.BackendVulkan {
		fmt.Fprintf(w, "GPU memory: %s (weights %s, KV cache %s, scratch %s)\n",
			mib(info.GPUWeights+info.GPUKVCache+info.GPUScratch), mib(info.GPUWeights), mib(info.GPUKVCache), mib(info.GPUScratch))
	}
	if info.Backend != api.BackendReference {
		fmt.Fprintf(w, "KV cache: %s, %d tokens (--kv-type, --ctx)\n", info.KVType, info.ContextLen)
	}
	if info.StepDispatches > 0 {
		fmt.Fprintln(w, stepCounts(info))
	}
	if info.ChainSteps > 0 {
		prompts := "a prompt of 2 tokens or more is a prefill"
		if info.PromptSteps > 1 {
			prompts = fmt.Sprintf("a prompt of up to %d tokens runs as decode steps, a longer one as a prefill", info.PromptSteps)
		}
		fmt.Fprintf(w, "decode: up to %d tokens a submission, one sequence or many (MODRUN_CHAIN: greedy ones, and sampled ones where the device draws: a temperature, top-p, min-p); %s (MODRUN_PROMPT_STEPS)\n", info.ChainSteps, prompts)
	}
	if info.Tuning != "" {
		fmt.Fprintf(w, "tuning: %s (modrun tune)\n", info.Tuning)
	}
	if len(info.RoutedLayers) == 0 {
		return
	}
	capacity := fmt.Sprintf("%g", info.Capacity)
	if info.CapacityTokens > 0 {
		capacity = count(info.CapacityTokens, "token")
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

// stepCounts is the --stats line of the decode step's commands on Vulkan:
// dispatches and barriers per token, per block (a range when the blocks
// differ: a routed block has its selector and gated residual) and outside
// the blocks (the embedding and the head).
func stepCounts(info api.Info) string {
	span := func(xs []int) (string, int) {
		if len(xs) == 0 {
			return "0", 0
		}
		lo, hi, sum := xs[0], xs[0], 0
		for _, x := range xs {
			lo, hi, sum = min(lo, x), max(hi, x), sum+x
		}
		if lo == hi {
			return fmt.Sprint(lo), sum
		}
		return fmt.Sprintf("%d-%d", lo, hi), sum
	}
	bd, sd := span(info.BlockDispatches)
	bb, sb := span(info.BlockBarriers)
	return fmt.Sprintf("decode step: %d dispatches/token, %d barriers/token (a block: %s dispatches, %s barriers; embedding and head: %d, %d)",
		info.StepDispatches, info.StepBarriers, bd, bb, info.StepDispatches-sd, info.StepBarriers-sb)
}

// count is n of noun: "1 token", "2 tokens".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// mib is n bytes in MiB.
func mib(n uint64) string { return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20)) }
