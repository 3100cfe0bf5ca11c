package vulkan

import (
	"encoding/binary"
	"fmt"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// Eval mode on the GPU (DESIGN.md §3): a whole sequence of S tokens at once,
// teacher-forced, with top-k routing per sequence (k = Config.TopKCount(S),
// the k largest router scores, ties to the lower position, taken in
// ascending order), as mod.State.Forward with mod.RoutingTopK. The logits
// of every token come back: what perplexity scoring needs.
//
// Since k is known when recording, every buffer is sized by S or k and no
// dispatch is indirect: the step of one S is recorded once, at its first
// Eval, and cached by S (Evaluator.recs); later sequences of that length
// replay it with new token ids.
//
//	embed                                         tok -> x [S]
//	dense layer: the block on x, S rows at positions 0..S-1
//	routed layer: router_score x -> r; topk r -> idx [k] (ascending: the
//	              selected positions); gather x[idx] -> xs; the block on xs,
//	              k rows at positions idx (attention among them only);
//	              mod_residual x[idx] += g(r) (xs - x[idx]) (or the file's
//	              gate target: g·xs, or xs + g·mlp added onto x; RoPE at
//	              compact positions 0..k-1 when the file says so)
//	rmsnorm, matmul output                        x -> logits [S][nVocab]
//	their copy to the host (Eval), or nll        -> the loss of each row's
//	                                             next token [S] (Losses)
//
// The block on n rows: rmsnorm, matmul q, k, v, rope at each row's
// position, attention over the n rows (causal by position), matmul o, add,
// rmsnorm, matmul gate and up, swiglu, matmul down, add.

// Evaluator runs eval-mode forward passes of one model on a Vulkan device.
// Like the device, it is not safe for concurrent use. Close it before the
// device.
type Evaluator struct {
	w      *Runner // the weights, kernels and every buffer (no decode step)
	blocks []evalBlock
	output evalMat
	ctx    int
	recs   map[evalKey]*evalRec
	last   *evalRec // the last sequence run, for Selected
}

// evalKey is a recording's sequence length S and head (headLogits: Eval,
// headLoss: Losses).
type evalKey struct {
	s    int
	head rowsHead
}

// evalMat is a weight matrix, or one matrix of a stack, bound for matmul:
// its rows lie in one or more buffers (the mat's pieces), a dispatch each.
type evalMat struct {
	mm         *kernel
	rows, cols uint32 // outputs per token, columns
	parts      []matPart
}

// matPart is the rows of an evalMat in one buffer: rows of them from row
// wRow0 of the buffer's wRows, whose outputs go to columns yOff.. of y.
type matPart struct {
	buf                      *vk.Buffer
	wRow0, wRows, rows, yOff uint32
}

type evalBlock struct {
	q, k, v, o, gate, up, down evalMat
}

// evalRec is the recorded step for sequences of s tokens, with its buffers.
type evalRec struct {
	s, k int
	rec  *vk.Recorder
	tok  *vk.Buffer   // [S] u32, host-visible
	hb   headBufs     // the logits, and their host copy or the losses
	idx  []*vk.Buffer // [nLayer]: routed layers' selected rows [S] u32 (first k); nil for dense
}

// evalActs are the scratch buffers of one recording, sized by S.
type evalActs struct {
	x, xs, xn, ob        *vk.Buffer // [S][nEmbd]
	q, qr, att           *vk.Buffer // [S][qDim]
	k, kr, v             *vk.Buffer // [S][kvDim]
	gate, up, h          *vk.Buffer // [S][nFF]
	pos                  *vk.Buffer // [S] u32 0..S-1
	r, mask, count, args *vk.Buffer // [S] f32, [S] u32, [1] u32, [3] u32
	keys                 *vk.Buffer // topk's sort keys (S > TopkLocal)
	partO, partML        *vk.Buffer // attention's key-tile partial results (batchAttentionOps)
}

// NewEvaluator uploads m's weights to dev for eval mode. opts.ContextLen caps
// S (0: the model's context length); with opts.Profile every dispatch is
// timed (Profile). m may be closed afterwards.
func NewEvaluator(dev *vk.Device, m *mod.Model, opts Options) (*Evaluator, error) {
	c := m.Config
	if c.HeadDim > int(shaders.AttentionSpec[1]) {
		return nil, fmt.Errorf("vulkan: %s: head dimension %d is over the attention kernel's %d", m.Path, c.HeadDim, shaders.AttentionSpec[1])
	}
	w := &Runner{dev: dev, c: c, routing: mod.RoutingTopK, ctx: c.ContextLen, ks: newKernels(dev, opts.DeviceProfile), prof: map[string]*ProfileEntry{},
		profile: opts.Profile && dev.Info().Timestamps()}
	if opts.ContextLen > 0 && opts.ContextLen < w.ctx {
		w.ctx = opts.ContextLen
	}
	e := &Evaluator{w: w, ctx: w.ctx, recs: map[evalKey]*evalRec{}}
	if err := checkFit(dev, m, 0, 0, ""); err != nil { // eval mode has no KV cache
		e.Close()
		return nil, err
	}
	if err := e.build(m); err != nil {
		e.Close()
		return nil, fmt.Errorf("vulkan: %s: %w", m.Path, err)
	}
	if fb, err := w.ks.selfCheck(opts.SelfCheckLog); err != nil || fb != nil {
		e.Close()
		if err != nil {
			return nil, fmt.Errorf("vulkan: %s: %w", m.Path, err)
		}
		opts.DeviceProfile = fb // a kernel failed: build again with its safe variant
		return NewEvaluator(dev, m, opts)
	}
	return e, nil
}

func (e *Evaluator) build(m *mod.Model) error {
	w := e.w
	if err := w.uploadWeights(m.Weights, w.c); err != nil {
		return err
	}
	w.nWeightBufs = len(w.bufs)
	var err error
	if e.output, err = e.matOf(w.w.output); err != nil {
		return err
	}
	e.blocks = make([]evalBlock, len(w.w.blocks))
	for l := range w.w.blocks {
		b, mb := &w.w.blocks[l], &m.Weights.Blocks[l]
		eb := &e.blocks[l]
		qkv, err := e.stackParts(b.qkv, &mb.Q, &mb.K, &mb.V)
		if err != nil {
			return err
		}
		gu, err := e.stackParts(b.gateUp, &mb.Gate, &mb.Up)
		if err != nil {
			return err
		}
		eb.q, eb.k, eb.v, eb.gate, eb.up = qkv[0], qkv[1], qkv[2], gu[0], gu[1]
		if eb.o, err = e.matOf(b.o); err != nil {
			return err
		}
		if eb.down, err = e.matOf(b.down); err != nil {
			return err
		}
	}
	return nil
}

// matmulKernel is matmul for weights of type typ, with the device's tiles.
func (e *Evaluator) matmulKernel(typ string) (*kernel, error) {
	return matmulKernel(e.w.ks, typ)
}

func matmulKernel(ks *kernels, typ string) (*kernel, error) {
	return ks.get(shaders.MatmulName(typ), ks.prof.Matmul().Constants())
}

func (e *Evaluator) matOf(m mat) (evalMat, error) {
	return matRows(e.w.ks, m, 0, m.rows)
}

// matRows is rows [r0, r1) of m bound for matmul: the part of each of m's
// pieces that holds some of them.
func matRows(ks *kernels, m mat, r0, r1 uint32) (evalMat, error) {
	mm, err := matmulKernel(ks, m.typ)
	if err != nil {
		return evalMat{}, err
	}
	em := evalMat{mm: mm, rows: r1 - r0, cols: m.cols}
	for _, pc := range m.pieces {
		a, b := max(r0, pc.row0), min(r1, pc.row0+pc.rows)
		if a < b {
			em.parts = append(em.parts, matPart{buf: pc.buf, wRow0: a - pc.row0, wRows: pc.rows, rows: b - a, yOff: a - r0})
		}
	}
	return em, nil
}

func (e *Evaluator) stackParts(s stack, ms ...*mod.Mat) ([]evalMat, error) {
	return stackParts(e.w.ks, s, ms...)
}

// stackParts is each matrix of a stack as its own evalMat (matmul writes
// [n][rows] per matrix): in a stack uploaded as one matrix, its rows of it.
func stackParts(ks *kernels, s stack, ms ...*mod.Mat) ([]evalMat, error) {
	out := make([]evalMat, len(ms))
	var err error
	if len(s.mvs) == len(ms) {
		for i, m := range s.mvs {
			if out[i], err = matRows(ks, m, 0, m.rows); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	for i, m := range ms {
		r0 := uint32(s.part[i] / 4) // the rows before matrix i
		if out[i], err = matRows(ks, s.mvs[0], r0, r0+uint32(m.Rows)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ops is Y = X W^T for n rows of x: y is [n][m.rows].
func (m evalMat) ops(x, y *vk.Buffer, n int) []op {
	var ops []op
	for _, pt := range m.parts {
		ops = append(ops, newOp(m.mm, shaders.MatmulPush{Rows: pt.rows, Cols: m.cols, N: uint32(n), WRow0: pt.wRow0, WRows: pt.wRows,
			LdY: m.rows, YOff: pt.yOff},
			shaders.MatmulGroups(pt.rows, uint32(n), shaders.MatmulSpec{BM: m.mm.spec[1], BN: m.mm.spec[2], BK: m.mm.spec[3], TM: m.mm.spec[4], TN: m.mm.spec[5]}),
			rd(pt.buf, 0, 0), rd(x, 0, 0), wr(y, 0, 0)))
	}
	return ops
}

// opsInPieces is ops over n rows of x, cut into pieces of rows whose
// bindings of x and y stay within maxRange, the profile's
// maxStorageBufferRange (the logits of a long window pass it: 4096 tokens
// of a 32,000 vocabulary are 524 MB; 256 rows of Llama 3's 128,256 are 131
// MB). x and y are bound for the n rows only, never whole: a buffer sized
// for a longer chunk may itself be over the range. A piece is a multiple of
// the rows whose x and y both fill whole multiples of align
// (minStorageBufferOffsetAlignment), so each piece's offsets are aligned.
func (m evalMat) opsInPieces(maxRange, align uint64, x, y *vk.Buffer, n int) []op {
	xRow, yRow := 4*uint64(m.cols), 4*uint64(m.rows)
	step := lcm(align/gcd(align, xRow), align/gcd(align, yRow))
	per := int(maxRange / max(xRow, yRow) / step * step)
	if maxRange == 0 || per <= 0 || per > n {
		per = n // under the range or, when not even step rows fit, one piece that the recorder refuses by name
	}
	var ops []op
	for i := 0; i < n; i += per {
		k := min(per, n-i)
		for _, o := range m.ops(x, y, k) {
			o.binds[1] = rd(x, uint64(i)*xRow, uint64(k)*xRow)
			o.binds[2] = wr(y, uint64(i)*yRow, uint64(k)*yRow)
			ops = append(ops, o)
		}
	}
	return ops
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func lcm(a, b uint64) uint64 { return a / gcd(a, b) * b }

// Profile is the GPU time per kernel summed over every sequence run since
// NewEvaluator, largest first (Options.Profile; nil without it).
func (e *Evaluator) Profile() []ProfileEntry { return e.w.Profile() }

// ContextLen is the longest sequence Eval takes.
func (e *Evaluator) ContextLen() int { return e.ctx }

// NVocab is the number of logits per token.
func (e *Evaluator) NVocab() int { return e.w.c.NVocab }

// Score is Eval: with ContextLen and NVocab, the evaluator is an
// engine.Scorer in eval mode.
func (e *Evaluator) Score(tokens []int32) ([]float32, error) { return e.Eval(tokens) }

// Eval runs tokens as one sequence from position 0 and returns the logits
// of every token, [S][nVocab].
func (e *Evaluator) Eval(tokens []int32) ([]float32, error) {
	er, err := e.run(tokens, headLogits)
	if err != nil {
		return nil, err
	}
	return downloadF32(er.hb.host, len(tokens)*e.w.c.NVocab)
}

// Losses runs tokens as one sequence from position 0 and returns, for each
// token after the first, its negative log-likelihood given those before it
// ([S-1] nats: -log softmax(logits of token i)[tokens[i+1]]), computed on
// the device: S floats come back instead of S·nVocab logits. With it the
// evaluator is an engine.LossScorer.
func (e *Evaluator) Losses(tokens []int32) ([]float32, error) {
	er, err := e.run(tokens, headLoss)
	if err != nil {
		return nil, err
	}
	out, err := downloadF32(er.hb.loss, len(tokens))
	if err != nil {
		return nil, err
	}
	return out[:len(tokens)-1], nil
}

// run runs tokens through the recording of their length with head.
func (e *Evaluator) run(tokens []int32, head rowsHead) (*evalRec, error) {
	c := e.w.c
	s := len(tokens)
	if s == 0 {
		return nil, fmt.Errorf("vulkan: no tokens to run")
	}
	if s > e.ctx {
		return nil, fmt.Errorf("vulkan: %d tokens pass the context length %d", s, e.ctx)
	}
	ids := make([]uint32, s)
	for i, t := range tokens {
		if t < 0 || int(t) >= c.NVocab {
			return nil, fmt.Errorf("vulkan: token %d at index %d is outside the vocabulary [0, %d)", t, i, c.NVocab)
		}
		ids[i] = uint32(t)
	}
	key := evalKey{s, head}
	er, ok := e.recs[key]
	if !ok {
		var err error
		if er, err = e.record(s, head); err != nil {
			if er != nil && er.rec != nil {
				er.rec.Close()
			}
			return nil, fmt.Errorf("vulkan: eval of %d tokens: %w", s, err)
		}
		e.recs[key] = er
	}
	e.last = nil
	if err := er.tok.Upload(u32Bytes(ids), 0); err != nil {
		return nil, err
	}
	if head == headLoss {
		if err := er.hb.uploadTargets(tokens, 0); err != nil {
			return nil, err
		}
	}
	if err := e.w.dev.Run(er.rec); err != nil {
		return nil, fmt.Errorf("vulkan: eval of %d tokens: %w", s, err)
	}
	e.w.addTimings(er.rec)
	e.last = er
	return er, nil
}

// Selected is, per layer, the positions the last Eval's sequence routed
// through that layer, ascending (read from the GPU); nil for a dense layer.
func (e *Evaluator) Selected() ([][]int, error) {
	if e.last == nil {
		return nil, fmt.Errorf("vulkan: no sequence evaluated")
	}
	out := make([][]int, len(e.last.idx))
	for l, b := range e.last.idx {
		if b == nil {
			continue
		}
		raw := make([]byte, 4*e.last.k)
		if err := b.Download(raw, 0); err != nil {
			return nil, err
		}
		out[l] = make([]int, e.last.k)
		for j := range out[l] {
			out[l][j] = int(binary.LittleEndian.Uint32(raw[4*j:]))
		}
	}
	return out, nil
}

// Recordings is how many sequence lengths have a recorded step.
func (e *Evaluator) Recordings() int { return len(e.recs) }

// record records the step for sequences of s tokens, ending with head.
func (e *Evaluator) record(s int, head rowsHead) (*evalRec, error) {
	w := e.w
	c := w.c
	f32 := func(n int) uint64 { return 4 * uint64(n) }
	al := &allocator{r: w}
	must := al.buf
	dev := vk.DeviceLocal
	er := &evalRec{s: s, k: c.TopKCount(s), idx: make([]*vk.Buffer, c.NLayer)}
	er.tok = must(f32(s), vk.HostVisible)
	a := w.newBatchActs(must, s)
	a.pos, a.r, a.mask = must(f32(s), dev), must(f32(s), dev), must(f32(s), dev)
	a.count, a.args = must(4, dev), must(12, dev)
	a.partO, a.partML = w.batchAttentionParts(must, s, s)
	if s > shaders.TopkLocal {
		a.keys = must(8*uint64(shaders.TopkKeys(uint32(s))), dev)
	}
	for l := range w.w.blocks {
		if w.w.blocks[l].router != nil {
			er.idx[l] = must(f32(s), dev)
		}
	}
	if al.err != nil {
		return nil, al.err
	}
	var err error
	if er.hb, err = w.newHeadBufs(head, s); err != nil {
		return nil, err
	}
	iota := make([]uint32, s)
	for i := range iota {
		iota[i] = uint32(i)
	}
	if err := a.pos.Upload(u32Bytes(iota), 0); err != nil {
		return nil, err
	}

	rec := w.dev.NewRecorder()
	er.rec = rec
	embed, err := w.ks.get(w.w.tokenEmbd.embedKernel(), nil)
	if err != nil {
		return er, err
	}
	for _, o := range w.w.tokenEmbd.embedOps(embed, er.tok, a.x, s) {
		w.dispatch(rec, o)
	}
	for l := range w.w.blocks {
		if w.w.blocks[l].router != nil {
			err = e.recordRouted(rec, er, &a, l)
		} else {
			err = e.recordBlock(rec, &a, l, a.x, s, a.pos, true)
		}
		if err != nil {
			return er, fmt.Errorf("layer %d: %w", l, err)
		}
	}
	if err := w.recordRowsHead(rec, head, e.output, a.x, a.xn, s, er.hb); err != nil {
		return er, err
	}
	return er, rec.Err()
}

// recordRouted records routed layer l on the whole sequence: top-k by
// router score, the block on the k selected rows, the gated residual.
func (e *Evaluator) recordRouted(rec *vk.Recorder, er *evalRec, a *evalActs, l int) error {
	w := e.w
	c := w.c
	rt := w.w.blocks[l].router
	s, k := uint32(er.s), uint32(er.k)
	d := uint32(c.NEmbd)
	idx := er.idx[l]
	if k == 0 {
		return nil // a floor(c·S) of 0 (mod.RoundingFloor): no token goes through
	}
	var kerr error
	get := func(name string) *kernel {
		kk, err := w.ks.get(name, nil)
		if err != nil && kerr == nil {
			kerr = err
		}
		return kk
	}
	hasBias := uint32(0)
	if rt.hasBias {
		hasBias = 1
	}
	sd := w.ks.scoreDevice()
	plan := shaders.PlanScore(sd, s, 1, d, !sd.CPU)
	score, err := w.ks.get(plan.Variant, plan.Spec)
	if err != nil {
		return err
	}
	var ops []op
	ops = append(ops, newOp(score, shaders.RouterPush{N: s, Rows: 1, Cols: d, HasBias: hasBias}, plan.Groups,
		rd(rt.w, 0, 0), rd(rt.bias, 0, 0), rd(a.x, 0, 0), wr(a.r, 0, 0)))
	for _, pass := range shaders.TopkPasses(s, k) {
		var binds []vk.Bind
		pass.Push.Cols = d // the kernel reading r poisons x's row of a non-finite one (mod.PoisonRows)
		switch pass.Variant {
		case "topk":
			binds = []vk.Bind{rd(a.r, 0, 0), wr(a.mask, 0, 0), wr(idx, 0, 0), rw(a.x, 0, 0)}
		case "topk_sort":
			binds = []vk.Bind{rd(a.r, 0, 0), wr(a.keys, 0, 0), rw(a.x, 0, 0)}
		case "topk_merge_global", "topk_merge_local":
			binds = []vk.Bind{rw(a.keys, 0, 0)}
		case "topk_select":
			binds = []vk.Bind{rd(a.keys, 0, 0), wr(a.mask, 0, 0)}
		}
		ops = append(ops, newOp(get(pass.Variant), pass.Push, pass.Groups, binds...))
	}
	if s > shaders.TopkLocal { // the multi-pass plan leaves a mask: compact it
		ops = append(ops, newOp(get("compact_mask"), shaders.CompactPush{N: s, RowsPerGroup: shaders.RoutingRowsPerGroup}, [3]uint32{1, 1, 1},
			rd(a.mask, 0, 0), wr(idx, 0, 0), wr(a.count, 0, 0), wr(a.args, 0, 0)))
	}
	gather := newOp(get("gather"), shaders.GatherPush{NEmbd: d}, shaders.Groups(k),
		rd(idx, 0, 0), rd(a.count, 0, 0), rd(a.x, 0, 0), wr(a.xs, 0, 0))
	if kerr != nil {
		return kerr
	}
	for _, o := range ops {
		w.dispatch(rec, o)
	}
	if s <= shaders.TopkLocal {
		rec.Fill(a.count, 0, 4, k) // gather's count; compact_mask writes it otherwise
	}
	w.dispatch(rec, gather)
	// idx holds the selected rows, ascending: in eval they are the original
	// positions; compact ones (mod.PositionsCompact) are 0..k-1, a.pos's first k.
	pos := idx
	if c.Positions == mod.PositionsCompact {
		pos = a.pos
	}
	// With the gate on the MLP, the block stops before its MLP residual
	// add: xs holds h = x + attn and a.ob the MLP output, for mod_residual.
	mlpGate := c.GateTarget == mod.GateTargetMLP
	if err := e.recordBlock(rec, a, l, a.xs, int(k), pos, !mlpGate); err != nil {
		return err
	}
	res, err := w.ks.get(shaders.ModResidualVariant(c.Gate, c.GateTarget), nil)
	if err != nil {
		return err
	}
	binds := []vk.Bind{rw(a.x, 0, 0), rd(a.xs, 0, 0), rd(idx, 0, 0), rd(a.r, 0, 0)}
	if mlpGate {
		binds = append(binds, rd(a.ob, 0, 0))
	}
	w.dispatch(rec, newOp(res, shaders.ModResidualPush{Cols: d, N: s, K: k}, shaders.Groups(k), binds...))
	return nil
}

// recordBlock records Llama block l on the first n rows of xb, in place, at
// the positions in pos [n] u32; attention runs among those n rows. Without
// mlpAdd it stops before the MLP's residual add (xb = h, a.ob = the MLP's
// output).
func (e *Evaluator) recordBlock(rec *vk.Recorder, a *evalActs, l int, xb *vk.Buffer, n int, pos *vk.Buffer, mlpAdd bool) error {
	nu := uint32(n)
	ops, err := e.w.batchBlockOps(l, &e.blocks[l], a, xb, n, pos, pos, nil, mlpAdd, attentionArgs{n: nu, entries: nu, kv: shaders.KVF32,
		q: a.qr, k: a.kr, v: a.v, kPos: pos, qPos: pos, partO: a.partO, partML: a.partML, out: a.att})
	if err != nil {
		return err
	}
	for _, o := range ops {
		e.w.dispatch(rec, o)
	}
	return nil
}

// batchBlockOps are the dispatches of Llama block l (eb: its matrices bound
// for matmul) on the first n rows of xb, in place, at the positions in pos
// [n] u32 (RoPE at ropePos: pos, or compact positions), with scratch a:
// rmsnorm, matmul q, k, v, rope, then kv (a
// generate-mode cache's append, or nothing), attention att (its q, out and
// partials are a's), matmul o, add, rmsnorm, matmul gate and up, swiglu,
// matmul down, add (left out without mlpAdd: the MoD Llama 2 gate scales
// the MLP output first). Eval windows and prefill chunks share it.
func (r *Runner) batchBlockOps(l int, eb *evalBlock, a *evalActs, xb *vk.Buffer, n int, pos, ropePos *vk.Buffer, kv []op, mlpAdd bool, att attentionArgs) ([]op, error) {
	c := r.c
	b := &r.w.blocks[l]
	nu, d := uint32(n), uint32(c.NEmbd)
	norm, err := r.ks.row("rmsnorm", c.NEmbd)
	if err != nil {
		return nil, err
	}
	var kern [3]*kernel
	for i, name := range []string{"rope", "add", "swiglu"} {
		if kern[i], err = r.ks.get(name, nil); err != nil {
			return nil, err
		}
	}
	rope, add, swiglu := kern[0], kern[1], kern[2]
	normOp := func(wt *vk.Buffer) op {
		return newOp(norm, shaders.RMSNormPush{Cols: d, N: nu, Eps: c.RMSEps}, shaders.RowGroups(nu, norm.spec),
			rd(xb, 0, 0), rd(wt, 0, 0), wr(a.xn, 0, 0))
	}
	addOp := newOp(add, shaders.AddPush{N: nu * d}, shaders.Groups((nu*d+255)/256), rd(xb, 0, 0), rd(a.ob, 0, 0), wr(xb, 0, 0))
	ropeOp := func(x, out *vk.Buffer, heads int) op {
		return newOp(rope, shaders.RopePush{HeadDim: uint32(c.HeadDim), NHead: uint32(heads), N: nu}, shaders.Groups(nu),
			rd(x, 0, 0), rd(ropePos, 0, 0), rd(r.w.ropeFreq, 0, 0), wr(out, 0, 0))
	}
	attOps, err := r.batchAttentionOps(att)
	if err != nil {
		return nil, err
	}
	ops := []op{normOp(b.attnNorm)}
	ops = append(ops, eb.q.ops(a.xn, a.q, n)...)
	ops = append(ops, eb.k.ops(a.xn, a.k, n)...)
	ops = append(ops, eb.v.ops(a.xn, a.v, n)...)
	ops = append(ops, ropeOp(a.q, a.qr, c.NHead), ropeOp(a.k, a.kr, c.NKVHead))
	ops = append(ops, kv...)
	ops = append(ops, attOps...)
	ops = append(ops, eb.o.ops(a.att, a.ob, n)...)
	ops = append(ops, addOp, normOp(b.ffnNorm))
	ops = append(ops, eb.gate.ops(a.xn, a.gate, n)...)
	ops = append(ops, eb.up.ops(a.xn, a.up, n)...)
	ops = append(ops, newOp(swiglu, shaders.SwiGLUPush{N: nu * uint32(c.NFF)}, shaders.ElementGroups(nu*uint32(c.NFF)),
		rd(a.gate, 0, 0), rd(a.up, 0, 0), wr(a.h, 0, 0)))
	ops = append(ops, eb.down.ops(a.h, a.ob, n)...)
	if mlpAdd {
		ops = append(ops, addOp)
	}
	return ops, nil
}

// newBatchActs allocates, through must, the per-row scratch of a batch of
// up to rows rows (the block's activations); the routing and output
// buffers are the caller's.
func (r *Runner) newBatchActs(must func(uint64, vk.BufferKind) *vk.Buffer, rows int) evalActs {
	c := r.c
	f32 := func(n int) uint64 { return 4 * uint64(rows) * uint64(n) }
	dev := vk.DeviceLocal
	kvd, qd := c.KVDim(), c.NHead*c.HeadDim
	var a evalActs
	a.x, a.xs, a.xn, a.ob = must(f32(c.NEmbd), dev), must(f32(c.NEmbd), dev), must(f32(c.NEmbd), dev), must(f32(c.NEmbd), dev)
	a.q, a.qr, a.att = must(f32(qd), dev), must(f32(qd), dev), must(f32(qd), dev)
	a.k, a.kr, a.v = must(f32(kvd), dev), must(f32(kvd), dev), must(f32(kvd), dev)
	a.gate, a.up, a.h = must(f32(c.NFF), dev), must(f32(c.NFF), dev), must(f32(c.NFF), dev)
	return a
}

// Close waits for the device and frees every GPU object the evaluator made.
func (e *Evaluator) Close() {
	if e.w == nil || e.w.dev == nil {
		return
	}
	_ = e.w.dev.WaitIdle()
	for _, er := range e.recs {
		er.rec.Close()
	}
	e.recs, e.last = nil, nil
	e.w.Close()
}
