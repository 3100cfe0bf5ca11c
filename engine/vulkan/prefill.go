package vulkan

import (
	"fmt"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// The batched prefill (DESIGN.md §6, "Prefill and eval are one batched
// graph"): a Feed of more than one token goes through in chunks of up to
// UBatch tokens, each chunk one submit of the forward recorder's batch
// pass (forward.go) for its length, recorded at its first use. The
// chunk's rows are at positions pos..pos+n-1 (a.pos); a dense layer's
// block appends them all to its cache (rows), a routed layer's its
// selected ones, and attention reads the whole cache in key tiles
// (batch_attention.go: the earlier entries plus the chunk's own, causal by
// original position). The caches and counts are the decode step's, so
// decoding continues after a prefill exactly as after token-by-token
// feeding. In eval mode (eval.go) the chunk is a whole window, with top-k
// routing and no cache.

// DefaultUBatch is the chunk length of a batched prefill when
// Options.UBatch is 0.
const DefaultUBatch = 512

// maxRecordings is how many chunk recordings a runner keeps (each holds a
// command buffer, its descriptor sets and, for a MoD model, its routed
// blocks' dispatch-size table): a chat app feeds turns of every length,
// and without a bound a long session would keep one recording per length
// up to UBatch (hundreds of MB for a 22-block model). The least recently
// used goes first; recording one again costs milliseconds of host time.
// A variable so that tests can make it small.
var maxRecordings = 32

// prefill is the batched prefill's weights view, scratch and recordings.
type prefill struct {
	ub     int
	blocks []batchBlock
	a      batchActs  // [ub] rows; a.pos is the chunk's positions (host-visible)
	tok    *vk.Buffer // [ub] u32 token ids, host-visible
	rows   *vk.Buffer // [1] u32: n, filled by each recording (the dense layers' append count)
	pred   *vk.Buffer // [ub] f32 predictor scores
	psel   *vk.Buffer // [ub] u32 positions of a routed layer's selected rows
	prope  *vk.Buffer // [ub] u32 their compact positions (mod.PositionsCompact), at which RoPE turns them
	// sortKeys are top-k's sort keys in eval mode over more rows than one
	// workgroup sorts (TopkPasses); nil otherwise.
	sortKeys *vk.Buffer
	hidden   *vk.Buffer                 // [ub][predHidden] f32 the predictor's hidden layer (predictor routing)
	trace    *vk.Buffer                 // [nRouted][3][ub]: r f32, p f32, selected u32 of each row (Options.Trace)
	recs     map[prefillKey]*prefillRec // at most maxRecordings
	tick     uint64                     // counts chunk runs, for recs' last use
	output   batchMat                   // the output matrix bound for matmul (every row's logits)
	// narrowed are the blocks' matmul views with a tile fit to a pass of
	// a few rows (a decode step of a few sequences, a GPU's short prompt),
	// by the tile's BM (Runner.narrowBlocks).
	narrowed map[uint32][]batchBlock
	heads    map[rowsHead]headBufs // every row's head (Score, Losses), made at its first use
	// residentBytes are the weights' planes kept on the device
	// (Profile.MatmulDirectResident), 0 without them.
	residentBytes uint64
	// vqkv is a chunk of a few rows' stacked q|k|v when its products run
	// as matvecs (frame.vec: a short prompt); nil where they cannot
	// (vecFits) and in eval mode.
	vqkv *vk.Buffer
	vxq  *vk.Buffer // frame.vxq for such a chunk (vecXQ)
}

// buildPrefill binds the weights for matmul and makes the chunk scratch.
func (r *Runner) buildPrefill(m *mod.Model, ub int) error {
	c := r.c
	if ub <= 0 {
		ub = DefaultUBatch
	}
	ub = min(ub, r.ctx)
	pf := &prefill{ub: ub, recs: map[prefillKey]*prefillRec{}, heads: map[rowsHead]headBufs{}, narrowed: map[uint32][]batchBlock{}}
	ks := r.ks
	al := &allocator{r: r}
	// The split-K scratch first: matRows hands it to every matrix.
	sk, err := r.newSplitK(al.buf)
	if err != nil {
		return err
	}
	if al.err != nil {
		return al.err
	}
	ks.split = sk
	// And the direct matmul's planes, for the block's matrices.
	dm, err := r.newDirectMM(al.buf, ub, [][2]int{{c.NHead * c.HeadDim, c.NEmbd}, {c.NKVHead * c.HeadDim, c.NEmbd},
		{c.NEmbd, c.NHead * c.HeadDim}, {c.NFF, c.NEmbd}, {c.NEmbd, c.NFF}}, max(c.NEmbd, c.NFF, c.NHead*c.HeadDim))
	if err != nil {
		return err
	}
	if al.err != nil {
		return al.err
	}
	ks.direct = dm
	pf.blocks = make([]batchBlock, len(r.w.blocks))
	for l := range r.w.blocks {
		b, mb := &r.w.blocks[l], &m.Weights.Blocks[l]
		eb := &pf.blocks[l]
		qkv, err := stackParts(ks, b.qkv, &mb.Q, &mb.K, &mb.V)
		if err != nil {
			return err
		}
		gu, err := stackParts(ks, b.gateUp, &mb.Gate, &mb.Up)
		if err != nil {
			return err
		}
		eb.q, eb.k, eb.v, eb.gate, eb.up = qkv[0], qkv[1], qkv[2], gu[0], gu[1]
		if eb.o, err = matRows(ks, b.o, 0, b.o.rows); err != nil {
			return err
		}
		if eb.down, err = matRows(ks, b.down, 0, b.down.rows); err != nil {
			return err
		}
	}
	if pf.output, err = matRows(ks, r.w.output, 0, r.w.output.rows); err != nil {
		return err
	}
	if dm != nil && r.ks.prof.MatmulDirectResident {
		if pf.residentBytes, err = r.residentPlanes(pf.blocks); err != nil {
			return err
		}
	}
	f32 := func(n int) uint64 { return 4 * uint64(n) }
	must := al.buf
	dev := vk.DeviceLocal
	pf.a = r.newBatchActs(must, ub)
	a := &pf.a
	a.pos, pf.tok = must(f32(ub), vk.HostVisible), must(f32(ub), vk.HostVisible)
	a.r, a.mask, a.count, a.args = must(f32(ub), dev), must(f32(ub), dev), must(4, dev), must(12, dev)
	a.keys = must(f32(ub), dev) // the selected rows of the chunk (compact_positive's or topk's idx)
	if r.evalMode && ub > shaders.TopkLocal {
		pf.sortKeys = must(8*uint64(shaders.TopkKeys(uint32(ub))), dev) // top-k's multi-pass sort
	}
	pf.rows, pf.pred, pf.psel, pf.prope = must(4, dev), must(f32(ub), dev), must(f32(ub), dev), must(f32(ub), dev)
	if r.routing == mod.RoutingPredictor && c.PredictorHidden > 0 {
		pf.hidden = must(f32(ub*c.PredictorHidden), dev)
	}
	if r.trace != nil {
		pf.trace = must(12*uint64(ub*len(c.RoutedLayers())), vk.HostVisible)
	}
	if !r.evalMode {
		pf.vqkv, pf.vxq = r.vecQKV(must), r.vecXQ(must)
	}
	a.partO, a.partML = r.batchAttentionParts(must, ub, r.ctx)
	if al.err != nil {
		return al.err
	}
	r.pf = pf
	return nil
}

// prefillKey is a chunk recording's length and head.
type prefillKey struct {
	n    int
	head rowsHead
}

// prefillRec is a chunk recording and its last use (prefill.tick).
type prefillRec struct {
	rec  *vk.Recorder
	used uint64
}

// recording is the recording of a chunk of key's shape, made at its first
// use; making one when maxRecordings are kept first drops the least
// recently used (and its dispatch-size table when no other recording of
// its length uses it).
func (r *Runner) recording(key prefillKey) (*vk.Recorder, error) {
	pf := r.pf
	pf.tick++
	if pr, ok := pf.recs[key]; ok {
		pr.used = pf.tick
		return pr.rec, nil
	}
	if len(pf.recs) >= max(1, maxRecordings) {
		r.dropRecording()
	}
	rec, err := r.recordForward(pass{n: key.n, head: key.head})
	if err != nil {
		if rec != nil {
			rec.Close()
		}
		return nil, fmt.Errorf("vulkan: prefill of %d tokens: %w", key.n, err)
	}
	pf.recs[key] = &prefillRec{rec: rec, used: pf.tick}
	return rec, nil
}

// dropRecording frees the least recently used chunk recording. Run waits
// for its submit, so no recording is in flight here.
func (r *Runner) dropRecording() {
	pf := r.pf
	var old prefillKey
	var oldest *prefillRec
	for k, pr := range pf.recs {
		if oldest == nil || pr.used < oldest.used {
			old, oldest = k, pr
		}
	}
	if oldest == nil {
		return
	}
	oldest.rec.Close()
	delete(pf.recs, old)
	for k := range pf.recs {
		if k.n == old.n {
			return // the table serves it too
		}
	}
	for k, t := range r.tables {
		if !k.step && !k.paged && k.n == old.n {
			delete(r.tables, k)
			r.freeBuffer(t)
		}
	}
}

// runPrefill feeds tokens (already checked) in chunks of up to ub, each
// ending with head. For headLogits and headLoss each chunk's rows' logits
// or losses (of the token after each row, the first of the next chunk for
// the last row) are passed to each in turn.
func (r *Runner) runPrefill(tokens []int32, head rowsHead, each func(out []float32) error) error {
	pf := r.pf
	hb := pf.heads[head]
	for len(tokens) > 0 {
		n := min(len(tokens), pf.ub)
		rec, err := r.recording(prefillKey{n, head})
		if err != nil {
			return err
		}
		ids, pos := make([]uint32, n), make([]uint32, n)
		for i, t := range tokens[:n] {
			ids[i], pos[i] = uint32(t), uint32(r.pos+i)
		}
		if err := pf.tok.Upload(u32Bytes(ids), 0); err != nil {
			return err
		}
		if err := pf.a.pos.Upload(u32Bytes(pos), 0); err != nil {
			return err
		}
		if head == headLoss {
			next := int32(0)
			if n < len(tokens) {
				next = tokens[n]
			}
			if err := hb.uploadTargets(tokens[:n], next); err != nil {
				return err
			}
		}
		if err := r.dev.Run(rec); err != nil {
			return fmt.Errorf("vulkan: prefill of %d tokens at position %d: %w", n, r.pos, err)
		}
		r.addTimings(rec, r.pos)
		if err := r.readTrace(pf.trace, pf.ub, n); err != nil {
			return fmt.Errorf("vulkan: routing of positions %d..%d: %w", r.pos, r.pos+n-1, err)
		}
		r.pos += n
		tokens = tokens[n:]
		var out []float32
		switch head {
		case headLogits:
			out, err = downloadF32(hb.host, n*r.c.NVocab)
		case headLoss:
			out, err = downloadF32(hb.loss, n)
		default:
			continue
		}
		if err != nil {
			return err
		}
		if err := each(out); err != nil {
			return err
		}
	}
	return nil
}
