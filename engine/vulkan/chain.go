package vulkan

import (
	"fmt"
	"strconv"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// The greedy chain (issue 42 item 6): n decode steps in one submission,
// each step's token the argmax of the step before, copied on the device
// from where the head's argmax writes it (bestHost) to where the next
// embedding reads its token (tok). A greedy stream then waits for the host
// once every n tokens instead of once a token: the host's share of a token
// (the submission, the fence's wake-up, the generation loop's turn, the
// uploads and downloads) is paid once for the n, and the GPU runs the
// steps back to back. The steps are the decode step's own recording
// (recordFrameTo), so a chained token is the token an unchained step gives,
// bit for bit.
//
// What the chain does not know is when the sequence ends: a stop token, a
// stop string or a client that goes away ends it after tokens the chain
// already ran. Those tokens are dropped again by Truncate, which the caller
// (engine.RunnerStepper) calls when the sequence does not go on as the
// chain guessed: every layer's cache count is copied to the host before the
// chain's first step and after each, so the runner can go back to any
// position the chains passed (the last snapshotsKept of them). A routed
// layer's count is the one state a position leaves that the host cannot
// work out (how many of the tokens the layer took); the entries past a
// count are never read, and the next token overwrites them.

// ChainMost is the most decode steps one chain runs (MODRUN_CHAIN).
const ChainMost = 16

// DefaultChain is how many decode steps a greedy chain runs unless
// MODRUN_CHAIN says otherwise. See chainEnv.
const DefaultChain = 4

// chainState is the greedy chain's part of a Runner.
type chainState struct {
	most int // the most steps a chain runs: MODRUN_CHAIN (1: no chain)
	// Buffers, host-visible, [most] of each: the positions of the steps
	// (written by the host), each step's argmax, each step's copy of the
	// hand-off's stall flag, each step's routing trace (Options.Trace),
	// and the caches' counts before the first step and after each
	// ([most+1][nLayer]).
	pos, best, hand, trace, counts *vk.Buffer
	// draws holds each step's draw parameters (shaders.ArgmaxDraw), a
	// slot of drawStride bytes a step (storage buffers bind at aligned
	// offsets): zeros for a greedy chain, a temperature and uniform number
	// for a sampled one (FeedDrawChain). drawn says the slots are not all
	// zero.
	draws      *vk.Buffer
	drawStride uint64
	drawn      bool
	recs       map[int]*vk.Recorder // by length (chainLengths), recorded with the decode step
	// snapStart is the position of snap[0], and snap[i] the counts of
	// every layer's cache after snapStart+i tokens: what Truncate can go
	// back to (nil: nothing).
	snapStart int
	snap      [][]uint32
}

// chainEnv is the most steps a chain runs: MODRUN_CHAIN where set (k's or
// the environment's), else DefaultChain; 1 under Options.Profile (the
// profile times the decode step's own recording, token by token).
func chainEnv(k Knobs, profile bool) (int, error) {
	n := DefaultChain
	if v := k.get("MODRUN_CHAIN"); v != "" {
		var err error
		if n, err = parseChain(v); err != nil {
			return 0, err
		}
	}
	if profile {
		n = 1
	}
	return n, nil
}

// parseChain is MODRUN_CHAIN's value v, not empty.
func parseChain(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > ChainMost {
		return 0, fmt.Errorf("vulkan: MODRUN_CHAIN=%q: want the most greedy decode steps run in one submission, 1 (none chained) to %d (the default is %d)", v, ChainMost, DefaultChain)
	}
	return n, nil
}

// allocateChain makes the chain's buffers (allocateStep).
func (r *Runner) allocateChain(al *allocator) {
	ch := &r.chain
	if ch.most < 2 {
		return
	}
	n := uint64(ch.most)
	ch.pos, ch.best = al.buf(4*n, vk.HostVisible), al.buf(4*n, vk.HostVisible)
	ch.counts = al.buf(4*(n+1)*uint64(r.c.NLayer), vk.HostVisible)
	if r.traceHost != nil {
		ch.trace = al.buf(n*r.traceHost.Size(), vk.HostVisible)
	}
	if r.handHost != nil {
		ch.hand = al.buf(4*n, vk.HostVisible)
	}
	ch.drawStride = shaders.ArgmaxDrawBytesPer
	if a := r.dev.Info().Limits.MinStorageBufferOffsetAlignment; a > ch.drawStride {
		ch.drawStride = a
	}
	ch.draws = al.buf(n*ch.drawStride, vk.HostVisible)
	if al.err == nil {
		al.err = ch.draws.Upload(make([]byte, n*ch.drawStride), 0) // greedy
	}
	ch.recs = map[int]*vk.Recorder{}
}

// ChainSteps is the most decode steps FeedArgmaxChain runs in one
// submission (1: it runs FeedArgmax).
func (r *Runner) ChainSteps() int { return max(1, r.chain.most) }

// chainLengths are the chains a runner records, longest first: most, and
// each power of two under it from 2. A chain of n steps runs the longest
// that is at most n (recording every length would cost most²/2 decode
// steps' recordings at load; these cost under 2·most, and the sequence's
// last few tokens, which MaxTokens cuts short, take at most log2(most)
// submissions more).
func chainLengths(most int) []int {
	if most < 2 {
		return nil
	}
	out := []int{most}
	p := 1
	for p*2 < most {
		p *= 2
	}
	for ; p >= 2; p /= 2 {
		out = append(out, p)
	}
	return out
}

// recordChains records the chains of chainLengths (record).
func (r *Runner) recordChains() error {
	for _, n := range chainLengths(r.chain.most) {
		rec, err := r.recordChain(n)
		if err != nil {
			return err
		}
		r.chain.recs[n] = rec
	}
	return nil
}

// recordChain records a chain of n steps: before the first step and after
// each, the caches' counts copied out; before each step its position
// copied in (and, but for the first, its token from the step before's
// argmax); after each, its argmax, trace and stall flag copied out.
func (r *Runner) recordChain(n int) (*vk.Recorder, error) {
	ch := &r.chain
	rec := r.dev.NewRecorder()
	nl := 4 * uint64(r.c.NLayer)
	rec.Copy(r.counts, ch.counts, 0, 0, nl)
	for i := range uint64(n) {
		if i > 0 {
			rec.Copy(r.bestHost, r.tok, 0, 0, 4)
		}
		rec.Copy(ch.pos, r.tokPos, 4*i, 0, 4)
		f := r.frameOf(stepPass(false))
		f.draw = rd(ch.draws, ch.drawStride*i, shaders.ArgmaxDrawBytesPer)
		if err := r.recordFrameTo(rec, f); err != nil {
			rec.Close()
			return nil, fmt.Errorf("vulkan: recording a chain of %d decode steps: %w", n, err)
		}
		rec.Copy(r.bestHost, ch.best, 0, 4*i, 4)
		rec.Copy(r.counts, ch.counts, 0, nl*(i+1), nl)
		if ch.trace != nil {
			tb := r.traceHost.Size()
			rec.Copy(r.traceHost, ch.trace, 0, tb*i, tb)
		}
		if ch.hand != nil {
			rec.Copy(r.handHost, ch.hand, 0, 4*i, 4)
		}
	}
	if err := rec.Err(); err != nil {
		rec.Close()
		return nil, fmt.Errorf("vulkan: recording a chain of %d decode steps: %w", n, err)
	}
	return rec, nil
}

// FeedDrawChain is FeedArgmaxChain with each token drawn as d says with
// the uniform numbers us, one a step (FeedDraw's draw: ids[i] with us[i];
// len(us) >= n): a plain sampled sequence's next tokens, the numbers its
// sampler will take for them (engine.Sampler.Peek).
func (r *Runner) FeedDrawChain(token int32, n int, d sched.Draw, us []float64) ([]int32, error) {
	if !r.DrawsOnDevice() {
		return nil, fmt.Errorf("vulkan: FeedDrawChain: the head's %s does not draw", r.headArgmax())
	}
	if len(us) < n {
		return nil, fmt.Errorf("vulkan: a chain of %d draws with %d uniform numbers", n, len(us))
	}
	draws := make([]shaders.ArgmaxDraw, n)
	for i := range draws {
		if err := checkDraw(d, us[i]); err != nil {
			return nil, fmt.Errorf("vulkan: FeedDrawChain: %w", err)
		}
		draws[i] = argmaxDraw(d, us[i])
	}
	return r.runChain(token, n, draws)
}

// FeedArgmaxChain runs token, then k-1 tokens more, each the argmax of the
// logits before it, in one submission, k the longest chain recorded that
// is at most n (chainLengths): it returns the k argmaxes (ids[i] follows
// the i-th token fed: token, then ids[0], ...), and the runner holds k more
// tokens. Truncate drops those the caller does not keep. The tokens are
// those k FeedArgmax calls give. A step whose logits hold a NaN or an
// infinity ends the chain there: at the first step it is FeedArgmax's
// error; later, the ids before it come back and the runner holds the
// tokens they follow (the next call meets the error).
// n is 1 to ChainSteps.
func (r *Runner) FeedArgmaxChain(token int32, n int) ([]int32, error) {
	return r.runChain(token, n, nil)
}

// runChain runs a chain of up to n steps from token, step i drawing with
// draws[i] (nil: every step's argmax).
func (r *Runner) runChain(token int32, n int, draws []shaders.ArgmaxDraw) ([]int32, error) {
	if n < 1 || n > r.ChainSteps() {
		return nil, fmt.Errorf("vulkan: a chain of %d decode steps: want 1 to %d (MODRUN_CHAIN)", n, r.ChainSteps())
	}
	for _, k := range chainLengths(r.chain.most) {
		if k <= n {
			n = k
			break
		}
	}
	if r.chain.recs[n] == nil {
		var id int32
		var err error
		if draws == nil {
			id, err = r.FeedArgmax([]int32{token})
		} else {
			id, err = r.feedDraw([]int32{token}, draws[0]) // FeedDrawChain checked it
		}
		if err != nil {
			return nil, err
		}
		return []int32{id}, nil
	}
	if r.resetErr != nil {
		return nil, fmt.Errorf("vulkan: Reset: %w", r.resetErr)
	}
	if err := r.check([]int32{token}); err != nil {
		return nil, err
	}
	if r.pos+n > r.ctx {
		return nil, fmt.Errorf("vulkan: a chain of %d tokens after %d would pass the context length %d", n, r.pos, r.ctx)
	}
	rec, ch, start := r.chain.recs[n], &r.chain, r.pos
	pos := make([]uint32, n)
	for i := range pos {
		pos[i] = uint32(start + i)
	}
	if err := r.tok.Upload(u32Bytes([]uint32{uint32(token)}), 0); err != nil {
		return nil, err
	}
	if err := ch.pos.Upload(u32Bytes(pos), 0); err != nil {
		return nil, err
	}
	if draws != nil || ch.drawn {
		slots := make([]byte, uint64(r.chain.most)*ch.drawStride)
		for i, d := range draws[:min(n, len(draws))] {
			copy(slots[uint64(i)*ch.drawStride:], shaders.ArgmaxDrawBytes([]shaders.ArgmaxDraw{d}))
		}
		if err := ch.draws.Upload(slots, 0); err != nil {
			return nil, err
		}
		ch.drawn = draws != nil
	}
	if r.trace != nil {
		r.trace = r.trace[:0]
	}
	if err := r.dev.Run(rec); err != nil {
		return nil, fmt.Errorf("vulkan: %d chained decode steps from position %d: %w", n, start, err)
	}
	if ch.hand != nil {
		flags, err := downloadU32(ch.hand, n)
		if err != nil {
			return nil, err
		}
		for i, f := range flags {
			if f != 0 {
				return nil, fmt.Errorf("vulkan: decode step at position %d: %w", start+i, r.stallError())
			}
		}
	}
	best, err := downloadU32(ch.best, n)
	if err != nil {
		return nil, err
	}
	counts, err := downloadU32(ch.counts, (n+1)*r.c.NLayer)
	if err != nil {
		return nil, err
	}
	r.keepSnapshots(start, counts, n+1)
	if ch.trace != nil {
		raw := make([]byte, ch.trace.Size())
		if err := ch.trace.Download(raw, 0); err != nil {
			return nil, fmt.Errorf("vulkan: routing of positions %d to %d: %w", start, start+n-1, err)
		}
		tb := int(r.traceHost.Size())
		for i := range n {
			r.appendTrace(raw[i*tb:(i+1)*tb], 1, 1)
		}
	}
	r.pos = start + n
	ids := make([]int32, n)
	for i, b := range best {
		if b != shaders.ArgmaxNonFinite {
			ids[i] = int32(b)
			continue
		}
		// Step i's logits are not finite: the steps after it ran on no
		// token. Keep the tokens up to step i's (FeedArgmax's state after
		// its error), or those whose argmax is known.
		keep := max(i, 1)
		if err := r.Truncate(start + keep); err != nil {
			return nil, err
		}
		if r.trace != nil {
			r.trace = r.trace[:keep]
		}
		if i == 0 {
			return nil, fmt.Errorf("vulkan: %w", mod.NonFinite(start))
		}
		return ids[:i], nil
	}
	return ids, nil
}

// keepSnapshots records the caches' counts a chain copied out: m
// snapshots of every layer's from position start, joined to those kept
// before when they meet (a chain right after another), the last
// snapshotsKept of them.
func (r *Runner) keepSnapshots(start int, counts []uint32, m int) {
	ch, nl := &r.chain, r.c.NLayer
	if ch.snap == nil || ch.snapStart+len(ch.snap)-1 != start {
		ch.snap, ch.snapStart = nil, start
	} else {
		ch.snap = ch.snap[:len(ch.snap)-1] // the same counts as counts' first
	}
	for i := range m {
		ch.snap = append(ch.snap, counts[i*nl:(i+1)*nl])
	}
	if drop := len(ch.snap) - snapshotsKept; drop > 0 {
		ch.snap, ch.snapStart = append([][]uint32(nil), ch.snap[drop:]...), ch.snapStart+drop
	}
}

// snapshotsKept bounds the positions a routed model's runner can
// Truncate back to (a long greedy generation's chains join): a sequence
// goes another way than a chain guessed within the last chain, and a
// continuation that shares less of the held tokens runs them again from a
// Reset.
const snapshotsKept = 4 * ChainMost

// Truncate drops the tokens fed after the first p: the runner holds p
// tokens, and the next Feed runs at position p. Every layer's cache count
// goes back to what it was after p tokens, which the runner knows for a
// dense model (p), and for a routed model back to the start of the greedy
// chains run since the last Feed of more than one token, Reset or
// Truncate before them (their counts were copied out); past that it
// refuses, and the caller runs the tokens again from a Reset.
func (r *Runner) Truncate(p int) error {
	if r.resetErr != nil {
		return fmt.Errorf("vulkan: Reset: %w", r.resetErr)
	}
	if p < 0 || p > r.pos {
		return fmt.Errorf("vulkan: cannot truncate to %d tokens: the runner holds %d", p, r.pos)
	}
	if p == r.pos {
		return nil
	}
	if r.evalMode {
		return fmt.Errorf("vulkan: an eval-mode runner keeps no cache to truncate")
	}
	ch := &r.chain
	counts := make([]uint32, r.c.NLayer)
	switch {
	case ch.snap != nil && p >= ch.snapStart && p < ch.snapStart+len(ch.snap):
		copy(counts, ch.snap[p-ch.snapStart])
		ch.snap = ch.snap[:p-ch.snapStart+1]
	case len(r.c.RoutedLayers()) == 0:
		for l := range counts {
			counts[l] = uint32(p)
		}
		ch.snap = nil
	default:
		return fmt.Errorf("vulkan: cannot truncate to %d tokens: a routed layer's cache count is known only back to position %d (the greedy chain's first)", p, ch.snapStart)
	}
	if err := r.counts.Upload(u32Bytes(counts), 0); err != nil {
		return err
	}
	r.pos = p
	return nil
}

func downloadU32(b *vk.Buffer, n int) ([]uint32, error) { return downloadWords[uint32](b, n) }
