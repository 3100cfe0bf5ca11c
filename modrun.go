package modrun

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/tokenizer"
)

// Backend names, as the command line's --backend takes them.
const (
	BackendAuto      = engine.BackendAuto      // a Vulkan GPU when there is one, else the CPU (the default)
	BackendCPU       = engine.BackendCPU       // the fast CPU runner: all cores, 8-bit activations, SIMD
	BackendReference = engine.BackendReference // the pure-Go reference forward pass (the oracle)
	BackendVulkan    = engine.BackendVulkan    // any Vulkan device, lavapipe (software) included
)

// Routing is the causal routing rule of a MoD model's routed blocks in
// generation (DESIGN.md §3). Dense models ignore it.
type Routing string

const (
	RoutingRouter    Routing = "router"    // a token goes through iff its router score r > 0
	RoutingPredictor Routing = "predictor" // iff the predictor MLP's p > 0 (a model trained with one)
)

// Options choose where and how a model runs. The zero value runs on a
// Vulkan GPU when there is one and otherwise on the CPU, with the causal
// routing the model was trained for and the model's context length.
type Options struct {
	// Backend is BackendAuto (also ""), BackendCPU, BackendReference or
	// BackendVulkan.
	Backend string
	// Device is a Vulkan device index as `modrun devices` lists them;
	// "" = $MODRUN_DEVICE, or the best device.
	Device string
	// Routing is RoutingRouter or RoutingPredictor; "" is the one the model
	// was trained for (llama-mod.mod.causal_routing; router when absent).
	Routing Routing
	// ContextLen caps the sequence (and the GPU's KV caches); 0 = the
	// model's context length.
	ContextLen int
	// KVType is the KV cache's element type: "f16" or "f32"; "" = the
	// backend's default (on Vulkan f16 on a GPU, f32 on a CPU emulation
	// such as lavapipe; f32 on the CPU backend). f16 holds half the memory
	// per token, here and in the Parallel sessions' page pool (KVBudget
	// holds twice the tokens). The reference backend's cache is always f32.
	KVType string
	// NoRoutes leaves Token.Routes nil. On Vulkan, routing is decided on
	// the GPU and copied back for each token only for Token.Routes: a
	// program that does not look at it saves those copies.
	NoRoutes bool
	// UBatch is the longest batch a prompt runs in on Vulkan (a matmul over
	// its tokens, attention over the cache plus the batch); 0 = 512
	// (engine.DefaultUBatch). Cancelling waits for the batch in flight.
	UBatch int
	// Profile times every GPU command on Vulkan, for Model.Profile. It
	// costs a timestamp per command: leave it off when timing generation.
	Profile bool
	// Parallel, above 1, lets that many sessions generate at once on the
	// CPU and Vulkan backends, in shared steps: one forward pass per step
	// over a row of each decoding session and prompt chunks of the others
	// (at most UBatch rows), so the weights are read once for all of them,
	// and a session's KV cache stays in a pool of pages between its calls
	// (no re-feed). More sessions queue. 0 or 1: one session at a time,
	// stepped on the runner itself (its recorded decode step, the argmax
	// on the device), which keeps the last session's tokens: its next call
	// runs only its new ones, another session's runs its own again. The
	// reference backend, which has no batched step, runs that way whatever
	// Parallel says. Either way every Generate is a sequence of one
	// generation loop (engine.Loop), and a step and LogProbs take turns on
	// the runner.
	Parallel int
	// KVBudget is the memory of the parallel sessions' KV page pool in
	// bytes; 0 = enough for Parallel sequences of the whole context. A
	// smaller budget makes sessions wait for pages.
	KVBudget int64
	// PrefixCache runs sessions in shared steps on the CPU and Vulkan
	// backends even when Parallel is 0 or 1 (one at a time then), for the
	// pool's prefix cache: a prompt that begins with tokens any session
	// ran before (a server's system prompt, a conversation resent with one
	// more message) takes their keys, values and routing from the cache
	// instead of running them again. Parallel above 1 has it always.
	PrefixCache bool
}

// Model is a loaded model on its device. It serves any number of
// Sessions, each Generate call a sequence of its generation loop: one at
// a time, or Options.Parallel at once (the package doc has the whole
// contract). Close it when
// done.
type Model struct {
	m        *mod.Model
	tok      *tokenizer.Tokenizer
	backend  *engine.Backend
	info     Info
	ctxLen   int
	noRoutes bool

	// turn is held by whatever uses the runner: each step of the
	// generation loop, LogProbs, Profile and Close (acquire).
	turn   chan struct{}
	closed bool
	mu     sync.Mutex // guards closed
	// loop runs every Generate as a sequence of one scheduler: one at a
	// time on the runner, or Options.Parallel at once in shared steps.
	loop *engine.Loop

	grammar grammarVocab // for GenerateOptions.Grammar
}

// Info says what a Model is and where it runs.
type Info struct {
	Path         string
	Arch         string // "llama" (dense) or "llama-mod"
	NLayer       int
	NEmbd        int
	NHead        int
	NKVHead      int
	NFF          int
	NVocab       int
	ContextLen   int     // the longest sequence a session takes (Options.ContextLen or the model's)
	RoutedLayers []int   // the routed blocks, in order; none for a dense model
	Capacity     float32 // the routed fraction of eval (top-k) mode
	// CapacityTokens, when not 0, is how many tokens of a sequence eval mode
	// routes instead (a file whose capacity is a count, as MoD Llama 2's).
	CapacityTokens int
	Routing        Routing // the causal routing generation uses ("" for a dense model)

	Backend string // BackendCPU, BackendReference or BackendVulkan
	Device  string // the device's name
	KVType  string // the KV cache's element type: "f16" or "f32"
	// Notice says why BackendAuto runs on the CPU ("" otherwise): no Vulkan,
	// or only a software one. The command line prints it.
	Notice string
	// Tuning is what the tuning file gave this model on this device (Vulkan
	// only; `modrun tune`): its knobs, each the environment overrides
	// marked, then the file, as "MODRUN_HANDOFF=1 (PATH)" ("defaults" where
	// the defaults were fastest); "" where the file has no entry for them.
	Tuning string

	FileBytes uint64 // the GGUF file, memory-mapped
	// GPU memory held on Vulkan (zero on the CPU), in bytes.
	GPUWeights, GPUKVCache, GPUScratch uint64
	// The recorded decode step's commands on Vulkan (zero on the CPU): its
	// dispatches and pipeline barriers per token, and each block's, in
	// layer order.
	StepDispatches, StepBarriers   int
	BlockDispatches, BlockBarriers []int
	// On Vulkan (zero on the CPU): the most greedy decode steps one
	// submission runs (MODRUN_CHAIN; 1: one a submission), and the longest
	// prompt run token by token through the decode step (MODRUN_PROMPT_STEPS;
	// a longer one is a batched prefill).
	ChainSteps, PromptSteps int
}

// Open loads the GGUF model at path and opens it on the device opts choose.
// Every error names the file, option or tensor that is wrong.
func Open(path string, opts Options) (*Model, error) {
	bo, routing, err := opts.check()
	if err != nil {
		return nil, err
	}
	m, err := mod.Open(path)
	if err != nil {
		return nil, err // it names the file and what is wrong in it
	}
	model, err := open(m, opts, bo, routing)
	if err != nil {
		m.Close()
		return nil, err
	}
	return model, nil
}

func open(m *mod.Model, opts Options, bo engine.BackendOptions, routing mod.Routing) (*Model, error) {
	c := m.Config
	if opts.Routing == "" && c.IsMoD() {
		routing = c.CausalRouting
	}
	if c.IsMoD() && routing == mod.RoutingPredictor && !c.HasPredictor() {
		return nil, fmt.Errorf("modrun: %s has no predictor (%s = 0): %w",
			m.Path, mod.ArchKey(c.Arch, mod.KeyPredictorHidden), ErrNoPredictor)
	}
	if err := bo.CheckFor(c); err != nil {
		return nil, &ContextLengthError{Path: m.Path, Asked: opts.ContextLen, Model: c.ContextLen, err: err}
	}
	tok, err := tokenizer.FromGGUF(m.File)
	if err != nil {
		return nil, fmt.Errorf("modrun: %s: %w", m.Path, err)
	}
	backend, notice, err := engine.OpenBackend(m, routing, bo)
	if err != nil {
		return nil, fmt.Errorf("modrun: backend %s: %w", bo.Name, err)
	}
	ctxLen := min(c.ContextLen, backend.ContextLen())
	if opts.ContextLen > 0 {
		ctxLen = min(ctxLen, opts.ContextLen)
	}
	model := &Model{m: m, tok: tok, backend: backend, ctxLen: ctxLen, noRoutes: opts.NoRoutes, turn: make(chan struct{}, 1)}
	model.info = Info{
		Path: m.Path, Arch: c.Arch, NLayer: c.NLayer, NEmbd: c.NEmbd, NHead: c.NHead, NKVHead: c.NKVHead,
		NFF: c.NFF, NVocab: c.NVocab, ContextLen: ctxLen, RoutedLayers: c.RoutedLayers(), Capacity: c.Capacity, CapacityTokens: c.CapacityTokens,
		Backend: backend.Name, Device: fmt.Sprintf("CPU (pure Go, %s)", plural(runtime.GOMAXPROCS(0), "thread")), KVType: "f32",
		Notice: notice, FileBytes: uint64(m.File.Size()),
	}
	if c.IsMoD() {
		model.info.Routing = Routing(routing.String())
	}
	if backend.Name == BackendCPU {
		model.info.Device = fmt.Sprintf("CPU (%s, %s kernels)", plural(runtime.GOMAXPROCS(0), "thread"), engine.CPUKernels())
	}
	if name, ok := strings.CutPrefix(backend.Name, "vulkan: "); ok {
		model.info.Backend, model.info.Device = BackendVulkan, name
	}
	if k, ok := backend.Runner.(interface{ KVType() string }); ok {
		model.info.KVType = k.KVType()
	}
	if backend.TuningFile != "" {
		model.info.Tuning = fmt.Sprintf("%s (%s)", backend.Tuned.Describe(), backend.TuningFile)
	}
	if ms, ok := backend.Runner.(engine.GPUMemoryStatser); ok {
		s := ms.MemoryStats()
		model.info.GPUWeights, model.info.GPUKVCache, model.info.GPUScratch = s.Weights, s.KVCache, s.Scratch
	}
	if sc, ok := backend.Runner.(engine.StepCountser); ok {
		c := sc.StepCounts()
		model.info.StepDispatches, model.info.StepBarriers = c.Dispatches, c.Barriers
		model.info.BlockDispatches, model.info.BlockBarriers = c.BlockDispatches, c.BlockBarriers
	}
	if r, ok := backend.Runner.(engine.GreedyChainer); ok {
		model.info.ChainSteps = r.ChainSteps()
	}
	if r, ok := backend.Runner.(interface{ PromptSteps() int }); ok {
		model.info.PromptSteps = r.PromptSteps()
	}
	model.loop, err = engine.NewLoop(backend, engine.LoopOptions{Parallel: opts.Parallel, PrefixCache: opts.PrefixCache,
		KVBudget: opts.KVBudget, UBatch: opts.UBatch, ContextLen: ctxLen, NVocab: c.NVocab, Turn: model.turn})
	if err != nil {
		backend.Close()
		return nil, fmt.Errorf("modrun: %w", err)
	}
	return model, nil
}

// Info says what the model is and where it runs.
func (m *Model) Info() Info {
	info := m.info
	info.RoutedLayers = append([]int(nil), info.RoutedLayers...)
	info.BlockDispatches = append([]int(nil), info.BlockDispatches...)
	info.BlockBarriers = append([]int(nil), info.BlockBarriers...)
	return info
}

// Tokenize turns text into the model's token ids, with BOS first when bos
// is true and the tokenizer has one.
func (m *Model) Tokenize(text string, bos bool) ([]int32, error) {
	if m.isClosed() {
		return nil, ErrClosed
	}
	return m.tok.Encode(text, bos)
}

// ErrNoPredictor is returned by Open for RoutingPredictor with a MoD model
// trained without a predictor.
var ErrNoPredictor = errors.New("use router routing")

// ContextLengthError is returned by Open for an Options.ContextLen longer
// than the model's context length.
type ContextLengthError struct {
	Path         string
	Asked, Model int
	err          error // the *OptionError of the check (Unwrap)
}

func (e *ContextLengthError) Error() string {
	return fmt.Sprintf("modrun: ContextLen %d: must be in [1, %d], the context length of %s", e.Asked, e.Model, e.Path)
}

// Unwrap is engine's check's *OptionError (ContextLen), for a caller that
// names the option its own way (OptionError.Named).
func (e *ContextLengthError) Unwrap() error { return e.err }

// ProfileEntry is the GPU time of one kernel (or "copy") over every token
// since Open.
type ProfileEntry struct {
	Kernel string // the shader variant's name, e.g. "matvec_f32"
	Calls  int
	NS     uint64 // GPU nanoseconds
	Bytes  uint64 // matvecs: the weight bytes their calls read, summed; 0 for other kernels
	// FLOPs is the arithmetic of the FLOPCalls calls whose work the host
	// knows (matmuls, matvecs, attention; not a routed block's indirect
	// dispatches), FLOPNS their GPU time: FLOPs/FLOPNS is the kernel's rate.
	FLOPs     uint64
	FLOPCalls int
	FLOPNS    uint64
	Path      string // where the products ran: "fp32" (shader arithmetic) or "tensor" (tensor cores); "" when not counted
}

// Profile is the GPU time per kernel, most first, with Options.Profile on
// a Vulkan device that has timestamps; nil otherwise.
func (m *Model) Profile() []ProfileEntry {
	release, err := m.acquire(context.Background())
	if err != nil {
		return nil
	}
	defer release()
	p, ok := m.backend.Runner.(engine.Profiler)
	if !ok {
		return nil
	}
	var out []ProfileEntry
	for _, e := range p.Profile() {
		out = append(out, ProfileEntry(e))
	}
	return out
}

// ErrClosed is returned by the methods of a closed Model or Session, and
// of the Sessions of a closed Model.
var ErrClosed = errors.New("modrun: closed")

// Close waits for the Generate calls in progress (cancel their contexts to
// hurry them), then frees the device's objects and the model's file.
// Called while a token callback runs (from it, or from another goroutine
// in that window), it closes at once, and the Generate call that runs the
// callback returns ErrClosed when the callback returns (its context's
// error if that is done). A second Close and
// the methods of a closed model's sessions return ErrClosed.
func (m *Model) Close() error {
	if !m.isClosed() {
		m.loop.Close()
	}
	release, err := m.acquire(context.Background())
	if err != nil {
		return err
	}
	defer release()
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.backend.Close()
	if err := m.m.Close(); err != nil {
		return fmt.Errorf("modrun: %w", err)
	}
	return nil
}

func (m *Model) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// acquire takes the model's turn on its runner for one call, waiting while
// a step of the generation loop or another call holds it, until ctx is
// done. A token callback never holds it (the loop takes it per step), so
// its calls wait for a step at most. It returns ErrClosed once the model
// is closed; otherwise the caller must call release when done.
func (m *Model) acquire(ctx context.Context) (release func(), err error) {
	select {
	case m.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if m.isClosed() {
		<-m.turn
		return nil, ErrClosed
	}
	return func() { <-m.turn }, nil
}
