package mod

import (
	"fmt"
	"math"

	"github.com/modrun/modrun/gguf"
)

// Routing chooses which tokens a routed block processes (DESIGN.md §3).
type Routing int

const (
	// RoutingTopK is eval mode, the training semantics: the k = max(1,
	// ceil(capacity*S)) tokens of the sequence with the largest router logits.
	// It needs the whole sequence, so it takes one Forward call per sequence.
	RoutingTopK Routing = iota
	// RoutingRouter is causal (generate) mode: a token goes through iff r > 0.
	RoutingRouter
	// RoutingPredictor is causal mode with the predictor MLP: iff p > 0.
	RoutingPredictor
)

var routingNames = [...]string{"topk", "router", "predictor"}

func (r Routing) String() string { return routingNames[r] }

// ParseRouting reads "topk", "router" or "predictor".
func ParseRouting(s string) (Routing, error) {
	for i, n := range routingNames {
		if n == s {
			return Routing(i), nil
		}
	}
	return 0, fmt.Errorf("routing %q is not one of topk, router, predictor", s)
}

// TopK is the number of tokens a routed block takes from a sequence of n in
// top-k mode: max(1, ceil(capacity*n)). The capacity comes from an f32, so
// the product is taken in float64 less a hair: 0.1 as f32 times 10 must give
// 1, as it does for the float64 0.1 the trainer used.
func TopK(capacity float32, n int) int {
	return max(1, min(n, int(math.Ceil(float64(capacity)*float64(n)-1e-6))))
}

// State is one sequence running through a model: its position and its KV
// cache. A routed layer's cache is compact: it holds only the tokens that
// layer selected, keys already rotated, with their original positions.
type State struct {
	m       *Model
	routing Routing
	pos     int       // tokens processed so far
	kv      []layerKV // [NLayer]
	rope    []float64 // [HeadDim/2] RoPE's radians per position of each pair (RopeFrequencies)
	// Trace, when non-nil, is overwritten by each Forward call with the
	// routing decisions and final hidden states of that call.
	Trace *Trace
	// Selected[l] and Seen[l] count, over the sequence, the tokens routed
	// layer l processed and the tokens it saw.
	Selected, Seen []int
	// KVHalf stores each key and value rounded to half precision (IEEE
	// binary16, to nearest even) before any attention reads it, the
	// token's own included: a GPU's F16 KV cache as the Vulkan runner
	// keeps it, so that its tests compare an F16 cache with the same
	// arithmetic at summation-order tolerance (engine/vulkan's kvReference).
	KVHalf bool
	// MatmulHalf rounds both operands of every block matrix product (q, k,
	// v, o, gate, up, down) and of the output head to the nearest half
	// before multiplying, the sums in float32: a GPU's tensor-core matmul
	// (f16 x f16 -> f32) as the Vulkan runner's cooperative-matrix profile
	// runs prefill, so that its tests derive that profile's bound from the
	// rounding's effect on this very sequence, as KVHalf's (engine/vulkan's
	// reference). The router and predictor are not rounded: the runner's
	// routing kernels multiply in f32.
	MatmulHalf bool
	// BeforeRoute, when set, is called with routed layer l's block inputs
	// ([n][NEmbd]) before the layer scores them, so a calibration (mod/synth)
	// can set the layer's router from the very activations it will route.
	BeforeRoute func(l int, x []float32)
}

type layerKV struct {
	k, v []float32 // [entries][kvDim]
	pos  []int32   // [entries] original position of each entry, ascending
}

// Trace records what one Forward call decided and computed.
type Trace struct {
	Layers []LayerTrace // one per routed layer, in layer order
	Hidden []float32    // [n][NEmbd] final hidden states, after output_norm
}

// LayerTrace is one routed layer's decisions for the tokens of one call.
type LayerTrace struct {
	Layer           int
	RouterLogits    []float32 // [n] r for each token
	PredictorLogits []float32 // [n] p for each token; nil without a predictor
	Selected        []int     // original positions of the selected tokens, ascending
}

// Route is what one routed layer did with one token in causal routing
// (DESIGN.md §3): the score that decided, the router's r (RoutingRouter)
// or the predictor's p (RoutingPredictor), and whether the token went
// through the block (Score > 0, as Selects): attention and MLP ran on it
// and it holds an entry in the layer's KV cache; otherwise it skipped the
// block on the residual stream. Every backend's trace, and the API's, is
// made of these.
type Route struct {
	Layer    int
	Score    float32
	Selected bool
}

// NewState starts an empty sequence with the given routing. Dense models
// ignore routing; the predictor needs a model trained with one.
func (m *Model) NewState(r Routing) (*State, error) {
	if r == RoutingPredictor && m.Config.IsMoD() && !m.Config.HasPredictor() {
		return nil, fmt.Errorf("mod: %s: routing by predictor, but the model has no predictor (mod.predictor_hidden = 0)", m.Path)
	}
	if r < RoutingTopK || r > RoutingPredictor {
		return nil, fmt.Errorf("mod: unknown routing %d", r)
	}
	s := &State{m: m, routing: r, rope: m.RopeFreqs()}
	s.Reset()
	return s, nil
}

// Reset empties the sequence, keeping the routing.
func (s *State) Reset() {
	n := s.m.Config.NLayer
	s.pos, s.kv, s.Selected, s.Seen = 0, make([]layerKV, n), make([]int, n), make([]int, n)
}

// Model is the model the state runs.
func (s *State) Model() *Model { return s.m }

// Pos is the number of tokens processed so far.
func (s *State) Pos() int { return s.pos }

// Routing is the state's routing mode.
func (s *State) Routing() Routing { return s.routing }

// KV returns layer l's cache: keys and values [entries][KVDim] and the
// original position of each entry.
func (s *State) KV(l int) (k, v []float32, pos []int32) {
	c := s.kv[l]
	return c.k, c.v, c.pos
}

// Forward runs tokens, continuing the sequence, and returns the logits of
// every token ([n][NVocab]) when all is true, else of the last one ([NVocab]).
func (s *State) Forward(tokens []int32, all bool) ([]float32, error) {
	c := s.m.Config
	n := len(tokens)
	if err := s.check(tokens); err != nil {
		return nil, err
	}
	w := s.m.Weights
	x := make([]float32, n*c.NEmbd) // [n][nEmbd] the residual stream
	pos := make([]int32, n)
	for i, t := range tokens {
		w.TokenEmbd.Row(int(t), x[i*c.NEmbd:(i+1)*c.NEmbd])
		pos[i] = int32(s.pos + i)
	}
	if s.Trace != nil {
		*s.Trace = Trace{}
	}
	for l := range w.Blocks {
		if w.Blocks[l].Router == nil {
			s.block(l, x, pos, pos, nil)
		} else {
			s.routedBlock(l, x, pos)
		}
	}
	hidden := make([]float32, n*c.NEmbd)
	for i := 0; i < n; i++ {
		RMSNorm(hidden[i*c.NEmbd:(i+1)*c.NEmbd], x[i*c.NEmbd:(i+1)*c.NEmbd], w.OutputNorm.Vec(), c.RMSEps)
	}
	if s.Trace != nil {
		s.Trace.Hidden = hidden
	}
	s.pos += n
	if !all {
		hidden, n = hidden[(n-1)*c.NEmbd:], 1
	}
	logits := make([]float32, n*c.NVocab)
	s.matMul(logits, hidden, &w.Output, n)
	return logits, nil
}

func (s *State) check(tokens []int32) error {
	c := s.m.Config
	if len(tokens) == 0 {
		return fmt.Errorf("mod: no tokens to run")
	}
	if s.pos+len(tokens) > c.ContextLen {
		return fmt.Errorf("mod: %d tokens after %d would pass the context length %d", len(tokens), s.pos, c.ContextLen)
	}
	if s.routing == RoutingTopK && s.pos > 0 && c.IsMoD() {
		return fmt.Errorf("mod: top-k (eval) routing ranks a whole sequence, so it takes one Forward call per sequence; Reset first")
	}
	for i, t := range tokens {
		if t < 0 || int(t) >= c.NVocab {
			return fmt.Errorf("mod: token %d at index %d is outside the vocabulary [0, %d)", t, i, c.NVocab)
		}
	}
	return nil
}

// routedBlock is the MoD step of DESIGN.md §3 for block l: score every
// token, select some, run the whole block on the selected tokens alone
// (attention among them, at their original positions), and add each
// selected token's block output f scaled by g(r). The rest pass unchanged
// and leave no KV entry.
func (s *State) routedBlock(l int, x []float32, pos []int32) {
	c := s.m.Config
	d := c.NEmbd
	router := s.m.Weights.Blocks[l].Router
	n := len(pos)
	if s.BeforeRoute != nil {
		s.BeforeRoute(l, x)
	}
	r := make([]float32, n) // r_i = w·x_i + b, on the raw block input
	for i := range r {
		r[i] = DotF32(router.Weight.Vec(), x[i*d:(i+1)*d])
		if router.Bias.Cols > 0 {
			r[i] += router.Bias.Vec()[0]
		}
	}
	var p []float32 // the causal predictor's logits
	if router.PredUp != nil || router.Pred != nil {
		p = predict(router, x, n, d)
	}
	var sel []int // indices into this call's tokens, ascending
	decide := r   // the score that selects
	switch s.routing {
	case RoutingTopK:
		sel = TopKIndices(r, c.TopKCount(n))
	case RoutingRouter:
		sel = positive(r)
	case RoutingPredictor:
		sel, decide = positive(p), p
	}
	// A NaN or infinite score, ranked or not, selected or not, turns its
	// token's row NaN before the block gathers it: a broken router must
	// reach the logits, not pass as a skip (NaN never selects, +Inf does
	// with a sigmoid gate of 1).
	PoisonRows(x, decide, d)
	s.Seen[l] += n
	s.Selected[l] += len(sel)
	if s.Trace != nil {
		lt := LayerTrace{Layer: l, RouterLogits: r, PredictorLogits: p, Selected: make([]int, len(sel))}
		for j, i := range sel {
			lt.Selected[j] = int(pos[i])
		}
		s.Trace.Layers = append(s.Trace.Layers, lt)
	}
	if len(sel) == 0 {
		return
	}
	xs := make([]float32, len(sel)*d) // [k][nEmbd] gathered block inputs
	ps := make([]int32, len(sel))     // their original positions
	g := make([]float32, len(sel))    // their gates g(r)
	for j, i := range sel {
		copy(xs[j*d:(j+1)*d], x[i*d:(i+1)*d])
		ps[j] = pos[i]
		g[j] = Gate(c.Gate, r[i])
	}
	rope := ps
	if c.Positions == PositionsCompact {
		// A token's position is its index among the tokens that entered
		// this block so far, which is the compact cache's length before it.
		rope = make([]int32, len(sel))
		for j := range rope {
			rope[j] = int32(len(s.kv[l].pos) + j)
		}
	}
	var mlpScale []float32
	if c.GateTarget == GateTargetMLP {
		mlpScale = g
	}
	s.block(l, xs, ps, rope, mlpScale) // xs becomes the block outputs o
	for j, i := range sel {
		xi, oj := x[i*d:(i+1)*d], xs[j*d:(j+1)*d]
		switch c.GateTarget {
		case GateTargetMLP: // o = h + g·MLP, scatter-added onto x
			add(xi, oj)
		case GateTargetOutput: // g·o: the output, residual included, scaled
			for e := range xi {
				xi[e] = g[j] * oj[e]
			}
		default: // DESIGN.md §3: x + g·f(x), f(x) = o − x
			for e := range xi {
				xi[e] += g[j] * (oj[e] - xi[e])
			}
		}
	}
}

// predict is the causal predictor's logit for each row of x: linear, p_i =
// w·x_i + b, or an MLP, p_i = w2·SiLU(W1·x_i).
func predict(router *Router, x []float32, n, d int) []float32 {
	if router.Pred != nil {
		p := make([]float32, n)
		for i := range p {
			p[i] = DotF32(router.Pred.Vec(), x[i*d:(i+1)*d]) + router.PredBias.Vec()[0]
		}
		return p
	}
	hidden := make([]float32, n*router.PredUp.Rows)
	MatMul(hidden, x, router.PredUp, n)
	p := make([]float32, n)
	h := router.PredUp.Rows
	for i := range p {
		row := hidden[i*h : (i+1)*h]
		for j := range row {
			row[j] = SiLU(row[j])
		}
		p[i] = DotF32(router.PredDown.Vec(), row)
	}
	return p
}

// block runs Llama block l on the rows of x at positions pos, in place:
// h = x + Attn(norm1(x)), x = h + MLP(norm2(h)), with RoPE at positions
// rope (pos, or compact ones) and row i's MLP output scaled by mlpScale[i]
// when mlpScale is not nil. The rows' keys and values are appended to layer
// l's cache, and each row attends to the cache up to and including itself:
// the cache is in position order, so this is the causal mask by original
// position.
func (s *State) block(l int, x []float32, pos, rope []int32, mlpScale []float32) {
	c := s.m.Config
	b := &s.m.Weights.Blocks[l]
	n, d, qd, kvd := len(pos), c.NEmbd, c.NHead*c.HeadDim, c.KVDim()

	xn := make([]float32, n*d)
	for i := 0; i < n; i++ {
		RMSNorm(xn[i*d:(i+1)*d], x[i*d:(i+1)*d], b.AttnNorm.Vec(), c.RMSEps)
	}
	q, k, v := make([]float32, n*qd), make([]float32, n*kvd), make([]float32, n*kvd)
	s.matMul(q, xn, &b.Q, n)
	s.matMul(k, xn, &b.K, n)
	s.matMul(v, xn, &b.V, n)
	for i, p := range rope {
		RoPE(q[i*qd:(i+1)*qd], p, s.rope)
		RoPE(k[i*kvd:(i+1)*kvd], p, s.rope)
	}
	if s.KVHalf {
		roundHalf(k)
		roundHalf(v)
	}
	cache := &s.kv[l]
	base := len(cache.pos)
	cache.k = append(cache.k, k...)
	cache.v = append(cache.v, v...)
	cache.pos = append(cache.pos, pos...)

	att := make([]float32, n*qd)
	Attend(att, q, cache.k, cache.v, base, n, c.NHead, c.NKVHead, c.HeadDim)
	o := make([]float32, n*d)
	s.matMul(o, att, &b.O, n)
	add(x, o)

	for i := 0; i < n; i++ {
		RMSNorm(xn[i*d:(i+1)*d], x[i*d:(i+1)*d], b.FFNNorm.Vec(), c.RMSEps)
	}
	gt, up := make([]float32, n*c.NFF), make([]float32, n*c.NFF)
	s.matMul(gt, xn, &b.Gate, n)
	s.matMul(up, xn, &b.Up, n)
	for i := range gt {
		gt[i] = SiLU(gt[i]) * up[i] // SwiGLU
	}
	s.matMul(o, gt, &b.Down, n)
	for i, g := range mlpScale {
		for e := range o[i*d : (i+1)*d] {
			o[i*d+e] *= g
		}
	}
	add(x, o)
}

// matMul is MatMul, or with MatmulHalf the product of x and w rounded to
// halves (matMulHalf).
func (s *State) matMul(out, x []float32, w *Mat, n int) {
	if s.MatmulHalf {
		matMulHalf(out, x, w, n)
		return
	}
	MatMul(out, x, w, n)
}

// matMulHalf is MatMul of x and w's decoded rows each rounded to the
// nearest half (State.MatmulHalf). The products of two halves are exact in
// float32 (22 significant bits), as on the tensor cores; the sums are
// float32's.
func matMulHalf(out, x []float32, w *Mat, n int) {
	xh := append([]float32(nil), x[:n*w.Cols]...)
	roundHalf(xh)
	parallelFor(w.Rows, w.Rows*w.Cols*n, func(lo, hi int) {
		row := make([]float32, w.Cols)
		for i := lo; i < hi; i++ {
			w.Row(i, row)
			roundHalf(row)
			for s := 0; s < n; s++ {
				out[s*w.Rows+i] = DotF32(row, xh[s*w.Cols:(s+1)*w.Cols])
			}
		}
	})
}

// roundHalf rounds each of xs to the nearest half (State.KVHalf,
// State.MatmulHalf).
func roundHalf(xs []float32) {
	for i, x := range xs {
		xs[i] = gguf.F16ToF32(gguf.F32ToF16(x))
	}
}
