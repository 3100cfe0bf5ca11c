// Package cpu runs a mod model fast on the CPU: the same semantics as the
// reference forward pass of package mod (which its tests check it
// against), at the speed of the machine. Where the speed comes from:
//   - every core, through one persistent pool of workers that split a
//     matrix's rows (pool.go);
//   - activations quantized to 8-bit blocks of 32 once per product, dotted
//     in integers with Q8_0 and Q4_0 weights (kernels.go) and with Q4_1,
//     Q5_0 and Q5_1 in the file's own blocks (legacy.go); for the K-quants
//     to blocks of 256 (as ggml's Q8_K), dotted with the file's own blocks
//     (kquant.go, klow_*.s), so those weights stay the file's size; F16
//     and F32 weights dot in float32, and BF16 is decoded a row at a time;
//   - AVX2 and AVX-512 VNNI kernels chosen at run time (kernels_avx2_amd64.s,
//     kernels_vnni_amd64.s, kquant_*, klow_*, legacy_*), with portable Go
//     ones everywhere else;
//   - a prompt runs as one batch per chunk: weight rows are dotted with a
//     tile of the chunk's rows while they sit in cache (4 rows by 4 tokens
//     in VNNI for Q8_0, and for Q4_0 and the K-quants unpacked to int8; 3 rows by 4 tokens
//     for float matrices), and attention is batched over the chunk;
//   - the softmax and SwiGLU exponentiate 8 lanes at a time (EXP8);
//   - a routed block gathers the tokens it selected and runs on them alone:
//     a skipped token costs its router score and nothing else.
//   - with Options.KVType KVF16, keys and values are kept as halves
//     (kvcache.go): half the bytes attention reads per token, widened by
//     F16C loads inside the float kernels (kvcache_amd64.s).
//
// Quantizing the activations moves the logits slightly away from the
// reference's (which dots in float32): see the tests for the measured size.
package cpu

import (
	"fmt"
	"math"

	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
)

// Options configure New.
type Options struct {
	// ContextLen caps the sequence; 0 (or more than the model's) means the
	// model's context length.
	ContextLen int
	// UBatch is the longest chunk a prompt runs in; 0 means DefaultUBatch.
	UBatch int
	// KVType is the KV cache's element type: KVF32 ("" too), or KVF16,
	// half the memory per token and half the bytes attention reads per
	// decoded token, each key and value rounded to a half when written.
	KVType string
}

// DefaultUBatch is the longest chunk of a prompt when Options.UBatch is 0,
// as on Vulkan (the command line's --ubatch default); the products tile
// the chunk's rows (tokenTile) so that any chunk stays in the caches.
const DefaultUBatch = 512

// QuantizedRelTol bounds how far the logits of a model with quantized
// weights move from the reference's, relative to the largest |logit|:
// quantizing activations to 8 bits per block of 32 (256 for the K-quants)
// moves each element by up to half a step of max|x|/127 (weights are
// dotted as the file holds them, not rounded again). Measured on synthetic
// shapes (TestRunnerMatchesReference, TestKMatrix and TestLegacyMatrix log
// it): up to 0.32% (Q8_0), 0.38% (Q4_0), 0.31% (Q4_1, Q5_0, Q5_1), 0.28%
// (the K-quants and the Q4_K_M, Q5_K_M, Q2_K and Q3_K_M mixes); the bound
// leaves 2.5x room for other seeds and prompts. F32 and F16 weights dot float
// activations: float32 rounding only.
const QuantizedRelTol = 1e-2

// QuantizedActivations says whether some product quantizes its
// activations (a matrix of a quantized type), so that logits may differ
// from the reference's by up to QuantizedRelTol.
func (r *Runner) QuantizedActivations() bool {
	if r.w.output.quantized() {
		return true
	}
	for _, b := range r.w.blocks {
		for _, m := range []*matrix{b.q, b.k, b.v, b.o, b.gate, b.up, b.down} {
			if m.quantized() {
				return true
			}
		}
	}
	return false
}

// Runner runs one sequence of a model on the CPU. It is not safe for
// concurrent use; several runners may share the machine (and its pool).
type Runner struct {
	m       *mod.Model
	c       mod.Config
	routing mod.Routing
	ctx     int // the longest sequence
	ub      int // the longest chunk
	pool    *pool
	w       *weights
	rope    []float32 // [ctx][headDim/2] cos and sin pairs, as mod.RoPE computes them
	routed  []int     // [nLayer] index among the routed layers, -1 for a dense layer
	half    bool      // the KV cache holds halves (Options.KVType KVF16)

	pos            int
	kv             []layerKV // [nLayer]
	selected, seen []int     // [nLayer] tokens each routed layer took and saw since Reset
	trace          [][]mod.Route
	s              scratch
	step           *Stepper // a batched step in flight: block's keys and values go to its pages
}

// layerKV is one layer's cache: compact in a routed layer (only the tokens
// it selected), keys already rotated, in position order.
type layerKV struct {
	k, v kvRows  // [entries][kvDim]
	pos  []int32 // [entries] original positions
}

// New prepares m for the CPU with routing r: mod.RoutingRouter or
// mod.RoutingPredictor for generation, mod.RoutingTopK for eval-mode
// scoring (Score). Dense models ignore r.
func New(m *mod.Model, r mod.Routing, o Options) (*Runner, error) {
	c := m.Config
	if r < mod.RoutingTopK || r > mod.RoutingPredictor {
		return nil, fmt.Errorf("cpu: unknown routing %d", r)
	}
	if r == mod.RoutingPredictor && c.IsMoD() && !c.HasPredictor() {
		return nil, fmt.Errorf("cpu: %s: routing by predictor, but the model has no predictor (mod.predictor_hidden = 0)", m.Path)
	}
	if o.ContextLen < 0 || o.UBatch < 0 {
		return nil, fmt.Errorf("cpu: context length %d and ubatch %d must not be negative", o.ContextLen, o.UBatch)
	}
	half, err := parseKV(o.KVType)
	if err != nil {
		return nil, err
	}
	w, err := loadWeights(m)
	if err != nil {
		return nil, err
	}
	run := &Runner{m: m, c: c, routing: r, ctx: c.ContextLen, ub: DefaultUBatch, pool: thePool(), w: w, half: half}
	if o.ContextLen > 0 && o.ContextLen < run.ctx {
		run.ctx = o.ContextLen
	}
	if o.UBatch > 0 {
		run.ub = o.UBatch
	}
	run.rope = ropeTable(run.ctx, m.RopeFreqs())
	run.routed = make([]int, c.NLayer)
	j := 0
	for l := range run.routed {
		run.routed[l] = -1
		if m.Weights.Blocks[l].Router != nil {
			run.routed[l], j = j, j+1
		}
	}
	run.Reset()
	return run, nil
}

// ropeTable holds cos and sin of pos·freqs[i] for every position and pair
// (freqs: the model's mod.RopeFrequencies: base, rope_freqs.weight factors
// and scaling), computed exactly as mod.RoPE does (in float64, then
// rounded), so that rotation matches the reference bit for bit.
func ropeTable(ctx int, freqs []float64) []float32 {
	hd := 2 * len(freqs)
	t := make([]float32, ctx*hd)
	for p := range ctx {
		for i, f := range freqs {
			theta := float64(p) * f
			t[p*hd+2*i], t[p*hd+2*i+1] = float32(math.Cos(theta)), float32(math.Sin(theta))
		}
	}
	return t
}

// Feed runs tokens after those already fed and returns the logits of the
// last one [nVocab].
func (r *Runner) Feed(tokens []int32) ([]float32, error) {
	if err := r.check(tokens); err != nil {
		return nil, err
	}
	return r.forward(tokens, false, false), nil
}

// FeedArgmax runs tokens like Feed and returns the index of the last one's
// largest logit, ties to the lower index.
func (r *Runner) FeedArgmax(tokens []int32) (int32, error) {
	if err := r.check(tokens); err != nil {
		return 0, err
	}
	logits := r.forward(tokens, false, true)
	if !mod.Finite(logits) {
		return 0, fmt.Errorf("cpu: %w", mod.NonFinite(r.pos-1))
	}
	return stats.Argmax(logits), nil
}

// Score runs tokens as one sequence from position 0 (it Resets the
// runner) and returns the logits of every token, [n][nVocab]: eval mode
// with top-k routing, or causal routing as generation would see it.
func (r *Runner) Score(tokens []int32) ([]float32, error) {
	r.Reset()
	if err := r.check(tokens); err != nil {
		return nil, err
	}
	return r.forward(tokens, true, false), nil
}

func (r *Runner) check(tokens []int32) error {
	if len(tokens) == 0 {
		return fmt.Errorf("cpu: no tokens to run")
	}
	if r.pos+len(tokens) > r.ctx {
		return fmt.Errorf("cpu: %d tokens after %d would pass the context length %d", len(tokens), r.pos, r.ctx)
	}
	if r.routing == mod.RoutingTopK && r.pos > 0 && r.c.IsMoD() {
		return fmt.Errorf("cpu: top-k (eval) routing ranks a whole sequence, so it takes one call per sequence; Reset first")
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= r.c.NVocab {
			return fmt.Errorf("cpu: token %d at index %d is outside the vocabulary [0, %d)", t, i, r.c.NVocab)
		}
	}
	return nil
}

// Pos is the number of tokens fed since the last Reset.
func (r *Runner) Pos() int { return r.pos }

// ContextLen is the longest sequence the runner takes.
func (r *Runner) ContextLen() int { return r.ctx }

// NVocab is the number of logits per token.
func (r *Runner) NVocab() int { return r.c.NVocab }

// Reset starts a new sequence.
func (r *Runner) Reset() {
	n := r.c.NLayer
	if len(r.kv) != n {
		r.kv = make([]layerKV, n)
		for l := range r.kv {
			r.kv[l].k.half, r.kv[l].v.half = r.half, r.half
		}
	}
	for l := range r.kv { // keep the memory
		c := &r.kv[l]
		c.k.reset()
		c.v.reset()
		c.pos = c.pos[:0]
	}
	r.pos, r.selected, r.seen, r.trace = 0, make([]int, n), make([]int, n), nil
}

// Counts are, per layer, the tokens it processed and saw since Reset (a
// dense layer: both 0).
func (r *Runner) Counts() (selected, seen []int) { return r.selected, r.seen }

// Routed says whether layer l is a routed layer.
func (r *Runner) Routed(l int) bool { return r.routed[l] >= 0 }

// Routes is, for each token of the last Feed or Score call, what each
// routed layer did, in layer order; nil for a dense model.
func (r *Runner) Routes() [][]mod.Route { return r.trace }

// KV returns layer l's cache as mod.State.KV does: keys and values
// [entries][kvDim] and each entry's original position. A cache of halves
// is widened to float32 (new memory).
func (r *Runner) KV(l int) (k, v []float32, pos []int32) {
	c := r.kv[l]
	return c.k.floats(), c.v.floats(), c.pos
}

// KVType is the KV cache's element type, KVF16 or KVF32.
func (r *Runner) KVType() string {
	if r.half {
		return KVF16
	}
	return KVF32
}
