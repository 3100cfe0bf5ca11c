package cpu

import (
	"math"

	"github.com/modrun/modrun/mod"
)

// scratch is the forward pass's memory, kept between calls and grown to
// the largest chunk seen.
type scratch struct {
	x, xr        []float32 // [n][nEmbd] residual stream; a routed block's gathered rows
	xn, o        []float32 // [n][nEmbd] normed input; a product to add
	q, att       []float32 // [n][qDim]
	k, v         []float32 // [n][kvDim]
	gate, up     []float32 // [n][nFF]
	pred         []float32 // [n][predHidden]
	hidden       []float32 // [rows][nEmbd] after output_norm
	score, pscr  []float32 // [n] router and predictor scores
	pos, posr    []int32   // [n] positions of x's rows and of xr's
	rope         []int32   // [n] the positions RoPE turns xr's rows by (compact ones with mod.PositionsCompact)
	gates        []float32 // [n] g(r) of xr's rows
	in, mid, ffn acts      // the products' inputs: normed rows, attention, SwiGLU
	head, pin    acts      // the classifier's and the predictor's inputs
	logits       []float32 // [nVocab] FeedArgmax's logits, reused
}

// forward runs tokens (checked) in chunks of at most ub (a whole top-k
// sequence in one) and returns the last token's logits, or every token's
// with all. With reuse the last token's logits are written to scratch
// memory that the next call overwrites (FeedArgmax reads them at once).
func (r *Runner) forward(tokens []int32, all, reuse bool) []float32 {
	r.trace = nil
	if r.routed != nil && r.c.IsMoD() {
		r.trace = make([][]mod.Route, 0, len(tokens))
	}
	chunk := r.ub
	if r.routing == mod.RoutingTopK && r.c.IsMoD() {
		chunk = len(tokens)
	}
	var logits []float32
	for lo := 0; lo < len(tokens); lo += chunk {
		part := tokens[lo:min(lo+chunk, len(tokens))]
		last := lo+chunk >= len(tokens)
		if l := r.chunk(part, all, last, reuse); all {
			logits = append(logits, l...)
		} else if last {
			logits = l
		}
	}
	return logits
}

// chunk runs n tokens through every block and returns the logits of all
// of them (all), of the last (last), or none.
func (r *Runner) chunk(tokens []int32, all, last, reuse bool) []float32 {
	c, s, w := r.c, &r.s, r.m.Weights
	n, d := len(tokens), c.NEmbd
	s.x, s.pos = grow(s.x, n*d), grow(s.pos, n)
	for i, t := range tokens {
		w.TokenEmbd.Row(int(t), s.x[i*d:(i+1)*d])
		s.pos[i] = int32(r.pos + i)
	}
	first := len(r.trace)
	if r.trace != nil {
		routes := make([]mod.Route, n*len(r.routedLayers()))
		for i := range n {
			r.trace = append(r.trace, routes[i*len(routes)/n:(i+1)*len(routes)/n])
		}
	}
	for l := range w.Blocks {
		if w.Blocks[l].Router == nil {
			r.block(l, s.x, s.pos, s.pos, nil)
		} else {
			r.routedBlock(l, s.x, s.pos, r.trace[first:])
		}
	}
	r.pos += n
	if !all && !last {
		return nil
	}
	rows := s.x
	if !all {
		rows, n = s.x[(n-1)*d:n*d], 1
	}
	s.hidden = grow(s.hidden, n*d)
	for i := range n {
		mod.RMSNorm(s.hidden[i*d:(i+1)*d], rows[i*d:(i+1)*d], w.OutputNorm.Vec(), c.RMSEps)
	}
	var logits []float32
	if reuse && !all {
		s.logits = grow(s.logits, c.NVocab)
		logits = s.logits
	} else {
		logits = make([]float32, n*c.NVocab)
	}
	s.head.set(s.hidden, n, d)
	r.matmul(logits, &s.head, r.w.output)
	return logits
}

func (r *Runner) routedLayers() []int { return r.c.RoutedLayers() }

// routedBlock is the MoD step of DESIGN.md §3 for block l, as
// mod.State.routedBlock: score every row, select (top-k of the file's
// capacity rule, or causal on the deciding score's bits, mod.Selects), run
// the block on the selected rows alone and add each one's output scaled by
// g(r), or apply the file's semantics (mod.Config.Semantics: the gate on
// the MLP output or on the whole output, RoPE at compact positions, a
// linear predictor). Skipped rows cost their scores only.
func (r *Runner) routedBlock(l int, x []float32, pos []int32, trace [][]mod.Route) {
	sel := r.route(l, x, len(pos), trace)
	if len(sel) == 0 {
		return
	}
	r.gather(l, x, pos, sel, int32(len(r.kv[l].pos)))
	k := len(sel)
	r.block(l, r.s.xr[:k*r.c.NEmbd], r.s.posr[:k], r.s.rope[:k], r.mlpScale(k))
	r.scatter(x, sel)
}

// route scores block l's n rows of x, records each row's decision in
// trace, and returns the selected rows in order.
func (r *Runner) route(l int, x []float32, n int, trace [][]mod.Route) []int {
	c, s := r.c, &r.s
	d := c.NEmbd
	router := r.m.Weights.Blocks[l].Router
	s.score = grow(s.score, n)
	var bias float32
	if router.Bias.Cols > 0 {
		bias = router.Bias.Vec()[0]
	}
	for i := range n { // r_i = w·x_i + b, on the raw block input
		s.score[i] = dotF32(router.Weight.Vec(), x[i*d:(i+1)*d]) + bias
	}
	decide := s.score
	if r.routing == mod.RoutingPredictor {
		decide = r.predict(l, x, n)
	}
	var sel []int
	if r.routing == mod.RoutingTopK {
		sel = mod.TopKIndices(s.score, c.TopKCount(n))
	} else {
		for i, v := range decide {
			if mod.Selects(v) {
				sel = append(sel, i)
			}
		}
	}
	mod.PoisonRows(x, decide, d) // a non-finite score must not pass as a skip
	r.seen[l] += n
	r.selected[l] += len(sel)
	j := r.routed[l]
	for i := range n {
		trace[i][j] = mod.Route{Layer: l, Score: decide[i]}
	}
	for _, i := range sel {
		trace[i][j].Selected = true
	}
	return sel
}

// gather copies the selected rows of x into xr with their positions, the
// positions RoPE turns them by (compact ones count from entries, the
// layer's cache before them) and their gates g(r).
func (r *Runner) gather(l int, x []float32, pos []int32, sel []int, entries int32) {
	c, s := r.c, &r.s
	d, k := c.NEmbd, len(sel)
	s.xr, s.posr, s.rope, s.gates = grow(s.xr, k*d), grow(s.posr, k), grow(s.rope, k), grow(s.gates, k)
	for j, i := range sel {
		copy(s.xr[j*d:(j+1)*d], x[i*d:(i+1)*d])
		s.posr[j] = pos[i]
		s.rope[j] = pos[i]
		if c.Positions == mod.PositionsCompact { // its index among the tokens that entered the layer
			s.rope[j] = entries + int32(j)
		}
		s.gates[j] = mod.Gate(c.Gate, s.score[i])
	}
}

// mlpScale is the gathered rows' gates when the file gates the MLP alone.
func (r *Runner) mlpScale(k int) []float32 {
	if r.c.GateTarget == mod.GateTargetMLP {
		return r.s.gates[:k]
	}
	return nil
}

// scatter adds the block outputs in xr back onto the selected rows of x.
func (r *Runner) scatter(x []float32, sel []int) {
	d, s := r.c.NEmbd, &r.s
	for j, i := range sel {
		g, xi, oj := s.gates[j], x[i*d:(i+1)*d], s.xr[j*d:(j+1)*d]
		switch r.c.GateTarget {
		case mod.GateTargetMLP: // o = h + g·MLP, scatter-added onto x
			addTo(xi, oj)
		case mod.GateTargetOutput: // g·o: the output, residual included, scaled
			for e := range xi {
				xi[e] = g * oj[e]
			}
		default: // DESIGN.md §3: x + g·f(x), f(x) = o − x
			for e := range xi {
				xi[e] += g * (oj[e] - xi[e])
			}
		}
	}
}

// predict is block l's causal predictor score of n rows of x: a linear
// one, p_i = w·x_i + b, or an MLP, p_i = w2·SiLU(W1·x_i).
func (r *Runner) predict(l int, x []float32, n int) []float32 {
	s := &r.s
	d := r.c.NEmbd
	router := r.m.Weights.Blocks[l].Router
	s.pscr = grow(s.pscr, n)
	if router.Pred != nil {
		b := router.PredBias.Vec()[0]
		for i := range n {
			s.pscr[i] = dotF32(router.Pred.Vec(), x[i*d:(i+1)*d]) + b
		}
		return s.pscr
	}
	up, down := r.w.blocks[l].predUp, router.PredDown.Vec()
	h := up.rows
	s.pred = grow(s.pred, n*h)
	s.pin.set(x, n, up.cols)
	r.matmul(s.pred, &s.pin, up)
	for i := range n {
		row := s.pred[i*h : (i+1)*h]
		for j, v := range row {
			row[j] = silu(v)
		}
		s.pscr[i] = dotF32(down, row)
	}
	return s.pscr
}

// block runs Llama block l on the rows of x at positions pos, in place, as
// mod.State.block: h = x + Attn(norm1(x)), x = h + MLP(norm2(h)), RoPE
// turning each row by rope (pos, or a routed block's compact positions);
// with mlpScale, row i's MLP output is scaled by mlpScale[i] before its
// add. The rows' keys and values join layer l's cache at their positions.
func (r *Runner) block(l int, x []float32, pos, rope []int32, mlpScale []float32) {
	c, s, b, bw := r.c, &r.s, &r.m.Weights.Blocks[l], &r.w.blocks[l]
	n, d, qd, kvd := len(pos), c.NEmbd, c.NHead*c.HeadDim, c.KVDim()
	s.xn, s.o = grow(s.xn, n*d), grow(s.o, n*d)
	s.q, s.att = grow(s.q, n*qd), grow(s.att, n*qd)
	s.k, s.v = grow(s.k, n*kvd), grow(s.v, n*kvd)
	s.gate, s.up = grow(s.gate, n*c.NFF), grow(s.up, n*c.NFF)

	r.norm(s.xn, x, b.AttnNorm.Vec(), n)
	s.in.set(s.xn, n, d)
	r.matmul(s.q, &s.in, bw.q)
	r.matmul(s.k, &s.in, bw.k)
	r.matmul(s.v, &s.in, bw.v)
	for i, p := range rope {
		r.rotate(s.q[i*qd:(i+1)*qd], p)
		r.rotate(s.k[i*kvd:(i+1)*kvd], p)
	}
	if r.step != nil { // a batched step: each row's sequence's pages (step.go)
		r.step.attend(l, s.att, s.q, s.k, s.v, n)
	} else {
		cache := &r.kv[l]
		base := len(cache.pos)
		cache.k.append(s.k)
		cache.v.append(s.v)
		cache.pos = append(cache.pos, pos...)
		r.attend(s.att, s.q, cache.k, cache.v, base, n)
	}
	s.mid.set(s.att, n, qd)
	r.matmul(s.o, &s.mid, bw.o)
	addTo(x, s.o)

	r.norm(s.xn, x, b.FFNNorm.Vec(), n)
	s.in.set(s.xn, n, d)
	r.matmul(s.gate, &s.in, bw.gate)
	r.matmul(s.up, &s.in, bw.up)
	swiglu(s.gate, s.up)
	s.ffn.set(s.gate, n, c.NFF)
	r.matmul(s.o, &s.ffn, bw.down)
	for i, g := range mlpScale {
		for e := range s.o[i*d : (i+1)*d] {
			s.o[i*d+e] *= g
		}
	}
	addTo(x, s.o)
}

func (r *Runner) norm(out, x, w []float32, n int) {
	d := r.c.NEmbd
	for i := range n {
		mod.RMSNorm(out[i*d:(i+1)*d], x[i*d:(i+1)*d], w, r.c.RMSEps)
	}
}

// rotate is mod.RoPE with the table's cos and sin.
func (r *Runner) rotate(v []float32, pos int32) {
	hd := r.c.HeadDim
	t := r.rope[int(pos)*hd : (int(pos)+1)*hd]
	for h := 0; h < len(v); h += hd {
		for i := 0; i < hd; i += 2 {
			cos, sin := t[i], t[i+1]
			a, b := v[h+i], v[h+i+1]
			v[h+i], v[h+i+1] = a*cos-b*sin, a*sin+b*cos
		}
	}
}

// attend is mod.Attend over the pool: n query rows whose keys and values
// are the cache's last n entries, row i seeing entries [0, base+i].
//
//	out, q [n][nHead*headDim]; k, v [base+n][nKVHead*headDim]
func (r *Runner) attend(out, q []float32, k, v kvRows, base, n int) {
	c := r.c
	nHead, hd := c.NHead, c.HeadDim
	qd, kvd := nHead*hd, c.KVDim()
	group := nHead / c.NKVHead
	scale := float32(1 / math.Sqrt(float64(hd)))
	jobs := n * nHead
	grain := max(1, 8192/((base+n)*hd)) // jobs per share: enough work to hand off
	r.pool.run(jobs, grain, func(lo, hi int) {
		sc := make([]float32, base+n)
		var buf, part []float32 // widened halves
		if r.half {
			buf, part = make([]float32, kvBlock*hd), make([]float32, hd)
		}
		for job := lo; job < hi; job++ {
			i, h := job/nHead, job%nHead
			kvh := h / group
			qi := q[i*qd+h*hd : i*qd+(h+1)*hd]
			m := base + i + 1
			k.scores(sc[:m], qi, kvh*hd, kvd, scale, buf)
			softmax(sc[:m])
			v.mix(out[i*qd+h*hd:i*qd+(h+1)*hd], kvh*hd, kvd, sc[:m], buf, part)
		}
	})
}

func addTo(x, y []float32) {
	for i := range x {
		x[i] += y[i]
	}
}
