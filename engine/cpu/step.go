package cpu

import (
	"fmt"
	"math"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/mod"
)

// Stepper runs the scheduler's steps (sched.StepRunner) on the CPU: one
// forward pass over the rows of many sequences, so that each weight is
// read once per step for all of them. The products run over every row at
// once; RoPE turns each row by its own position; each row's keys and
// values go into its sequence's pages and its attention reads that
// sequence's pages only. A routed layer decides per row, causally, as
// alone (router or predictor, mod.Selects), gathers the rows it selected
// across the whole step, runs the block on them and scatters back. The
// pages' memory is made on first use, so it follows the tokens held.
type Stepper struct {
	r     *Runner // the weights, the scratch and the pool; r.step points back while a step runs
	layer []int   // [nLayer] index among the dense layers, or among the routed ones
	kvd   int
	k, v  []kvRows // [pages][nKVHead][blockTokens][headDim], empty until first written
	bt    int
	cur   []pageRow // the rows of the block being run
	out   []float32 // [rows wanting logits][nVocab], reused by each step
}

// pageRow is where one row of a block writes its keys and values (table
// layer i, entry e) and how many entries its attention sees (e+1: every
// earlier entry of its sequence's table lies at an earlier position).
type pageRow struct {
	t *sched.Table
	i int
	e int
}

// NewStepper prepares m for batched steps with causal routing r.
func NewStepper(m *mod.Model, r mod.Routing, o Options) (*Stepper, error) {
	run, err := New(m, r, o)
	if err != nil {
		return nil, err
	}
	return run.Stepper()
}

// Stepper is a step runner that shares r's weights (and its context
// length and routing): a model's single-sequence runner and its batched
// steps hold the weights once. It has its own scratch memory and pages.
func (r *Runner) Stepper() (*Stepper, error) {
	m := r.m
	if r.routing == mod.RoutingTopK && m.Config.IsMoD() {
		return nil, fmt.Errorf("cpu: batched steps decode with causal routing (router or predictor), not top-k")
	}
	run := &Runner{m: m, c: r.c, routing: r.routing, ctx: r.ctx, ub: r.ub, pool: r.pool, w: r.w, rope: r.rope, routed: r.routed, half: r.half}
	run.Reset()
	st := &Stepper{r: run, layer: make([]int, m.Config.NLayer), kvd: m.Config.KVDim()}
	nd, nr := 0, 0
	for l := range st.layer {
		if run.routed[l] >= 0 {
			st.layer[l], nr = nr, nr+1
		} else {
			st.layer[l], nd = nd, nd+1
		}
	}
	return st, nil
}

// Layout is the model as the scheduler sees it.
func (st *Stepper) Layout() sched.Layout {
	nr := 0
	for _, j := range st.r.routed {
		if j >= 0 {
			nr++
		}
	}
	return sched.Layout{DenseLayers: st.r.c.NLayer - nr, RoutedLayers: nr, ContextLen: st.r.ctx, NVocab: st.r.c.NVocab}
}

// QuantizedActivations is Runner.QuantizedActivations.
func (st *Stepper) QuantizedActivations() bool { return st.r.QuantizedActivations() }

// PageBytes is the memory of one page of blockTokens entries: keys and
// values, in halves with Options.KVType KVF16 (a budget then holds twice
// the tokens).
func (st *Stepper) PageBytes(blockTokens int) int {
	return 2 * blockTokens * st.kvd * kvElemBytes(st.r.half)
}

// KVType is the pages' element type, KVF16 or KVF32.
func (st *Stepper) KVType() string { return st.r.KVType() }

// HeldPages is how many pages have memory now.
func (st *Stepper) HeldPages() int {
	n := 0
	for _, p := range st.k {
		if p.f != nil || p.h != nil {
			n++
		}
	}
	return n
}

// CopyPage copies page src's entries into dst.
func (st *Stepper) CopyPage(dst, src int32) {
	st.page(dst)
	st.page(src)
	st.k[dst].copyFrom(st.k[src])
	st.v[dst].copyFrom(st.v[src])
}

// page makes page p's memory on first use.
func (st *Stepper) page(p int32) {
	for int(p) >= len(st.k) {
		st.k, st.v = append(st.k, kvRows{}), append(st.v, kvRows{})
	}
	if st.k[p].f == nil && st.k[p].h == nil {
		st.k[p], st.v[p] = makeKVRows(st.r.half, st.bt*st.kvd), makeKVRows(st.r.half, st.bt*st.kvd)
	}
}

// Step runs rows (sched.StepRunner).
func (st *Stepper) Step(rows []sched.Row, bt int) (logits []float32, routes [][]mod.Route, err error) {
	r, c := st.r, st.r.c
	if st.bt == 0 {
		st.bt = bt
	}
	if bt != st.bt {
		return nil, nil, fmt.Errorf("cpu: pages of %d entries, the stepper's hold %d", bt, st.bt)
	}
	n, d := len(rows), c.NEmbd
	if n == 0 {
		return nil, nil, fmt.Errorf("cpu: a step of no rows")
	}
	s, w := &r.s, r.m.Weights
	s.x, s.pos = grow(s.x, n*d), grow(s.pos, n)
	for i, row := range rows {
		if row.Token < 0 || int(row.Token) >= c.NVocab || row.Pos < 0 || row.Pos >= r.ctx {
			return nil, nil, fmt.Errorf("cpu: row %d: token %d at position %d is outside the vocabulary [0, %d) or the context %d", i, row.Token, row.Pos, c.NVocab, r.ctx)
		}
		w.TokenEmbd.Row(int(row.Token), s.x[i*d:(i+1)*d])
		s.pos[i] = int32(row.Pos)
	}
	if c.IsMoD() {
		nr := len(c.RoutedLayers())
		flat := make([]mod.Route, n*nr)
		routes = make([][]mod.Route, n)
		for i := range routes {
			routes[i] = flat[i*nr : (i+1)*nr]
		}
	}
	r.step = st
	defer func() { r.step = nil }()
	for l := range w.Blocks {
		if w.Blocks[l].Router == nil {
			st.cur = st.cur[:0]
			for _, row := range rows {
				st.cur = append(st.cur, pageRow{t: &row.Seq.Dense, i: st.layer[l], e: row.Pos})
			}
			r.block(l, s.x, s.pos, s.pos, nil)
		} else {
			st.routedBlock(l, rows, routes)
		}
	}
	return st.logits(rows), routes, nil
}

// routedBlock is Runner.routedBlock over a step: the selected rows of every
// sequence go through the block together, each appended to its own
// sequence's compact cache.
func (st *Stepper) routedBlock(l int, rows []sched.Row, routes [][]mod.Route) {
	r, s := st.r, &st.r.s
	sel := r.route(l, s.x, len(rows), routes)
	if len(sel) == 0 {
		return
	}
	r.gather(l, s.x, s.pos, sel, 0)
	st.cur = st.cur[:0]
	j := st.layer[l]
	for g, i := range sel {
		t := &rows[i].Seq.Routed[j]
		st.cur = append(st.cur, pageRow{t: t, e: t.Len})
		if r.c.Positions == mod.PositionsCompact {
			s.rope[g] = int32(t.Len)
		}
		t.Len++
	}
	k := len(sel)
	r.block(l, s.xr[:k*r.c.NEmbd], s.posr[:k], s.rope[:k], r.mlpScale(k))
	r.scatter(s.x, sel)
}

// logits are the output head's over the rows that want them, [k][nVocab].
func (st *Stepper) logits(rows []sched.Row) []float32 {
	r, c, s := st.r, st.r.c, &st.r.s
	d := c.NEmbd
	k := 0
	for _, row := range rows {
		if row.Logits {
			k++
		}
	}
	if k == 0 {
		return nil
	}
	s.hidden = grow(s.hidden, k*d)
	j := 0
	for i, row := range rows {
		if row.Logits {
			mod.RMSNorm(s.hidden[j*d:(j+1)*d], s.x[i*d:(i+1)*d], r.m.Weights.OutputNorm.Vec(), c.RMSEps)
			j++
		}
	}
	st.out = grow(st.out, k*c.NVocab) // read by the scheduler before the next step
	s.head.set(s.hidden, k, d)
	r.matmul(st.out, &s.head, r.w.output)
	return st.out
}

// attend writes the block's rows' keys and values into their pages, then
// runs each row's attention over its own table's first e+1 entries.
//
//	out, q [n][nHead*headDim]; k, v [n][kvDim]
func (st *Stepper) attend(l int, out, q, k, v []float32, n int) {
	c, bt, kvd := st.r.c, st.bt, st.kvd
	nHead, hd := c.NHead, c.HeadDim
	for i, pr := range st.cur[:n] {
		page, slot := pr.t.Page(pr.i, pr.e, bt)
		st.page(page)
		for h := range c.NKVHead { // a page is [nKVHead][bt][headDim]
			at := (h*bt + slot) * hd
			st.k[page].put(at, k[i*kvd+h*hd:i*kvd+(h+1)*hd])
			st.v[page].put(at, v[i*kvd+h*hd:i*kvd+(h+1)*hd])
		}
	}
	qd, group := nHead*hd, nHead/c.NKVHead
	scale := float32(1 / math.Sqrt(float64(hd)))
	rows := st.cur[:n]
	st.r.pool.run(n*nHead, 1, func(lo, hi int) {
		var sc, part, buf, part2 []float32
		if st.r.half {
			buf, part2 = make([]float32, kvBlock*hd), make([]float32, hd)
		}
		for job := lo; job < hi; job++ {
			i, h := job/nHead, job%nHead
			pr, kvh := rows[i], h/group
			m := pr.e + 1
			sc, part = grow(sc, m), grow(part, hd)
			qi := q[i*qd+h*hd : i*qd+(h+1)*hd]
			for e0 := 0; e0 < m; e0 += bt { // the scores, a page at a time
				page, _ := pr.t.Page(pr.i, e0, bt)
				st.k[page].scores(sc[e0:min(m, e0+bt)], qi, kvh*bt*hd, hd, scale, buf)
			}
			softmax(sc[:m])
			o := out[i*qd+h*hd : i*qd+(h+1)*hd]
			for e0 := 0; e0 < m; e0 += bt { // the values mixed, a page at a time
				page, _ := pr.t.Page(pr.i, e0, bt)
				if e0 == 0 {
					st.v[page].mix(o, kvh*bt*hd, hd, sc[:min(m, bt)], buf, part2)
					continue
				}
				st.v[page].mix(part, kvh*bt*hd, hd, sc[e0:min(m, e0+bt)], buf, part2)
				addTo(o, part)
			}
		}
	})
}
