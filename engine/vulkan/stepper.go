package vulkan

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// Stepper runs the scheduler's steps (sched.StepRunner) on the runner's
// device and weights: one forward pass over the rows of many sequences
// (decode rows and prompt chunks), the forward recorder's batch pass
// (forward.go) with a paged KV cache (docs/batching-gpu.md). The keys and
// values of every sequence live in one pool of pages (engine/sched's page
// ids); each row carries its position, its dense table's offset in the
// step's tables and, per routed layer, its table's offset and length
// before the step. A dense layer writes each row's keys and values at its
// position in its own table and attends entries 0..pos of it
// (paged_kv, paged_attention, then attention_merge); a routed layer
// decides per row causally over the whole step (compact_positive_table, as a
// prefill chunk), gathers the selected rows, gives each its entry in its
// sequence's compact table (paged_gather: the table's length plus the
// sequence's selected rows before it in the step), runs the block on them
// by indirect dispatch and scatters back. The step's composition is data
// in host-visible buffers, so a recording serves every step of its row
// count and logits count (at most maxRecordings kept). The head runs on
// the rows that want logits only (gathered), and only theirs come back,
// with every row's routing (the trace: 12 bytes a routed layer and row).
//
// It shares the runner's weights, kernels and matmul views; its scratch,
// pool and recordings are its own, and are freed with the runner. Like
// the runner it is not safe for concurrent use, nor for use at the same
// time as the runner.
type Stepper struct {
	r       *Runner
	nRouted int
	ub      int // rows a step at most
	bt      int // entries a page (0 until Reserve)
	pages   int // pages the pool holds
	seqs    int // rows wanting logits a step at most (the logits buffers)
	words   int // u32 the tables buffer holds

	a                  batchActs
	tok                *vk.Buffer // [ub] u32 host-visible
	pred, hidden       *vk.Buffer // a routed layer's predictor score, its MLP's hidden layer
	psel, prope, trace *vk.Buffer // the selected rows' positions and RoPE's; [nRouted][3][ub] the routing
	pf                 pagedFrame

	recs   map[[4]int]*vk.Recorder // by (rows, rows wanting logits, of those the argmax only, 1 where each row is its sequence's only one)
	err    error                   // a failed CopyPage, reported by the next Step
	out    []float32               // [k][nVocab] the last step's logits
	ids    []int32                 // [g] the last step's argmax ids
	raw    []byte                  // the downloads' bytes
	chain  stepChain               // StepChain's buffers and recordings (stepchain.go)
	phases StepPhases
}

// StepPhases is where the host's time of a stepper's steps went, summed
// over its steps (Stepper.Phases): what a step pays besides the device's
// work, and the device's work as the host waits for it.
type StepPhases struct {
	Steps, Rows int
	Argmax      int           // rows whose argmax alone came back (StepArgmax)
	Chains      int           // submissions of several steps (StepChain; their steps count in Steps)
	Compose     time.Duration // the rows' composition built (positions, tables), recording looked up
	Upload      time.Duration // the composition written to host-visible buffers
	Run         time.Duration // the recording submitted and waited for (the device's work)
	Routes      time.Duration // the routing trace read and decoded
	Logits      time.Duration // the logits (and argmax) read back
}

// Phases is where the steps' host time went since the stepper was made.
func (st *Stepper) Phases() StepPhases { return st.phases }

// pagedFrame is a step's paged state on the device (frame.paged).
type pagedFrame struct {
	k, v      *vk.Buffer // the pool: [pages*bt][kvDim] of the runner's KV type
	tables    *vk.Buffer // host-visible: the step's sequences' block tables, concatenated
	rowSeq    *vk.Buffer // [ub] u32 host-visible: each row's dense table's offset (also its sequence's key)
	rmeta     *vk.Buffer // [ub][nRouted][2] u32 host-visible: each routed table's offset and length before the step
	rows      *vk.Buffer // [1] u32 the step's rows, filled by the recording
	ent, toff *vk.Buffer // [ub] u32 a routed layer's selected rows' entries and tables' offsets
	width     []uint32   // [nLayer] pages per block of layer l's table
	layer     []uint32   // [nLayer] l's index in its table (dense), or among the routed layers
	bt        uint32
	// The head: the rows wanting logits (gathered: the argmax rows first),
	// their logits on the device and the host, the argmax rows' ids.
	lrows, lcount *vk.Buffer // [seqs] u32, [1] u32 host-visible
	logits, host  *vk.Buffer // [seqs][nVocab]
	ids           *vk.Buffer // [seqs] u32 host-visible: argmax of the first nArgmax rows' logits
	nLogits       int        // rows wanting logits in this recording
	nArgmax       int        // of those, the first nArgmax want only their argmax (Row.Argmax)
	output        batchMat   // the output matrix, its matmul's tile fit to nLogits rows (narrow)

	// argmax_wide's scratch for seqs rows (a GPU profile's argmax): each
	// workgroup's winner, and each row's count of workgroups done, zero
	// between dispatches.
	amaxPart, amaxDone *vk.Buffer
	// draws is [seqs] shaders.ArgmaxDraw host-visible: each argmax row's
	// temperature and uniform number (0 and 0: the argmax), written each
	// step (sched.Row.Temp, U).
	draws *vk.Buffer
	// attDone is paged_attend's count of tiles done for each row-head
	// ([ub][nHead] u32, zero between dispatches): a GPU profile's
	// attention merges its tiles in the last one (FuseAttention).
	attDone *vk.Buffer
	// own: every row of the recording is its sequence's only one (each
	// sequence decoding, a chain's steps), so that a row's attention reads
	// no entry another row writes: on a profile with AttendOwn its q|k|v
	// take paged_attend_own (pagedQKVOps).
	own bool
	// vec: the step's products run as matvecs (stepvec.go), whose stacked
	// q|k|v go to qkv first ([vecRows][the stack's rows]); qkv is nil
	// when the weights' layout does not allow it (vecFits).
	vec bool
	qkv *vk.Buffer
	xq  *vk.Buffer // frame.vxq (vecXQ)
}

// Stepper is a step runner on r's device and weights for steps of up to
// Options.UBatch rows (the scheduler's BatchTokens must not pass it:
// MaxRows; stepRows) of which up to seqs want logits (more grow its
// buffers). Reserve makes its page pool before the first step.
func (r *Runner) Stepper(seqs int) (*Stepper, error) {
	if r.evalMode {
		return nil, fmt.Errorf("vulkan: an eval-mode runner has no steps")
	}
	c := r.c
	st := &Stepper{r: r, ub: r.stepRows(seqs), seqs: max(1, seqs), recs: map[[4]int]*vk.Recorder{}}
	pf := &st.pf
	pf.width, pf.layer = make([]uint32, c.NLayer), make([]uint32, c.NLayer)
	nDense := uint32(0)
	for l := range c.NLayer {
		if c.Routed[l] {
			pf.width[l], pf.layer[l] = 1, uint32(st.nRouted)
			st.nRouted++
		} else {
			pf.layer[l] = nDense
			nDense++
		}
	}
	for l := range c.NLayer {
		if !c.Routed[l] {
			pf.width[l] = nDense
		}
	}
	if g := r.attentionGroupRows(uint32(st.ub), uint32(r.ctx)); int(g) < st.ub {
		return nil, fmt.Errorf("vulkan: attention's partial results of a step of %d rows pass a binding's range: lower UBatch", st.ub)
	}
	al := &allocator{r: r}
	must := al.buf
	ub, dev, host := uint64(st.ub), vk.DeviceLocal, vk.HostVisible
	st.a = r.newBatchActs(must, st.ub)
	a := &st.a
	a.pos, st.tok = must(4*ub, host), must(4*ub, host)
	a.r, a.mask, a.count, a.args, a.keys = must(4*ub, dev), must(4*ub, dev), must(4, dev), must(12, dev), must(4*ub, dev)
	st.pred, st.psel, st.prope = must(4*ub, dev), must(4*ub, dev), must(4*ub, dev)
	if r.routing == mod.RoutingPredictor && c.PredictorHidden > 0 {
		st.hidden = must(4*ub*uint64(c.PredictorHidden), dev)
	}
	if st.nRouted > 0 {
		st.trace = must(12*ub*uint64(st.nRouted), host)
	}
	a.partO, a.partML = r.batchAttentionParts(must, st.ub, r.ctx)
	pf.rowSeq, pf.rmeta = must(4*ub, host), must(8*ub*uint64(max(1, st.nRouted)), host)
	pf.rows, pf.ent, pf.toff = must(4, dev), must(4*ub, dev), must(4*ub, dev)
	pf.lrows, pf.lcount = must(4*ub, host), must(4, host)
	pf.qkv, pf.xq = r.vecQKV(must), r.vecXQ(must)
	if r.ks.prof.FuseAttention {
		pf.attDone = must(4*ub*uint64(c.NHead), dev)
		if al.err == nil {
			al.err = pf.attDone.Upload(make([]byte, 4*st.ub*c.NHead), 0) // paged_attend leaves it zero after each dispatch
		}
	}
	if al.err != nil {
		return nil, fmt.Errorf("vulkan: a step's scratch of %d rows: %w", st.ub, al.err)
	}
	if err := st.growLogits(st.seqs); err != nil {
		return nil, err
	}
	r.steppers = append(r.steppers, st)
	return st, nil
}

// stepRows is the most rows a step of up to seqs sequences takes:
// Options.UBatch (0: DefaultUBatch), which a solo prefill's chunks cap at
// the context length (buildPrefill) but a step, whose rows are many
// sequences', caps at seqs contexts only. Capped at one context, 8
// sequences' 32-token prompts took three steps of 96 rows, each sequence
// decoding from its first token while the others' prompts ran in its
// steps (bench --parallel's decode window held them), where the CPU's
// step runner took them in one.
func (r *Runner) stepRows(seqs int) int {
	return max(r.pf.ub, min(cmp.Or(r.ub, DefaultUBatch), max(1, seqs)*r.ctx))
}

// Layout is the model as the scheduler sees it.
func (st *Stepper) Layout() sched.Layout {
	c := st.r.c
	return sched.Layout{DenseLayers: c.NLayer - st.nRouted, RoutedLayers: st.nRouted, ContextLen: st.r.ctx, NVocab: c.NVocab}
}

// MaxRows is the most rows a step takes (Options.UBatch).
func (st *Stepper) MaxRows() int { return st.ub }

// PageBytes is the device memory of one page of blockTokens entries.
func (st *Stepper) PageBytes(blockTokens int) int {
	return 2 * blockTokens * st.r.c.KVDim() * int(st.r.kv.ElementBytes())
}

// Reserve makes the pool hold pages pages of blockTokens entries (the
// scheduler's pool); a pool already as large is kept.
func (st *Stepper) Reserve(pages, blockTokens int) error {
	if pages <= 0 || blockTokens <= 0 {
		return fmt.Errorf("vulkan: a pool of %d pages of %d entries: both must be positive", pages, blockTokens)
	}
	if st.bt != 0 && blockTokens != st.bt {
		return fmt.Errorf("vulkan: pages of %d entries, the stepper's hold %d", blockTokens, st.bt)
	}
	if pages <= st.pages {
		return nil
	}
	size := uint64(pages) * uint64(st.PageBytes(blockTokens)) / 2
	if lim := st.r.ks.prof.MaxStorageBufferRange; lim != 0 && size > lim {
		return fmt.Errorf("vulkan: a pool of %d pages is %d bytes of keys, over the device's binding range %d: lower the KV budget", pages, size, lim)
	}
	al := &allocator{r: st.r}
	k, v := al.buf(size, vk.DeviceLocal), al.buf(size, vk.DeviceLocal)
	if al.err != nil {
		return fmt.Errorf("vulkan: a KV pool of %d pages: %w", pages, al.err)
	}
	st.dropRecordings()
	if st.pf.k != nil {
		st.r.freeBuffer(st.pf.k)
		st.r.freeBuffer(st.pf.v)
	}
	st.pf.k, st.pf.v, st.pages, st.bt, st.pf.bt = k, v, pages, blockTokens, uint32(blockTokens)
	return nil
}

// HeldPages is the pages the pool holds.
func (st *Stepper) HeldPages() int { return st.pages }

// CopyPage copies page src's entries into dst (an error shows at the next
// Step).
func (st *Stepper) CopyPage(dst, src int32) {
	if st.err != nil {
		return
	}
	if int(dst) >= st.pages || int(src) >= st.pages || dst < 0 || src < 0 {
		st.err = fmt.Errorf("vulkan: copy of page %d to %d: the pool holds %d", src, dst, st.pages)
		return
	}
	pb := uint64(st.PageBytes(st.bt)) / 2
	rec := st.r.dev.NewRecorder()
	defer rec.Close()
	rec.Copy(st.pf.k, st.pf.k, uint64(src)*pb, uint64(dst)*pb, pb)
	rec.Copy(st.pf.v, st.pf.v, uint64(src)*pb, uint64(dst)*pb, pb)
	if err := st.r.dev.Run(rec); err != nil {
		st.err = fmt.Errorf("vulkan: copy of page %d to %d: %w", src, dst, err)
	}
}

// growLogits makes the head's buffers hold k rows' logits.
func (st *Stepper) growLogits(k int) error {
	pf := &st.pf
	if pf.logits != nil && k <= st.seqs {
		return nil
	}
	k = max(k, st.seqs)
	al := &allocator{r: st.r}
	vB := 4 * uint64(k) * uint64(st.r.c.NVocab)
	logits, host, ids := al.buf(vB, vk.DeviceLocal), al.buf(vB, vk.HostVisible), al.buf(4*uint64(k), vk.HostVisible)
	amaxPart := al.buf(4*shaders.ArgmaxWidePartWords(uint32(k), uint32(st.r.c.NVocab), shaders.ArgmaxWideSpec), vk.DeviceLocal)
	amaxDone := al.buf(4*uint64(k), vk.DeviceLocal)
	draws := al.buf(shaders.ArgmaxDrawBytesPer*uint64(k), vk.HostVisible)
	if al.err == nil {
		al.err = amaxDone.Upload(make([]byte, 4*k), 0) // argmax_wide leaves it zero after each dispatch
	}
	if al.err != nil {
		return fmt.Errorf("vulkan: the logits of %d rows: %w", k, al.err)
	}
	st.dropRecordings()
	if pf.logits != nil {
		for _, b := range []*vk.Buffer{pf.logits, pf.host, pf.ids, pf.amaxPart, pf.amaxDone, pf.draws} {
			st.r.freeBuffer(b)
		}
	}
	pf.logits, pf.host, pf.ids, pf.amaxPart, pf.amaxDone, pf.draws, st.seqs = logits, host, ids, amaxPart, amaxDone, draws, k
	return nil
}

// growTables makes the tables buffer hold words u32.
func (st *Stepper) growTables(words int) error {
	if st.pf.tables != nil && words <= st.words {
		return nil
	}
	words = max(words, 2*st.words, 256)
	t, err := st.r.buffer(4*uint64(words), vk.HostVisible)
	if err != nil {
		return fmt.Errorf("vulkan: block tables of %d pages: %w", words, err)
	}
	st.dropRecordings()
	if st.pf.tables != nil {
		st.r.freeBuffer(st.pf.tables)
	}
	st.pf.tables, st.words = t, words
	return nil
}

func (st *Stepper) dropRecordings() {
	for k, rec := range st.recs {
		rec.Close()
		delete(st.recs, k)
	}
	for k, rec := range st.chain.recs {
		rec.Close()
		delete(st.chain.recs, k)
	}
}

// recording is the step's recording for n rows of which k want logits,
// the first g of those their argmax only, made at its first use; own:
// each row is its sequence's only one (pagedFrame.own).
func (st *Stepper) recording(n, k, g int, own bool) (*vk.Recorder, error) {
	key := [4]int{n, k, g, 0}
	if own {
		key[3] = 1
	}
	if rec, ok := st.recs[key]; ok {
		return rec, nil
	}
	if len(st.recs) >= max(1, maxRecordings) {
		for old, rec := range st.recs { // any one: a steady load reuses a few
			rec.Close()
			delete(st.recs, old)
			break
		}
	}
	f, err := st.frame(n, k, g, own)
	if err != nil {
		return nil, err
	}
	rec, err := st.r.recordFrame(f)
	if err != nil {
		if rec != nil {
			rec.Close()
		}
		return nil, fmt.Errorf("vulkan: a step of %d rows: %w", n, err)
	}
	st.recs[key] = rec
	return rec, nil
}

// frame is the frame of a step of n rows of which k want logits, the
// first g their argmax only: the batch pass's buffers (the runner's
// matmul views with tiles fit to n rows, the stepper's scratch) and the
// paged state; own: each row is its sequence's only one.
func (st *Stepper) frame(n, k, g int, own bool) (*frame, error) {
	r, a := st.r, &st.a
	pf := st.pf
	pf.nLogits, pf.nArgmax, pf.vec, pf.own = k, g, pf.qkv != nil && n <= r.vecRows(), own
	blocks, err := r.narrowBlocks(n)
	if err != nil {
		return nil, err
	}
	if pf.output, err = r.narrow(r.pf.output, k); err != nil {
		return nil, err
	}
	f := &frame{pass: pass{n: n}, tok: st.tok,
		rows:        blockRows{x: a.x, n: n, maxRows: n, pos: a.pos, ropePos: a.pos, rows: pf.rows, ent: a.pos, toff: pf.rowSeq},
		appendCount: pf.rows, x: a.x, xs: a.xs, xn: a.xn, att: a.att, h: a.h, ob: a.ob,
		q: a.q, qr: a.qr, k: a.k, kr: a.kr, v: a.v, gate: a.gate, up: a.up, partO: a.partO, partML: a.partML,
		trace: st.trace, traceRows: st.ub, paged: &pf, vec: pf.vec, vqkv: pf.qkv, vxq: pf.xq}
	f.layers = make([]layerFrame, len(r.w.blocks))
	for l := range f.layers {
		f.layers[l].w, f.layers[l].mm = &r.w.blocks[l], blocks[l]
		if r.w.blocks[l].router != nil {
			f.layers[l].routed = routedBufs{x: a.x, xs: a.xs, score: a.r, pred: st.pred, hidden: st.hidden, idx: a.keys,
				count: a.count, selected: a.mask, pos: st.psel, ropePos: st.prope, mlpOut: a.ob,
				rowPos: a.pos, args: a.args, ent: pf.ent, toff: pf.toff}
		}
	}
	return f, nil
}

// narrowSpec is the matmul tile for n rows when they are fewer than the
// profile's tile takes (base.BM tokens): BM the power of two at or above
// n, so that a decode step of a few sequences does not compute a whole
// tile of padding rows (64 on the profiles: 64 times the work of one
// row); 64 invocations, each TM tokens of TN rows. Each output sums its
// products in the same order whatever the tile, so the results do not
// change. With along the tile stages W along its rows (MatmulSpec.Along:
// coalesced loads, for GPUs, whose few rows are bound by those loads);
// lavapipe keeps the tiles it was measured with. Under the pipelined tile
// (128 tokens) 33-64 rows take narrowPipe, half its padding. ok is false
// when the base tile fits.
func narrowSpec(n int, base shaders.MatmulSpec, along bool) (spec shaders.MatmulSpec, ok bool) {
	b := uint32(1)
	for b < uint32(n) {
		b *= 2
	}
	if b >= base.BM {
		return base, false
	}
	if b > 32 {
		if base.Pipe && b <= narrowPipe.BM {
			return narrowPipe, true
		}
		return base, false
	}
	tm := min(b, 4)
	return shaders.MatmulSpec{BM: b, BN: 64, BK: 32, TM: tm, TN: b / tm, Along: along}, true
}

// narrowPipe is the pipelined tile at 64 tokens: 128 invocations of 8x4,
// 16.9 KiB of shared memory.
var narrowPipe = shaders.MatmulSpec{BM: 64, BN: 64, BK: 16, TM: 8, TN: 4, Along: true, Pipe: true}

// narrowOn is narrowSpec on the runner's profile: along on GPUs. Under
// the tensor cores 33-64 rows stay on their 64-token tile.
func (r *Runner) narrowOn(n int) (shaders.MatmulSpec, bool) {
	base := r.ks.prof.Matmul()
	if r.ks.prof.MatmulCoop {
		base.Pipe = false
	}
	return narrowSpec(n, base, !r.ks.prof.CPU)
}

// narrow is m with its matmul's tile fit to n rows (narrowSpec). Under
// the tensor-core matmul the narrow tiles are matmul.comp's too: on an
// H200 (BenchmarkMatmulGPU, gpu-results run A, at 195623a) a 16x64 f32
// tile took 5, 16 and 32 rows of a 7B FFN in F16 and Q8_0 at 1.2-1.6x
// the speed of the best tensor-core tile (64x64); in Q4_K the 16x128
// tensor-core tile was 1.6x faster at 5 and 16 rows (not followed: one
// run, and F16 and Q8_0 are the decode-step acceptance's types).
func (r *Runner) narrow(m batchMat, n int) (batchMat, error) {
	spec, ok := r.narrowOn(n)
	if !ok {
		return m, nil
	}
	k, err := r.ks.get(spec.Kernel(m.mm.v.Type), spec.Constants())
	if err != nil {
		return batchMat{}, err
	}
	m.mm = k
	return m, nil
}

// narrowBlocks are the runner's blocks' matmul views for a pass of n rows,
// narrowed (made once per tile: r.pf.narrowed).
func (r *Runner) narrowBlocks(n int) ([]batchBlock, error) {
	spec, ok := r.narrowOn(n)
	if !ok {
		return r.pf.blocks, nil
	}
	if bs, ok := r.pf.narrowed[spec.BM]; ok {
		return bs, nil
	}
	bs := make([]batchBlock, len(r.pf.blocks))
	for l, b := range r.pf.blocks {
		var err error
		nb := &bs[l]
		for _, mm := range []struct {
			dst *batchMat
			src batchMat
		}{{&nb.q, b.q}, {&nb.k, b.k}, {&nb.v, b.v}, {&nb.o, b.o}, {&nb.gate, b.gate}, {&nb.up, b.up}, {&nb.down, b.down}} {
			if *mm.dst, err = r.narrow(mm.src, n); err != nil {
				return nil, err
			}
		}
	}
	r.pf.narrowed[spec.BM] = bs
	return bs, nil
}

// Step runs rows (sched.StepRunner): every row with Logits gives its
// logits.
func (st *Stepper) Step(rows []sched.Row, bt int) ([]float32, [][]mod.Route, error) {
	logits, _, routes, err := st.step(rows, bt, false)
	return logits, routes, err
}

// StepArgmax runs rows (sched.ArgmaxRunner): a row with Argmax gives only
// the argmax of its logits, found on the device (the argmax kernel, which
// also tells a non-finite row: shaders.ArgmaxNonFinite), so that 4 bytes
// of it come back instead of nVocab floats and the host scans nothing;
// the other rows with Logits give their logits.
func (st *Stepper) StepArgmax(rows []sched.Row, bt int) ([]float32, []int32, [][]mod.Route, error) {
	return st.step(rows, bt, true)
}

// DrawsOnDevice says whether an Argmax row with a temperature above 0 is
// drawn on the device (sched.DrawRunner): the head's argmax_wide draws.
func (st *Stepper) DrawsOnDevice() bool { return st.r.DrawsOnDevice() }

// step runs rows, with argmax the rows with Argmax as StepArgmax does.
func (st *Stepper) step(rows []sched.Row, bt int, argmax bool) (logits []float32, ids []int32, routes [][]mod.Route, err error) {
	r, c := st.r, st.r.c
	if st.err != nil {
		err, st.err = st.err, nil
		return nil, nil, nil, err
	}
	switch n := len(rows); {
	case st.bt == 0:
		return nil, nil, nil, fmt.Errorf("vulkan: a step before the pool is made (Stepper.Reserve)")
	case bt != st.bt:
		return nil, nil, nil, fmt.Errorf("vulkan: pages of %d entries, the stepper's hold %d", bt, st.bt)
	case n == 0:
		return nil, nil, nil, fmt.Errorf("vulkan: a step of no rows")
	case n > st.ub:
		return nil, nil, nil, fmt.Errorf("vulkan: a step of %d rows, over the stepper's %d (UBatch)", n, st.ub)
	}
	t0 := time.Now()
	n, nr := len(rows), st.nRouted
	tok, pos := make([]uint32, n), make([]uint32, n)
	var lrows, full []uint32       // lrows: the Argmax rows, then full: the other rows wanting logits
	var draws []shaders.ArgmaxDraw // the Argmax rows' (Temp 0: the argmax)
	for i, row := range rows {
		if row.Token < 0 || int(row.Token) >= c.NVocab || row.Pos < 0 || row.Pos >= r.ctx {
			return nil, nil, nil, fmt.Errorf("vulkan: row %d: token %d at position %d is outside the vocabulary [0, %d) or the context %d", i, row.Token, row.Pos, c.NVocab, r.ctx)
		}
		tok[i], pos[i] = uint32(row.Token), uint32(row.Pos)
		switch {
		case row.Logits && row.Argmax && argmax:
			lrows = append(lrows, uint32(i))
			d := shaders.ArgmaxDraw{}
			if row.Temp > 0 {
				if !st.r.draws {
					return nil, nil, nil, fmt.Errorf("vulkan: row %d: a draw at temperature %g: the head's %s does not draw", i, row.Temp, st.r.headArgmax())
				}
				if err := checkDraw(row.Draw, row.U); err != nil {
					return nil, nil, nil, fmt.Errorf("vulkan: row %d: %w", i, err)
				}
				d = argmaxDraw(row.Draw, row.U)
			}
			draws = append(draws, d)
		case row.Logits:
			full = append(full, uint32(i))
		}
	}
	seq, rmeta, words, err := st.tables(rows)
	if err != nil {
		return nil, nil, nil, err
	}
	g := len(lrows)
	lrows = append(lrows, full...)
	k := len(lrows)
	if err := st.growLogits(k); err != nil {
		return nil, nil, nil, err
	}
	if err := st.growTables(len(words)); err != nil {
		return nil, nil, nil, err
	}
	if len(draws) > 0 {
		if err := st.pf.draws.Upload(shaders.ArgmaxDrawBytes(draws), 0); err != nil {
			return nil, nil, nil, fmt.Errorf("vulkan: a step's draws: %w", err)
		}
	}
	rec, err := st.recording(n, k, g, ownRows(rows))
	if err != nil {
		return nil, nil, nil, err
	}
	pf := &st.pf
	t1 := time.Now()
	for _, up := range []struct {
		b *vk.Buffer
		x []uint32
	}{{st.tok, tok}, {st.a.pos, pos}, {pf.rowSeq, seq}, {pf.rmeta, rmeta}, {pf.tables, words}, {pf.lrows, lrows}, {pf.lcount, []uint32{uint32(k)}}} {
		if len(up.x) == 0 {
			continue
		}
		if err := up.b.Upload(u32Bytes(up.x), 0); err != nil {
			return nil, nil, nil, fmt.Errorf("vulkan: a step's composition: %w", err)
		}
	}
	t2 := time.Now()
	if err := r.dev.Run(rec); err != nil {
		return nil, nil, nil, fmt.Errorf("vulkan: a step of %d rows: %w", n, err)
	}
	r.addTimings(rec, -1) // rows of many sequences: no one start
	t3 := time.Now()
	if nr > 0 {
		if routes, err = st.routes(rows); err != nil {
			return nil, nil, nil, err
		}
	}
	t4 := time.Now()
	ph := &st.phases
	ph.Steps, ph.Rows, ph.Argmax = ph.Steps+1, ph.Rows+n, ph.Argmax+g
	ph.Compose += t1.Sub(t0)
	ph.Upload += t2.Sub(t1)
	ph.Run += t3.Sub(t2)
	ph.Routes += t4.Sub(t3)
	if g > 0 {
		st.raw = growBytes(st.raw, 4*g)
		if err := pf.ids.Download(st.raw, 0); err != nil {
			return nil, nil, nil, fmt.Errorf("vulkan: a step's argmax: %w", err)
		}
		st.ids = st.ids[:0]
		for i := range g {
			id := int32(binary.LittleEndian.Uint32(st.raw[4*i:]))
			if uint32(id) == shaders.ArgmaxNonFinite {
				id = sched.ArgmaxNonFinite
			}
			st.ids = append(st.ids, id)
		}
		ids = st.ids
	}
	if k > g {
		st.out = grow32(st.out, (k-g)*c.NVocab)
		if st.raw, err = downloadInto(pf.host, st.out, st.raw); err != nil {
			return nil, nil, nil, fmt.Errorf("vulkan: a step's logits: %w", err)
		}
		logits = st.out
	}
	ph.Logits += time.Since(t4)
	return logits, ids, routes, nil
}

// ownRows says whether each of rows is its sequence's only one.
func ownRows(rows []sched.Row) bool {
	seen := make(map[*sched.Seq]bool, len(rows))
	for _, row := range rows {
		if seen[row.Seq] {
			return false
		}
		seen[row.Seq] = true
	}
	return true
}

// tables is a step's composition of its rows' tables: each row's dense
// table's offset in words (seq), each routed table's offset and length
// before the step (rmeta, [rows][nRouted][2]), and words, every table's
// pages, a sequence's once (its rows are consecutive). It refuses a page
// outside the pool, and a sequence whose dense table has no page for its
// first row's position.
func (st *Stepper) tables(rows []sched.Row) (seq, rmeta, words []uint32, err error) {
	n, nr, bt := len(rows), st.nRouted, st.bt
	seq, rmeta = make([]uint32, n), make([]uint32, 2*n*max(1, nr))
	table := func(t *sched.Table) (uint32, error) {
		off := uint32(len(words))
		for _, pg := range t.Pages {
			if pg < 0 || int(pg) >= st.pages {
				return 0, fmt.Errorf("vulkan: page %d of a table is outside the pool's %d", pg, st.pages)
			}
			words = append(words, uint32(pg))
		}
		return off, nil
	}
	for i, row := range rows {
		if i > 0 && row.Seq == rows[i-1].Seq {
			seq[i] = seq[i-1]
			copy(rmeta[2*i*nr:2*(i+1)*nr], rmeta[2*(i-1)*nr:2*i*nr])
			continue
		}
		if (row.Pos/bt+1)*row.Seq.Dense.Width > len(row.Seq.Dense.Pages) {
			return nil, nil, nil, fmt.Errorf("vulkan: row %d: position %d has no page in its table", i, row.Pos)
		}
		if seq[i], err = table(&row.Seq.Dense); err != nil {
			return nil, nil, nil, err
		}
		for j := range nr {
			if rmeta[2*(i*nr+j)], err = table(&row.Seq.Routed[j]); err != nil {
				return nil, nil, nil, err
			}
			rmeta[2*(i*nr+j)+1] = uint32(row.Seq.Routed[j].Len)
		}
	}
	return seq, rmeta, words, nil
}

// routes reads every row's routing from the trace ([nRouted][3][ub]: r,
// p, selected) and advances each sequence's routed tables by the rows
// they took.
func (st *Stepper) routes(rows []sched.Row) ([][]mod.Route, error) {
	st.raw = growBytes(st.raw, 12*st.ub*st.nRouted)
	if err := st.trace.Download(st.raw, 0); err != nil {
		return nil, fmt.Errorf("vulkan: a step's routing: %w", err)
	}
	return st.decodeRoutes(st.raw, rows), nil
}

// pagedGatherOps are a step's routed layer l's paged_gather: x[idx] ->
// xs, and the selected rows' positions, RoPE's, entries and tables'
// offsets, in one dispatch.
func (r *Runner) pagedGatherOps(p *frame, l int, u routedBufs) ([]op, error) {
	nu := uint32(p.n)
	gather, err := r.ks.get("paged_gather", nil)
	if err != nil {
		return nil, err
	}
	pf := p.paged
	push := shaders.PagedPush{N: nu, NRouted: uint32(len(r.c.RoutedLayers())), Routed: pf.layer[l], Stride: uint32(r.c.NEmbd)}
	if r.c.Positions == mod.PositionsCompact {
		push.Compact = 1
	}
	return []op{newOp(gather, push, shaders.Groups(nu), rd(u.idx, 0, 0), rd(u.count, 0, 0), rd(u.rowPos, 0, 0), rd(pf.rowSeq, 0, 0),
		rd(pf.rmeta, 0, 0), wr(u.pos, 0, 0), wr(u.ropePos, 0, 0), wr(u.ent, 0, 0), wr(u.toff, 0, 0), rd(u.x, 0, 0), wr(u.xs, 0, 0))}, nil
}

// pagedAttentionOps are a step's layer l's keys and values written into
// their pages (paged_kv) and attention over each row's own table
// (paged_attention in key tiles, attention_merge), of br's rows, whose
// q, k are rotated (p.qr, p.kr).
func (r *Runner) pagedAttentionOps(p *frame, l int, br blockRows) ([]op, error) {
	pf := p.paged
	kvK, err := r.ks.get(shaders.PagedKVName(r.kv), nil)
	if err != nil {
		return nil, err
	}
	push := r.pagedPush(p, l, br)
	att, err := r.pagedAttend(p, br, push)
	if err != nil {
		return nil, err
	}
	return append([]op{newOp(kvK, push, shaders.Groups(push.N), rd(p.kr, 0, 0), rd(p.v, 0, 0), rd(br.rows, 0, 0), rd(br.ent, 0, 0), rd(br.toff, 0, 0),
		rd(pf.tables, 0, 0), wr(pf.k, 0, 0), wr(pf.v, 0, 0))}, att...), nil
}

// stackedQKV says whether the pass's layer l leaves its q|k|v as the one
// stacked matvec's rows (p.vqkv: a step's few rows on the matvec path),
// for paged_qkv to split, turn and write in one dispatch (pagedQKVOps)
// where paged_split, two ropes and paged_kv took four.
func (r *Runner) stackedQKV(p *frame, l int) bool {
	return p.vec && p.paged != nil && len(p.layers[l].w.qkv.mvs) == 1
}

// pagedQKVOps are pagedAttentionOps from the stacked q|k|v (stackedQKV):
// paged_qkv (RoPE of q into p.qr, of k into its page, v into its page),
// then the attention and merge; where every row is its sequence's only
// one (pf.own) on a profile with AttendOwn, paged_attend_own: the two in
// one dispatch.
func (r *Runner) pagedQKVOps(p *frame, l int, br blockRows) ([]op, error) {
	pf, s := p.paged, p.layers[l].w.qkv
	push := r.pagedPush(p, l, br)
	push.Stride, push.KOff, push.VOff = s.mvs[0].rows, uint32(s.part[1]/4), uint32(s.part[2]/4)
	if pf.own && pf.attDone != nil && r.ks.prof.AttendOwn { // rows each their sequence's only one: one dispatch
		k, err := r.ks.get(shaders.PagedAttendOwnName(r.kv), shaders.PagedAttentionSpec(uint32(r.c.HeadDim)))
		if err != nil {
			return nil, err
		}
		return []op{newOp(k, push, shaders.PagedAttentionGroups(push.N, push.NHead, push.Splits), rd(p.vqkv, 0, 0), rw(pf.k, 0, 0), rw(pf.v, 0, 0),
			rd(br.rows, 0, 0), rd(br.ent, 0, 0), rd(br.toff, 0, 0), rd(pf.tables, 0, 0), rw(p.partO, 0, 0), rw(p.partML, 0, 0),
			rw(pf.attDone, 0, 0), wr(p.att, 0, 0), rd(br.ropePos, 0, 0), rd(r.w.ropeFreq, 0, 0))}, nil
	}
	k, err := r.ks.get(shaders.PagedQKVName(r.kv), nil)
	if err != nil {
		return nil, err
	}
	att, err := r.pagedAttend(p, br, push)
	if err != nil {
		return nil, err
	}
	return append([]op{newOp(k, push, shaders.Groups(push.N), rd(p.vqkv, 0, 0), rd(br.ropePos, 0, 0), rd(r.w.ropeFreq, 0, 0),
		rd(br.rows, 0, 0), rd(br.ent, 0, 0), rd(br.toff, 0, 0), rd(pf.tables, 0, 0), wr(p.qr, 0, 0), wr(pf.k, 0, 0), wr(pf.v, 0, 0))}, att...), nil
}

// pagedPush is the paged kernels' push constants for layer l's table and
// br's rows.
func (r *Runner) pagedPush(p *frame, l int, br blockRows) shaders.PagedPush {
	c, pf := r.c, p.paged
	splitLen := r.attentionSplitLen()
	push := shaders.PagedPush{N: uint32(br.n), KVDim: uint32(c.KVDim()), Width: pf.width[l], Layer: pf.layer[l], BlockTokens: pf.bt,
		NHead: uint32(c.NHead), NKVHead: uint32(c.NKVHead), HeadDim: uint32(c.HeadDim), Scale: float32(1 / math.Sqrt(float64(c.HeadDim))),
		Splits: shaders.AttentionSplits(uint32(r.ctx), splitLen), SplitLen: splitLen}
	if c.Routed[l] {
		push.Layer = 0 // a routed layer's own table
	}
	return push
}

// pagedAttend is attention over each of br's rows' own table
// (paged_attention in key tiles of p.qr, then attention_merge into p.att;
// on a profile that fuses attention, GPUs', paged_attend: the tiles and
// their merge by the last one in one dispatch).
func (r *Runner) pagedAttend(p *frame, br blockRows, push shaders.PagedPush) ([]op, error) {
	pf := p.paged
	nu, nh := push.N, push.NHead
	spec := shaders.PagedAttentionSpec(uint32(r.c.HeadDim))
	if pf.attDone != nil {
		k, err := r.ks.get(shaders.PagedAttendName(r.kv), spec)
		if err != nil {
			return nil, err
		}
		return []op{newOp(k, push, shaders.PagedAttentionGroups(nu, nh, push.Splits), rd(p.qr, 0, 0), rd(pf.k, 0, 0), rd(pf.v, 0, 0),
			rd(br.rows, 0, 0), rd(br.ent, 0, 0), rd(br.toff, 0, 0), rd(pf.tables, 0, 0), rw(p.partO, 0, 0), rw(p.partML, 0, 0),
			rw(pf.attDone, 0, 0), wr(p.att, 0, 0))}, nil
	}
	attK, err := r.ks.get(shaders.PagedAttentionName(r.kv), spec)
	if err != nil {
		return nil, err
	}
	merge, err := r.ks.get("attention_merge", nil)
	if err != nil {
		return nil, err
	}
	return []op{
		newOp(attK, push, shaders.PagedAttentionGroups(nu, nh, push.Splits), rd(p.qr, 0, 0), rd(pf.k, 0, 0), rd(pf.v, 0, 0),
			rd(br.rows, 0, 0), rd(br.ent, 0, 0), rd(br.toff, 0, 0), rd(pf.tables, 0, 0), wr(p.partO, 0, 0), wr(p.partML, 0, 0)),
		newOp(merge, shaders.AttentionSplitPush{N: nu, NHead: nh, HeadDim: push.HeadDim, Splits: push.Splits},
			shaders.AttentionMergeGroups(nu, nh), rd(p.partO, 0, 0), rd(p.partML, 0, 0), wr(p.att, 0, 0)),
	}, nil
}

// recordPagedHead records a step's head: the rows wanting logits gathered
// (lrows), the final norm, the output matmul, then the argmax of the first
// nArgmax rows (into ids) and the others' logits copied to the host.
func (r *Runner) recordPagedHead(rec *vk.Recorder, p *frame) error {
	pf, c := p.paged, r.c
	k := pf.nLogits
	if k == 0 {
		return nil
	}
	// The rows wanting logits, gathered: the argmax rows, then the others,
	// each in step order; where that is every row in order (all want
	// logits, and all or none only their argmax: every decode step of a
	// chain, and most of the server's), they are x as it is.
	in := p.x
	if g := pf.nArgmax; k != p.n || (g != 0 && g != k) {
		gather, err := r.ks.get("gather", nil)
		if err != nil {
			return err
		}
		r.dispatch(rec, newOp(gather, shaders.GatherPush{NEmbd: uint32(c.NEmbd)}, shaders.Groups(uint32(k)),
			rd(pf.lrows, 0, 0), rd(pf.lcount, 0, 0), rd(p.x, 0, 0), wr(p.xs, 0, 0)))
		in = p.xs
	}
	// The final norm, then the output matrix: a few rows as one matvec
	// pass (stepvec.go), the norm in it where the profile fuses norms (as
	// the decode step's head: a dispatch and a barrier fewer a step).
	vec := pf.qkv != nil && k <= r.vecRows()
	if vec && r.ks.prof.FuseNorm {
		ops, err := r.vecOp(p, r.w.output, shaders.FuseNorm, in, pf.logits, r.w.outputNorm, k, k)
		if err != nil {
			return err
		}
		r.dispatchAll(rec, ops)
	} else {
		norm, err := r.rmsnormOp(in, r.w.outputNorm, p.xn, k)
		if err != nil {
			return err
		}
		r.dispatch(rec, norm)
		if vec {
			ops, err := r.vecOp(p, r.w.output, shaders.FuseNone, p.xn, pf.logits, nil, k, k)
			if err != nil {
				return err
			}
			r.dispatchAll(rec, ops)
		} else {
			for _, o := range pf.output.opsInPieces(r.ks.prof.MaxStorageBufferRange, r.dev.Info().Limits.MinStorageBufferOffsetAlignment, p.xn, pf.logits, k) {
				r.dispatch(rec, o)
			}
		}
	}
	vB, g := 4*uint64(c.NVocab), pf.nArgmax
	if g > 0 {
		head := r.ks.prof.Head()
		o, err := r.argmaxOp(head[len(head)-1], pf.logits, pf.ids, g, pf.amaxPart, pf.amaxDone, rd(pf.draws, 0, shaders.ArgmaxDrawBytesPer*uint64(g)))
		if err != nil {
			return err
		}
		r.dispatch(rec, o)
	}
	if k > g {
		rec.Copy(pf.logits, pf.host, uint64(g)*vB, 0, uint64(k-g)*vB)
		r.timestamp(rec, "copy")
	}
	return nil
}

func grow32(x []float32, n int) []float32 {
	if cap(x) < n {
		return make([]float32, n)
	}
	return x[:n]
}

// downloadInto reads len(x) floats of b into x, through raw (grown when
// short, and returned).
func downloadInto(b *vk.Buffer, x []float32, raw []byte) ([]byte, error) {
	raw = growBytes(raw, 4*len(x))
	if err := b.Download(raw, 0); err != nil {
		return raw, err
	}
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return raw, nil
}

func growBytes(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
