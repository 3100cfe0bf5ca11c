// Package vulkan runs a mod model on a Vulkan device (package vk) in
// generate mode, with the same method set as engine.Runner: the weights are
// uploaded once, each layer's KV cache lives on the GPU (compact in a routed
// layer: only the tokens that layer selected, with their original
// positions), and the decode step of one token is recorded once and replayed
// for every token. What changes from token to token lives in buffers: the
// token id and position (written by the host) and each layer's cache entry
// count (maintained by the GPU). MoD causal routing (router r > 0 or
// predictor p > 0, DESIGN.md §3) is decided on the GPU: compaction writes
// indirect-dispatch arguments, and a routed block runs on 0 or 1 token
// without the CPU ever reading the decision. One forward recorder
// (forward.go) records every mode: the decode step, a prompt of several
// tokens in chunks (prefill.go: matmul and key-tiled attention, with the
// same caches), causal scoring, and eval mode's whole windows (eval.go);
// only a routed layer's selector differs between them.
//
// The semantics are mod.State.Forward's in causal routing, which the tests
// check logit for logit.
package vulkan

import (
	"encoding/binary"
	"fmt"
	"io"
	"unsafe"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// Options configure New.
type Options struct {
	// ContextLen caps the sequence, and so the KV caches' size; 0 (or more
	// than the model's) means the model's context length.
	ContextLen int
	// KVType is the KV cache's element type, "f16" or "f32"
	// (shaders.ParseKV); "" means the profile's (f16 on GPUs, f32 on CPU devices). Generation
	// only: eval mode keeps no cache.
	KVType string
	// DeviceProfile picks each kernel's variant and specialization; nil
	// means the device's own (DeviceProfile). Tests set it to run a GPU's
	// variants (subgroup matvec) on lavapipe.
	DeviceProfile *shaders.Profile
	// Profile writes a GPU timestamp after every command of the step, so
	// Profile can say where the GPU time goes. It costs a query per
	// command: leave it off when timing the whole step. Ignored on a device
	// without timestamps (vk.DeviceInfo.Timestamps).
	Profile bool
	// UBatch is the longest chunk of a batched prefill (a Feed of more
	// than PromptSteps tokens, prefill.go); 0 means DefaultUBatch.
	UBatch int
	// PromptSteps is the most tokens a Feed runs through the decode step,
	// one at a time, instead of the batched prefill (step.go); 0 means
	// MODRUN_PROMPT_STEPS, else the runner's choice (vecPrompt), negative
	// 1 (a Feed of 2 tokens or more is a prefill: tests of the prefill's
	// recordings set it).
	PromptSteps int
	// NoConditional records a skipped routed block as indirect dispatches of
	// zero workgroups only, even on a device with
	// VK_EXT_conditional_rendering, where by default the block's dispatches
	// are also in a conditional span on the routing decision: to measure
	// what the span saves.
	NoConditional bool
	// Trace copies each routed layer's score and decision to the host after
	// every token, so Routes can report them. It costs two or three small
	// copies per routed layer and token: leave it off when only speed matters.
	Trace bool

	// Knobs set the engine's measuring knobs (knobs.go): what `modrun
	// tune` chose for this device and model, the environment's variables
	// over them. Nil leaves every knob to the environment.
	Knobs Knobs

	// SelfCheckLog is where the self-check at load writes a line for each
	// kernel that failed and what it fell back to (selfcheck.go); nil
	// means os.Stderr.
	SelfCheckLog io.Writer
}

// Runner runs one sequence of a model on a Vulkan device. Like the device,
// it is not safe for concurrent use. Close it before the device.
type Runner struct {
	dev     *vk.Device
	c       mod.Config
	routing mod.Routing
	// evalMode: top-k routing, the Evaluator's runner (openRunner): no KV
	// cache and no decode step, a window one batched chunk.
	evalMode bool
	ctx      int        // the longest sequence, entries in each KV cache
	kv       shaders.KV // the caches' element type, shaders.KVF32 or KVF16
	// attnSplits is how many chunks decode attention splits each cache
	// into (flash-decoding; 1: the single-pass kernel).
	attnSplits uint32
	pos        int // tokens fed since the last Reset

	ks   *kernels
	w    weights
	bufs []*vk.Buffer // every buffer, for Close; the first nWeightBufs hold weights
	// resetErr is the last Reset's error (a broken device): Feed returns it.
	resetErr error
	// nWeightBufs is how many of bufs uploadWeights made (MemoryStats).
	nWeightBufs int

	// counts[l] is layer l's KV cache entry count, maintained by the GPU
	// (decode_kv increments it when the layer runs on the token).
	counts *vk.Buffer   // [nLayer] u32
	cache  []layerCache // [nLayer]
	// args[l] is routed layer l's indirect arguments, written by its
	// selector in every pass (routedArgs); tables the routed blocks'
	// dispatch sizes per pass shape and block (routedTable).
	args   []*vk.Buffer
	tables map[tableKey]*vk.Buffer

	decodeStep             // the decode step's buffers and recordings (step.go)
	chain       chainState // the greedy chain's (chain.go)
	pf          *prefill   // the batched prefill (prefill.go)
	steppers    []*Stepper // step runners on the runner's weights (stepper.go): their recordings close with it
	ub          int        // Options.UBatch
	promptSteps int        // Options.PromptSteps, resolved
	vecRowsEnv  int        // MODRUN_VEC_ROWS (vecRowsEnv); 0: the profile's
	knobs       Knobs      // Options.Knobs

	profile     bool                         // the step has a timestamp after each command
	conditional bool                         // routed blocks run in conditional spans (VK_EXT_conditional_rendering)
	prof        map[string]*ProfileEntry     // per label, summed over replays since New
	profCmds    map[*vk.Recorder][]profCmd   // per recording, what each timestamp's command reads and computes (timestampOp)
	handRecs    map[*vk.Recorder]*handoffRec // the decode step's hand-off while it is recorded (handoff.go)

	// trace is, with Options.Trace, the routing of each token of the last
	// Feed (readTrace); nil without it.
	trace [][]mod.Route // [tokens of the last Feed][nRouted]
}

// layerCache is one layer's KV cache on the GPU: the first counts[l] entries
// are valid, in position order.
type layerCache struct {
	k, v *vk.Buffer // [ctx][kvDim] f32 or f16 (Runner.kv), k rotated
	pos  *vk.Buffer // [ctx] u32 original position of each entry
}

// KVType is the KV caches' element type, "f16" or "f32".
func (r *Runner) KVType() string { return r.kv.String() }

// Knobs are the knobs the runner was opened with (Options.Knobs; the
// environment's variables override them).
func (r *Runner) Knobs() Knobs { return r.knobs }

// DeviceInfo describes the runner's device.
func (r *Runner) DeviceInfo() vk.DeviceInfo { return r.dev.Info() }

// New uploads m's weights to dev and records the decode step, for causal
// routing r (mod.RoutingRouter or mod.RoutingPredictor; dense models ignore
// it). m may be closed afterwards: the runner keeps no reference to its
// memory.
func New(dev *vk.Device, m *mod.Model, r mod.Routing, opts Options) (*Runner, error) {
	if r == mod.RoutingTopK {
		return nil, fmt.Errorf("vulkan: generation needs causal routing (router or predictor), not top-k")
	}
	return openRunner(dev, m, r, opts)
}

// openRunner is New for any routing. Top-k routing makes an eval-mode
// runner (the Evaluator's): a window is one batched chunk from position 0
// (UBatch is the context length), its routed layers select by top-k, its
// attention runs among the window's rows with no KV cache, and there is no
// decode step.
func openRunner(dev *vk.Device, m *mod.Model, r mod.Routing, opts Options) (*Runner, error) {
	c := m.Config
	if _, err := m.NewState(r); err != nil { // the model has what r needs
		return nil, err
	}
	if err := checkKnobs(opts.Knobs); err != nil {
		return nil, err
	}
	if c.HeadDim > int(shaders.AttentionSpec[1]) {
		return nil, fmt.Errorf("vulkan: %s: head dimension %d is over the attention kernel's %d", m.Path, c.HeadDim, shaders.AttentionSpec[1])
	}
	ks := newKernels(dev, opts.DeviceProfile, opts.Knobs)
	if opts.DeviceProfile == nil { // the device's own; a given one (a test's, the self-check's fallback) is kept
		if err := handoffEnv(&ks.prof, opts.Knobs); err != nil {
			ks.Close()
			return nil, err
		}
	}
	vecRows, err := vecRowsEnv(ks.prof, opts.Knobs)
	if err != nil {
		ks.Close()
		return nil, err
	}
	promptSteps, err := promptStepsEnv(opts.PromptSteps, opts.Knobs)
	if err != nil {
		ks.Close()
		return nil, err
	}
	chainSteps, err := chainEnv(opts.Knobs, opts.Profile)
	if err != nil {
		ks.Close()
		return nil, err
	}
	run := &Runner{dev: dev, c: c, routing: r, ctx: c.ContextLen, ks: ks, args: make([]*vk.Buffer, c.NLayer), tables: map[tableKey]*vk.Buffer{},
		profile: opts.Profile && dev.Info().Timestamps(), prof: map[string]*ProfileEntry{},
		profCmds: map[*vk.Recorder][]profCmd{}, handRecs: map[*vk.Recorder]*handoffRec{},
		conditional: dev.Info().Features.ConditionalRendering && !opts.NoConditional, ub: opts.UBatch,
		promptSteps: promptSteps, vecRowsEnv: vecRows, knobs: opts.Knobs, chain: chainState{most: chainSteps}}
	if opts.Trace && c.IsMoD() {
		run.trace = [][]mod.Route{} // non-nil: tracing
	}
	if opts.ContextLen > 0 && opts.ContextLen < run.ctx {
		run.ctx = opts.ContextLen
	}
	if run.kv, err = shaders.ParseKV(opts.KVType); err != nil {
		run.Close()
		return nil, fmt.Errorf("vulkan: %w", err)
	}
	if run.kv == shaders.KVDefault {
		run.kv = run.ks.prof.KV
	}
	run.attnSplits = run.ks.prof.AttentionSplits(run.ctx)
	fitCtx, fitKV := run.ctx, kvBytesPerToken(c, run.kv)
	if run.evalMode = r == mod.RoutingTopK; run.evalMode {
		run.ub, run.kv, fitCtx, fitKV = run.ctx, shaders.KVF32, 0, 0 // no cache
	}
	if err := checkFit(dev, m, fitCtx, fitKV, run.KVType()); err != nil {
		run.Close()
		return nil, err
	}
	if err := run.build(m); err != nil {
		run.Close()
		return nil, fmt.Errorf("vulkan: %s: %w", m.Path, err)
	}
	if fb, err := run.ks.selfCheck(opts.SelfCheckLog); err != nil || fb != nil {
		run.Close()
		if err != nil {
			return nil, fmt.Errorf("vulkan: %s: %w", m.Path, err)
		}
		opts.DeviceProfile = fb // a kernel failed: build again with its safe variant
		return openRunner(dev, m, r, opts)
	}
	return run, nil
}

func (r *Runner) build(m *mod.Model) error {
	if err := r.uploadWeights(m.Weights, r.c); err != nil {
		return err
	}
	r.nWeightBufs = len(r.bufs)
	if err := r.allocate(); err != nil {
		return err
	}
	if !r.evalMode {
		if err := r.record(); err != nil {
			return err
		}
		if r.ks.prof.FuseAttention { // a batched step's (Stepper), made now so that the self-check at open checks it
			if _, err := r.ks.get(shaders.PagedAttendName(r.kv), shaders.PagedAttentionSpec(uint32(r.c.HeadDim))); err != nil {
				return err
			}
			if r.ks.prof.AttendOwn {
				if _, err := r.ks.get(shaders.PagedAttendOwnName(r.kv), shaders.PagedAttentionSpec(uint32(r.c.HeadDim))); err != nil {
					return err
				}
			}
		}
	}
	if err := r.buildPrefill(m, r.ub); err != nil {
		return err
	}
	if r.promptSteps == 0 {
		r.promptSteps = r.vecPrompt()
	}
	r.Reset()
	return nil
}

// allocate makes the KV caches and their counts, then the decode step's
// buffers (allocateStep).
func (r *Runner) allocate() error {
	c := r.c
	al := &allocator{r: r}
	must := al.buf
	r.counts = must(4*uint64(c.NLayer), vk.DeviceLocal)
	if !r.evalMode { // eval mode keeps no cache
		r.cache = make([]layerCache, c.NLayer)
		kvB := r.kv.ElementBytes() * uint64(r.ctx*c.KVDim())
		for l := range r.cache {
			r.cache[l] = layerCache{k: must(kvB, vk.DeviceLocal), v: must(kvB, vk.DeviceLocal), pos: must(4*uint64(r.ctx), vk.DeviceLocal)}
		}
	}
	if al.err != nil {
		return fmt.Errorf("KV caches for %d tokens: %w", r.ctx, al.err)
	}
	return r.allocateStep()
}

// Routes is, for each token of the last Feed or FeedArgmax call, what each
// routed layer did with it ([tokens][routed layers]), read back from the
// GPU. It is nil unless the runner was made with Options.Trace (and for a
// dense model).
func (r *Runner) Routes() [][]mod.Route {
	return r.trace
}

func (r *Runner) check(tokens []int32) error {
	if len(tokens) == 0 {
		return fmt.Errorf("vulkan: no tokens to run")
	}
	if r.pos+len(tokens) > r.ctx {
		return fmt.Errorf("vulkan: %d tokens after %d would pass the context length %d", len(tokens), r.pos, r.ctx)
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= r.c.NVocab {
			return fmt.Errorf("vulkan: token %d at index %d is outside the vocabulary [0, %d)", t, i, r.c.NVocab)
		}
	}
	return nil
}

// Pos is the number of tokens fed since the last Reset.
func (r *Runner) Pos() int { return r.pos }

// ContextLen is the longest sequence the runner takes.
func (r *Runner) ContextLen() int { return r.ctx }

// Reset starts a new sequence: every cache count back to 0 (the entries
// themselves are left, unread).
func (r *Runner) Reset() {
	r.pos = 0
	r.chain.snap = nil
	// decode_attend's and argmax_wide's counters are zero after every
	// complete step; zeroed here too, in case a step failed half-way.
	err := r.counts.Upload(make([]byte, 4*r.c.NLayer), 0)
	for _, b := range []*vk.Buffer{r.act.done, r.act.amaxDone, r.handHost} {
		if err == nil && b != nil {
			err = b.Upload(make([]byte, b.Size()), 0)
		}
	}
	// Only a broken device (lost, or timed out) fails here; the next Feed
	// reports it.
	r.resetErr = err
}

// CacheEntries is, per layer, the number of entries in its KV cache: pos for
// a dense layer, the tokens it selected for a routed one (read from the GPU).
func (r *Runner) CacheEntries() ([]int, error) {
	counts, err := downloadU32(r.counts, r.c.NLayer)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(counts))
	for l, c := range counts {
		out[l] = int(c)
	}
	return out, nil
}

func downloadF32(b *vk.Buffer, n int) ([]float32, error) { return downloadWords[float32](b, n) }

// downloadWords is b's first n 4-byte words, as the device wrote them
// (little-endian).
func downloadWords[T uint32 | float32](b *vk.Buffer, n int) ([]T, error) {
	x := make([]T, n)
	if n == 0 {
		return x, nil
	}
	if littleEndianHost { // the device's words are the host's: copied straight in
		return x, b.Download(unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*n), 0)
	}
	raw := make([]byte, 4*n)
	if err := b.Download(raw, 0); err != nil {
		return nil, err
	}
	for i := range x {
		*(*uint32)(unsafe.Pointer(&x[i])) = binary.LittleEndian.Uint32(raw[4*i:])
	}
	return x, nil
}

// littleEndianHost says whether the host stores a word as the device
// does (little-endian), so that a download needs no conversion: a sampled
// token's logits, 128 KB at 32,000 tokens, are one copy, where a second
// buffer and a conversion a word cost ~40 µs a token on a 2-core VM
// (BenchmarkDownloadF32).
var littleEndianHost = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// Close waits for the device and frees every GPU object the runner made.
func (r *Runner) Close() {
	if r.dev == nil {
		return
	}
	_ = r.dev.WaitIdle() // destruction waits for the GPU
	for _, rec := range []*vk.Recorder{r.step, r.stepGreedy, r.fetch} {
		if rec != nil {
			rec.Close()
		}
	}
	if r.pf != nil {
		for _, pr := range r.pf.recs {
			pr.rec.Close()
		}
	}
	for _, st := range r.steppers {
		st.dropRecordings()
	}
	for _, rec := range r.chain.recs {
		rec.Close()
	}
	r.chain.recs = nil
	r.ks.Close()
	for _, b := range r.bufs {
		b.Close()
	}
	r.bufs, r.step, r.stepGreedy, r.fetch, r.pf, r.dev, r.steppers = nil, nil, nil, nil, nil, nil, nil
}
