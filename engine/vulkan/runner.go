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
	"math"

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
	// UBatch is the longest chunk of a batched prefill (a Feed of more than
	// one token, prefill.go); 0 means DefaultUBatch.
	UBatch int
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

	// The per-token inputs of the step, written by the host before each
	// replay: host-visible, so a write is a memcpy, no transfer.
	tok    *vk.Buffer // [1] u32 token id
	tokPos *vk.Buffer // [1] u32 its position
	// counts[l] is layer l's KV cache entry count, maintained by the GPU
	// (decode_kv increments it when the layer runs on the token).
	counts *vk.Buffer   // [nLayer] u32
	cache  []layerCache // [nLayer]
	act    activations  // the step's scratch
	routes []route      // [nLayer]; zero for a dense layer
	// args[l] is routed layer l's indirect arguments, written by its
	// selector in every pass (routedArgs); tables the routed blocks'
	// dispatch sizes per pass shape (routedTable).
	args   []*vk.Buffer
	tables map[tableKey]*vk.Buffer
	// What the host reads after a step.
	logitsHost *vk.Buffer // [nVocab] f32
	bestHost   *vk.Buffer // [1] u32: argmax of the logits, on the GPU

	step       *vk.Recorder // the decode step: recorded once, replayed per token
	stepGreedy *vk.Recorder // the step without the logits' copy to the host (FeedArgmax)
	fetch      *vk.Recorder // the logits' copy to the host alone, after a prefill (Feed)
	pf         *prefill     // the batched prefill (prefill.go)
	ub         int          // Options.UBatch

	profile     bool                     // the step has a timestamp after each command
	conditional bool                     // routed blocks run in conditional spans (VK_EXT_conditional_rendering)
	prof        map[string]*ProfileEntry // per label, summed over replays since New

	// With Options.Trace, the step copies each routed layer's score r,
	// predictor score p and count (0 or 1) here, and run reads them after
	// each token into trace (readTrace).
	traceHost *vk.Buffer    // [nRouted][3][1] r f32, p f32, selected u32
	trace     [][]mod.Route // [tokens of the last Feed][nRouted]
}

// layerCache is one layer's KV cache on the GPU: the first counts[l] entries
// are valid, in position order.
type layerCache struct {
	k, v *vk.Buffer // [ctx][kvDim] f32 or f16 (Runner.kv), k rotated
	pos  *vk.Buffer // [ctx] u32 original position of each entry
}

// activations are the step's intermediate vectors (one token).
type activations struct {
	x      *vk.Buffer // [nEmbd] the residual stream
	xs     *vk.Buffer // [nEmbd] a routed block's copy of x, then its output
	xn     *vk.Buffer // [nEmbd] normed input of a matvec (without FuseNorm)
	qkv    *vk.Buffer // q [qDim], k [kvDim], v [kvDim] (weights.block.qkv.part)
	att    *vk.Buffer // [qDim] attention output
	part   *vk.Buffer // [nHead][attnSplits][2+headDim] flash-decoding's partial results
	done   *vk.Buffer // [nHead+1] u32 decode_attend's counters, zero between dispatches
	gu     *vk.Buffer // gate [nFF], up [nFF] (weights.block.gateUp.part)
	h      *vk.Buffer // [nFF] SwiGLU output
	mo     *vk.Buffer // [nEmbd] a routed block's MLP output, when its gate scales it (mod.GateTargetMLP)
	logits *vk.Buffer // [nVocab]
}

// route is a routed layer's routing state in the decode step, on the GPU.
type route struct {
	score  *vk.Buffer // [1] f32 router score r
	pred   *vk.Buffer // [1] f32 predictor score p (predictor routing)
	hidden *vk.Buffer // [predHidden] f32 SiLU(W1 x) (an MLP predictor's routing)
	idx    *vk.Buffer // [1] u32 0: mod_residual's index list (the one token)
	count  *vk.Buffer // [1] u32 selected tokens: 0 or 1
}

// KVType is the KV caches' element type, "f16" or "f32".
func (r *Runner) KVType() string { return r.kv.String() }

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
	if c.HeadDim > int(shaders.AttentionSpec[1]) {
		return nil, fmt.Errorf("vulkan: %s: head dimension %d is over the attention kernel's %d", m.Path, c.HeadDim, shaders.AttentionSpec[1])
	}
	ks := newKernels(dev, opts.DeviceProfile)
	run := &Runner{dev: dev, c: c, routing: r, ctx: c.ContextLen, ks: ks, args: make([]*vk.Buffer, c.NLayer), tables: map[tableKey]*vk.Buffer{},
		profile: opts.Profile && dev.Info().Timestamps(), prof: map[string]*ProfileEntry{},
		conditional: dev.Info().Features.ConditionalRendering && !opts.NoConditional, ub: opts.UBatch}
	if opts.Trace && c.IsMoD() {
		run.trace = [][]mod.Route{} // non-nil: tracing
	}
	if opts.ContextLen > 0 && opts.ContextLen < run.ctx {
		run.ctx = opts.ContextLen
	}
	var err error
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
	}
	if err := r.buildPrefill(m, r.ub); err != nil {
		return err
	}
	r.Reset()
	return nil
}

// allocate makes the caches, the activations and the step's inputs and outputs.
func (r *Runner) allocate() error {
	c := r.c
	f32 := func(n int) uint64 { return 4 * uint64(n) }
	kvd := c.KVDim()
	al := &allocator{r: r}
	must := al.buf
	r.tok, r.tokPos = must(4, vk.HostVisible), must(4, vk.HostVisible)
	r.logitsHost, r.bestHost = must(f32(c.NVocab), vk.HostVisible), must(4, vk.HostVisible)
	r.counts = must(f32(c.NLayer), vk.DeviceLocal)
	b0 := r.w.blocks[0]
	a := &r.act
	a.x, a.xs, a.xn = must(f32(c.NEmbd), vk.DeviceLocal), must(f32(c.NEmbd), vk.DeviceLocal), must(f32(c.NEmbd), vk.DeviceLocal)
	a.mo = must(f32(c.NEmbd), vk.DeviceLocal)
	a.qkv, a.att = must(b0.qkv.bytes, vk.DeviceLocal), must(f32(c.NHead*c.HeadDim), vk.DeviceLocal)
	a.gu, a.h = must(b0.gateUp.bytes, vk.DeviceLocal), must(f32(c.NFF), vk.DeviceLocal)
	a.logits = must(f32(c.NVocab), vk.DeviceLocal)
	a.part = must(4*shaders.DecodeAttentionPartialFloats(1, uint32(c.NHead), uint32(c.HeadDim), r.attnSplits), vk.DeviceLocal)
	a.done = must(4*shaders.DecodeAttendDoneWords(uint32(c.NHead)), vk.DeviceLocal)
	if al.err == nil {
		al.err = a.done.Upload(make([]byte, a.done.Size()), 0) // decode_attend leaves it zero after each dispatch
	}
	if al.err != nil {
		return fmt.Errorf("activations: %w", al.err)
	}
	if r.evalMode {
		return nil // no cache, no decode step
	}
	r.cache = make([]layerCache, c.NLayer)
	r.routes = make([]route, c.NLayer)
	for l := range r.cache {
		kvB := r.kv.ElementBytes() * uint64(r.ctx*kvd)
		r.cache[l] = layerCache{k: must(kvB, vk.DeviceLocal), v: must(kvB, vk.DeviceLocal),
			pos: must(f32(r.ctx), vk.DeviceLocal)}
		if c.Routed[l] {
			ro := route{score: must(4, vk.DeviceLocal), pred: must(4, vk.DeviceLocal), count: must(4, vk.DeviceLocal), idx: must(4, vk.DeviceLocal)}
			if rt := r.w.blocks[l].router; r.routing == mod.RoutingPredictor && rt.predHidden > 0 {
				ro.hidden = must(4*uint64(rt.predHidden), vk.DeviceLocal)
			}
			if al.err == nil {
				al.err = ro.idx.Upload(u32Bytes([]uint32{0}), 0)
			}
			r.routes[l] = ro
		}
	}
	if r.trace != nil {
		r.traceHost = must(12*uint64(len(c.RoutedLayers())), vk.HostVisible)
	}
	if al.err != nil {
		return fmt.Errorf("KV caches for %d tokens: %w", r.ctx, al.err)
	}
	return nil
}

// Feed runs tokens after those already fed and returns the logits of the
// last one [nVocab].
//
// One token runs through the recorded decode step; more go through the
// batched prefill in chunks of up to Options.UBatch (prefill.go). Causal
// routing decides token by token (DESIGN.md §3), so the result does not
// depend on how the tokens are split, up to the kernels' summation orders.
// After an error the sequence is in an unspecified state: Reset it.
func (r *Runner) Feed(tokens []int32) ([]float32, error) {
	if err := r.run(tokens, true); err != nil {
		return nil, err
	}
	if len(tokens) > 1 { // a prefill: its last row's logits are on the device
		if err := r.dev.Run(r.fetch); err != nil {
			return nil, fmt.Errorf("vulkan: logits at position %d: %w", r.pos-1, err)
		}
	}
	return downloadF32(r.logitsHost, r.c.NVocab)
}

// FeedArgmax is Feed for greedy decoding: it runs tokens and returns the
// argmax of the last one's logits (lastArgmax), reading 4 bytes back
// instead of the nVocab logits.
func (r *Runner) FeedArgmax(tokens []int32) (int32, error) {
	if err := r.run(tokens, false); err != nil {
		return 0, err
	}
	return r.lastArgmax()
}

// run runs tokens: one through the decode step (the one that copies the
// logits to the host when logits), more through the batched prefill.
func (r *Runner) run(tokens []int32, logits bool) error {
	if r.resetErr != nil {
		return fmt.Errorf("vulkan: Reset: %w", r.resetErr)
	}
	if err := r.check(tokens); err != nil {
		return err
	}
	if r.trace != nil {
		r.trace = r.trace[:0]
	}
	if len(tokens) > 1 {
		return r.runPrefill(tokens, headLast, nil)
	}
	if err := r.tok.Upload(u32Bytes([]uint32{uint32(tokens[0])}), 0); err != nil {
		return err
	}
	if err := r.tokPos.Upload(u32Bytes([]uint32{uint32(r.pos)}), 0); err != nil {
		return err
	}
	step := r.stepGreedy
	if logits {
		step = r.step
	}
	if err := r.dev.Run(step); err != nil {
		return fmt.Errorf("vulkan: decode step at position %d: %w", r.pos, err)
	}
	r.addTimings(step)
	if err := r.readTrace(stepPass(logits)); err != nil {
		return fmt.Errorf("vulkan: routing of position %d: %w", r.pos, err)
	}
	r.pos++
	return nil
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

// lastArgmax is the index of the largest logit of the last token fed, computed
// on the GPU (ties to the lower index): greedy decoding without reading the
// logits back.
// Logits holding a NaN or an infinity give mod.ErrNonFinite, as Feed's
// caller finds them on the CPU.
func (r *Runner) lastArgmax() (int32, error) {
	var raw [4]byte
	if err := r.bestHost.Download(raw[:], 0); err != nil {
		return 0, err
	}
	best := binary.LittleEndian.Uint32(raw[:])
	if best == shaders.ArgmaxNonFinite {
		return 0, fmt.Errorf("vulkan: %w", mod.NonFinite(r.pos-1))
	}
	return int32(best), nil
}

// Pos is the number of tokens fed since the last Reset.
func (r *Runner) Pos() int { return r.pos }

// ContextLen is the longest sequence the runner takes.
func (r *Runner) ContextLen() int { return r.ctx }

// Reset starts a new sequence: every cache count back to 0 (the entries
// themselves are left, unread).
func (r *Runner) Reset() {
	r.pos = 0
	// decode_attend's counters are zero after every complete step; zeroed
	// here too, in case a step failed half-way.
	err := r.counts.Upload(make([]byte, 4*r.c.NLayer), 0)
	if err == nil {
		err = r.act.done.Upload(make([]byte, r.act.done.Size()), 0)
	}
	// Only a broken device (lost, or timed out) fails here; the next Feed
	// reports it.
	r.resetErr = err
}

// CacheEntries is, per layer, the number of entries in its KV cache: pos for
// a dense layer, the tokens it selected for a routed one (read from the GPU).
func (r *Runner) CacheEntries() ([]int, error) {
	raw := make([]byte, 4*r.c.NLayer)
	if err := r.counts.Download(raw, 0); err != nil {
		return nil, err
	}
	out := make([]int, r.c.NLayer)
	for l := range out {
		out[l] = int(binary.LittleEndian.Uint32(raw[4*l:]))
	}
	return out, nil
}

func downloadF32(b *vk.Buffer, n int) ([]float32, error) {
	raw := make([]byte, 4*n)
	if err := b.Download(raw, 0); err != nil {
		return nil, err
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return x, nil
}

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
	r.ks.Close()
	for _, b := range r.bufs {
		b.Close()
	}
	r.bufs, r.step, r.stepGreedy, r.fetch, r.pf, r.dev = nil, nil, nil, nil, nil, nil
}
