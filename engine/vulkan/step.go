package vulkan

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// The decode step: one token through the whole model, the forward
// recorder's step pass (forward.go) in the buffers below, recorded once per
// runner, twice: with the logits' copy to logitsHost for Feed, and without
// it for FeedArgmax, which reads 4 bytes a token. Its inputs are tok and
// tokPos (host-written) and the runner's counts (GPU-kept); its outputs
// bestHost and logitsHost. A Feed of more than one token goes through the
// batched prefill instead (prefill.go), whose last row's head writes the
// same outputs.

// decodeStep is the decode step's part of a Runner.
type decodeStep struct {
	// The per-token inputs of the step, written by the host before each
	// replay: host-visible, so a write is a memcpy, no transfer.
	tok    *vk.Buffer  // [1] u32 token id
	tokPos *vk.Buffer  // [1] u32 its position
	act    activations // the step's scratch
	routes []route     // [nLayer]; zero for a dense layer
	// What the host reads after a step.
	logitsHost *vk.Buffer // [nVocab] f32
	bestHost   *vk.Buffer // [1] u32: argmax of the logits, on the GPU
	// drawHost is the head's draw parameters (shaders.ArgmaxDraw, host-
	// written): temperature 0, the argmax, but during FeedDraw.
	drawHost *vk.Buffer
	// draws: the profile's head draws (argmax_wide; DrawsOnDevice),
	// decided when the runner's kernels are (allocateStep).
	draws bool
	// With Options.Trace, the step copies each routed layer's score r,
	// predictor score p and count (0 or 1) here, and run reads them after
	// each token into the runner's trace (readTrace).
	traceHost *vk.Buffer // [nRouted][3][1] r f32, p f32, selected u32
	// With the profile's Handoff (handoff.go): the step's counts of
	// workgroups done and its stall flag, and the flag copied for the host.
	hand, handHost *vk.Buffer

	step *vk.Recorder // the decode step: recorded once, replayed per token
	// stepBlocks are step's commands block by block (StepCounts): what
	// recording each layer added to the recorder's counts.
	stepBlocks []vk.Stats
	stepGreedy *vk.Recorder // the step without the logits' copy to the host (FeedArgmax)
	fetch      *vk.Recorder // the logits' copy to the host alone, after a prefill (Feed)
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
	// argmax_wide's scratch (the head's argmax on a GPU profile): each
	// workgroup's winner, and the count of workgroups done, zero between
	// dispatches.
	amaxPart, amaxDone *vk.Buffer
}

// route is a routed layer's routing state in the decode step, on the GPU.
type route struct {
	score  *vk.Buffer // [1] f32 router score r
	pred   *vk.Buffer // [1] f32 predictor score p (predictor routing)
	hidden *vk.Buffer // [predHidden] f32 SiLU(W1 x) (an MLP predictor's routing)
	idx    *vk.Buffer // [1] u32 0: mod_residual's index list (the one token)
	count  *vk.Buffer // [1] u32 selected tokens: 0 or 1
}

// allocateStep makes the decode step's inputs, activations, routing state
// and outputs (an eval-mode runner, which has no decode step, only what a
// batch's head reads: activations and outputs).
func (r *Runner) allocateStep() error {
	c := r.c
	f32 := func(n int) uint64 { return 4 * uint64(n) }
	al := &allocator{r: r}
	must := al.buf
	r.tok, r.tokPos = must(4, vk.HostVisible), must(4, vk.HostVisible)
	r.logitsHost, r.bestHost, r.drawHost = must(f32(c.NVocab), vk.HostVisible), must(4, vk.HostVisible), must(shaders.ArgmaxDrawBytesPer, vk.HostVisible)
	r.draws = r.headArgmax() == "argmax_wide"
	b0 := r.w.blocks[0]
	a := &r.act
	a.x, a.xs, a.xn = must(f32(c.NEmbd), vk.DeviceLocal), must(f32(c.NEmbd), vk.DeviceLocal), must(f32(c.NEmbd), vk.DeviceLocal)
	a.mo = must(f32(c.NEmbd), vk.DeviceLocal)
	a.qkv, a.att = must(b0.qkv.bytes, vk.DeviceLocal), must(f32(c.NHead*c.HeadDim), vk.DeviceLocal)
	a.gu, a.h = must(b0.gateUp.bytes, vk.DeviceLocal), must(f32(c.NFF), vk.DeviceLocal)
	a.logits = must(f32(c.NVocab), vk.DeviceLocal)
	a.part = must(4*shaders.DecodeAttentionPartialFloats(1, uint32(c.NHead), uint32(c.HeadDim), r.attnSplits), vk.DeviceLocal)
	a.done = must(4*shaders.DecodeAttendDoneWords(uint32(c.NHead)), vk.DeviceLocal)
	a.amaxPart = must(4*shaders.ArgmaxWidePartWords(1, uint32(c.NVocab), shaders.ArgmaxWideSpec), vk.DeviceLocal)
	a.amaxDone = must(4, vk.DeviceLocal)
	if al.err == nil {
		al.err = a.done.Upload(make([]byte, a.done.Size()), 0) // decode_attend leaves it zero after each dispatch
	}
	if al.err == nil {
		al.err = a.amaxDone.Upload(make([]byte, 4), 0) // argmax_wide leaves it zero after each dispatch
	}
	if al.err == nil {
		al.err = r.drawHost.Upload(make([]byte, shaders.ArgmaxDrawBytesPer), 0) // the argmax
	}
	if al.err != nil {
		return fmt.Errorf("activations: %w", al.err)
	}
	if r.evalMode {
		return nil // no decode step
	}
	r.routes = make([]route, c.NLayer)
	for l := range r.routes {
		if !c.Routed[l] {
			continue
		}
		ro := route{score: must(4, vk.DeviceLocal), pred: must(4, vk.DeviceLocal), count: must(4, vk.DeviceLocal), idx: must(4, vk.DeviceLocal)}
		if rt := r.w.blocks[l].router; r.routing == mod.RoutingPredictor && rt.predHidden > 0 {
			ro.hidden = must(4*uint64(rt.predHidden), vk.DeviceLocal)
		}
		if al.err == nil {
			al.err = ro.idx.Upload(u32Bytes([]uint32{0}), 0)
		}
		r.routes[l] = ro
	}
	if r.trace != nil {
		r.traceHost = must(12*uint64(len(c.RoutedLayers())), vk.HostVisible)
	}
	if r.ks.prof.Handoff {
		r.hand, r.handHost = must(4*handoffWords(c.NLayer), vk.DeviceLocal), must(4, vk.HostVisible)
	}
	r.allocateChain(al)
	if al.err != nil {
		return fmt.Errorf("the decode step's buffers: %w", al.err)
	}
	return nil
}

// record records the decode step (both recordings) and the logits' fetch.
func (r *Runner) record() error {
	var err error
	f := r.frameOf(stepPass(true))
	if r.step, err = r.recordFrame(f); err != nil {
		return err
	}
	r.stepBlocks = f.blockStats
	if r.stepGreedy, err = r.recordForward(stepPass(false)); err != nil {
		return err
	}
	if err := r.recordChains(); err != nil {
		return err
	}
	r.fetch = r.dev.NewRecorder() // the logits of a prefill's last row, for Feed
	r.fetch.Copy(r.act.logits, r.logitsHost, 0, 0, 4*uint64(r.c.NVocab))
	return r.fetch.Err()
}

// Feed runs tokens after those already fed and returns the logits of the
// last one [nVocab].
//
// Up to Options.PromptSteps tokens run through the recorded decode step,
// one at a time; more go through the batched prefill in chunks of up to
// Options.UBatch (prefill.go). Causal routing decides token by token
// (DESIGN.md §3), so the result does not depend on how the tokens are
// split, up to the kernels' summation orders.
// After an error the sequence is in an unspecified state: Reset it.
func (r *Runner) Feed(tokens []int32) ([]float32, error) {
	if err := r.run(tokens, true); err != nil {
		return nil, err
	}
	if len(tokens) > r.promptSteps { // a prefill: its last row's logits are on the device
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

// DrawsOnDevice says whether FeedDraw draws (the profile's head takes
// argmax_wide, which draws; lavapipe's argmax does not).
func (r *Runner) DrawsOnDevice() bool { return r.draws }

// headArgmax is the variant of the profile's head's argmax.
func (r *Runner) headArgmax() string {
	head := r.ks.prof.Head()
	return head[len(head)-1].Variant
}

// FeedDraw is FeedArgmax with the last token's successor drawn at
// temperature temp (above 0) with the uniform number u in [0, 1) on the
// device: argmax_wide's draw, engine.Sampler's draw in float32 with d's
// filters (top-p, min-p; docs/sampling-cost.md). 4 bytes come back, not
// the logits. Only where DrawsOnDevice.
func (r *Runner) FeedDraw(tokens []int32, d sched.Draw, u float64) (int32, error) {
	if !r.DrawsOnDevice() {
		return 0, fmt.Errorf("vulkan: FeedDraw: the head's %s does not draw", r.headArgmax())
	}
	if err := checkDraw(d, u); err != nil {
		return 0, fmt.Errorf("vulkan: FeedDraw: %w", err)
	}
	return r.feedDraw(tokens, argmaxDraw(d, u))
}

// feedDraw is FeedDraw with the head's parameters made and checked.
func (r *Runner) feedDraw(tokens []int32, ad shaders.ArgmaxDraw) (int32, error) {
	if err := r.drawHost.Upload(shaders.ArgmaxDrawBytes([]shaders.ArgmaxDraw{ad}), 0); err != nil {
		return 0, err
	}
	id, err := r.FeedArgmax(tokens)
	if uerr := r.drawHost.Upload(make([]byte, shaders.ArgmaxDrawBytesPer), 0); err == nil { // back to the argmax, which the chains read too
		err = uerr
	}
	return id, err
}

// checkDraw refuses draw parameters the device's draw does not take: a
// temperature not above 0, u outside [0, 1), top-k below 0, top-p outside
// [0, 1] or min-p outside [0, 1).
func checkDraw(d sched.Draw, u float64) error {
	if !(d.Temp > 0) || !(u >= 0 && u < 1) || d.TopK < 0 || !(d.TopP >= 0 && d.TopP <= 1) || !(d.MinP >= 0 && d.MinP < 1) {
		return fmt.Errorf("temperature %g must be above 0, u %g in [0, 1), top-k %d 0 or more, top-p %g in [0, 1] and min-p %g in [0, 1)", d.Temp, u, d.TopK, d.TopP, d.MinP)
	}
	return nil
}

// argmaxDraw is argmax_wide's parameters for the draw d with u.
func argmaxDraw(d sched.Draw, u float64) shaders.ArgmaxDraw {
	return shaders.DrawAt(d.Temp, u).WithTopK(d.TopK).WithTopP(d.TopP).WithMinP(d.MinP)
}

// run runs tokens: up to Options.PromptSteps through the decode step (the
// last through the one that copies the logits to the host when logits),
// more through the batched prefill.
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
	if len(tokens) > r.promptSteps {
		return r.runPrefill(tokens, headLast, nil)
	}
	for i, t := range tokens {
		if err := r.runStep(t, logits && i == len(tokens)-1); err != nil {
			return err
		}
	}
	return nil
}

// DefaultPromptSteps is the most tokens a Feed runs through the decode
// step, one at a time, rather than the batched prefill, on a runner whose
// prefill cannot run a short chunk as matvecs (vecPrompt), unless
// Options.PromptSteps says otherwise: each step reads the weights once at
// the matvec's rate, while the prefill's matmuls cost about the same for
// 1 to 64 rows. Measured: a 5-token prompt at 7B Q8_0 took 224 matmuls of
// 1.6 ms (362 ms) on an H200, where a decode step took 15 ms (1.1B: 42 ms
// against 3.7); on lavapipe a stories15M matmul pass cost ~200 ms against
// ~15 ms a step (docs/matvec-cost.md, issue 42 item 4). Causal routing
// decides token by token either way (DESIGN.md §3).
const DefaultPromptSteps = 8

// resolvePromptSteps is Options.PromptSteps with its defaults applied, 0
// (the runner's choice, resolved once its prefill is built: vecPrompt)
// left as it is.
func resolvePromptSteps(n int) int {
	if n < 0 {
		return 1
	}
	return n
}

// vecPrompt is the prompt steps of a runner whose Options and knobs leave
// them to it: 1 (every prompt of 2 tokens or more a prefill) where the
// prefill runs a chunk of up to vecRows rows as matvecs, one pass over
// the weights for all its rows (forwardFrame, stepvec.go); else
// DefaultPromptSteps. Measured on lavapipe, a 5-token prompt's first
// token: stories260K 3.5x, tinystories-mod 2.6x, tinystories-dense 4x and
// stories15M 2.9x sooner as one matvec pass than as five decode steps
// (bench/results/lavapipe-short-prompt-2026-11-28.md). On an H200 a
// 1.1B step of 8 sequences (one pass of 8 vectors) took 2.5x a single
// step, so a 7B 5-token prompt is predicted at ~2 steps' time where the
// steps took five (27 ms): unmeasured.
func (r *Runner) vecPrompt() int {
	if r.pf != nil && r.pf.vqkv != nil && r.vecRows() >= 2 {
		return 1
	}
	return DefaultPromptSteps
}

// PromptSteps is the most tokens a Feed runs one at a time through the
// decode step; a longer Feed is a batched prefill.
func (r *Runner) PromptSteps() int { return r.promptSteps }

// promptStepsEnv is the runner's prompt steps: Options.PromptSteps where
// set, else MODRUN_PROMPT_STEPS, else 0, the runner's choice (vecPrompt).
// The variable is a measuring knob, a number of tokens from 1 (a prompt of
// 2 or more is a batched prefill): the GPU bundle's quick mode runs a
// 5-token prompt at 7B with it at 8 beside the default, and `modrun tune`
// tries the other of the runner's choice. Anything else is refused by
// name.
func promptStepsEnv(opt int, k Knobs) (int, error) {
	v := k.get("MODRUN_PROMPT_STEPS")
	if opt != 0 || v == "" {
		return resolvePromptSteps(opt), nil
	}
	return parsePromptSteps(v)
}

// parsePromptSteps is MODRUN_PROMPT_STEPS's value v, not empty.
func parsePromptSteps(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("vulkan: MODRUN_PROMPT_STEPS=%q: want the most prompt tokens run one at a time through the decode step, 1 or more (the default is 1 where a short prompt runs as one matvec pass, else %d)", v, DefaultPromptSteps)
	}
	return n, nil
}

// runStep runs one token through the recorded decode step (the one that
// copies the logits to the host when logits).
func (r *Runner) runStep(token int32, logits bool) error {
	if err := r.tok.Upload(u32Bytes([]uint32{uint32(token)}), 0); err != nil {
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
	if err := r.checkHandoff(); err != nil {
		return fmt.Errorf("vulkan: decode step at position %d: %w", r.pos, err)
	}
	r.addTimings(step, r.pos)
	if err := r.readTrace(r.traceHost, 1, 1); err != nil {
		return fmt.Errorf("vulkan: routing of position %d: %w", r.pos, err)
	}
	r.pos++
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

// StepCounts are the commands of the recorded decode step, replayed once
// per token (issue 42 item 6: each dispatch, and the barrier before it,
// costs a few microseconds on a GPU however little it does).
type StepCounts struct {
	Dispatches int // the whole step: the embedding, every block, the head
	Barriers   int // its pipeline barriers (vk derives one before a command that depends on an earlier one)
	// BlockDispatches and BlockBarriers are each block's, in layer order
	// (a routed block's with its selector and gated residual).
	BlockDispatches, BlockBarriers []int
}

// StepCounts counts the decode step's commands (the recording Feed
// replays, with the logits' copy to the host).
func (r *Runner) StepCounts() StepCounts {
	if r.step == nil {
		return StepCounts{}
	}
	st := r.step.Stats()
	sc := StepCounts{Dispatches: st.Dispatches, Barriers: st.Barriers}
	for _, b := range r.stepBlocks {
		sc.BlockDispatches = append(sc.BlockDispatches, b.Dispatches)
		sc.BlockBarriers = append(sc.BlockBarriers, b.Barriers)
	}
	return sc
}
