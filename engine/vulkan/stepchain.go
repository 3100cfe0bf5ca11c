package vulkan

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// The batched step's chain (sched.ChainRunner): k decode steps of the same
// sequences in one submission, as the runner's greedy chain (chain.go)
// does for one sequence. Each sequence has one row a step, whose logits
// serve only its argmax or its draw on the device (Row.Argmax), so every
// row of the step is a head row, in row order, and the token row i draws
// at a step is the one it feeds the next: the ids copied to where the
// embedding reads the tokens. What else changes from a step to the next
// is the positions (the host's, a slot a step), the draws' parameters (a
// slot a step) and each routed table's length, which only the step's
// routing knows: paged_advance adds the rows each routed layer took to
// rmeta on the device. The tables' pages for every step are in the tables
// the host wrote before the chain (the scheduler reserved them). Each
// step is the step's own recording of its rows, so a chained step gives
// the tokens an unchained one gives, bit for bit.
//
// The chain does not know where a sequence ends: a stop token, MaxTokens
// or a client that goes away ends it after steps the chain already ran.
// The scheduler drops those tokens; their keys and values sit in the
// sequence's own pages past its length, where nothing reads them and the
// pages go back to the pool with the sequence.

// stepChain is the Stepper's chain buffers, host-visible, made at the
// first chain for the stepper's seqs rows ([most] slots of each).
type stepChain struct {
	rows                   int                     // rows a slot holds (the stepper's seqs when made)
	pos, ids, draws, trace *vk.Buffer              // [most][rows] u32, [most][rows] u32, [most][rows] ArgmaxDraw, [most] traces
	recs                   map[[2]int]*vk.Recorder // by (rows, steps)
}

// ChainSteps is the most steps StepChain runs in one submission
// (MODRUN_CHAIN; 1: none chained).
func (st *Stepper) ChainSteps() int { return st.r.ChainSteps() }

// growChain makes the chain's buffers hold the stepper's seqs rows.
func (st *Stepper) growChain() error {
	ch := &st.chain
	if ch.pos != nil && ch.rows >= st.seqs {
		return nil
	}
	st.dropRecordings()
	st.freeChain()
	most, rows := uint64(st.ChainSteps()), uint64(st.seqs)
	al := &allocator{r: st.r}
	ch.pos, ch.ids, ch.draws = al.buf(4*most*rows, vk.HostVisible), al.buf(4*most*rows, vk.HostVisible), al.buf(shaders.ArgmaxDrawBytesPer*most*rows, vk.HostVisible)
	if st.trace != nil {
		ch.trace = al.buf(most*st.trace.Size(), vk.HostVisible)
	}
	if al.err != nil {
		st.freeChain()
		return fmt.Errorf("vulkan: a chain of %d steps of %d rows: %w", most, rows, al.err)
	}
	ch.rows = st.seqs
	return nil
}

// freeChain frees the chain's buffers (its recordings are dropped with
// the stepper's).
func (st *Stepper) freeChain() {
	ch := &st.chain
	for _, b := range []*vk.Buffer{ch.pos, ch.ids, ch.draws, ch.trace} {
		if b != nil {
			st.r.freeBuffer(b)
		}
	}
	ch.pos, ch.ids, ch.draws, ch.trace, ch.rows = nil, nil, nil, nil, 0
}

// chainRecording is the chain of k steps of n rows, recorded at its first
// use: before each step its positions and draws copied in (and, but for
// the first, its tokens from the ids of the step before); after each its
// ids and trace copied out, and the routed tables' lengths advanced.
func (st *Stepper) chainRecording(n, k int) (*vk.Recorder, error) {
	ch, key := &st.chain, [2]int{n, k}
	if rec, ok := ch.recs[key]; ok {
		return rec, nil
	}
	if len(ch.recs) >= max(1, maxRecordings) {
		for old, rec := range ch.recs {
			rec.Close()
			delete(ch.recs, old)
			break
		}
	}
	r, pf := st.r, &st.pf
	var advance *kernel
	if st.nRouted > 0 {
		var err error
		if advance, err = r.ks.get("paged_advance", nil); err != nil {
			return nil, err
		}
	}
	rec := r.dev.NewRecorder()
	fail := func(err error) (*vk.Recorder, error) {
		rec.Close()
		return nil, fmt.Errorf("vulkan: recording a chain of %d steps of %d rows: %w", k, n, err)
	}
	nb, rb := 4*uint64(n), 4*uint64(ch.rows)
	for s := range uint64(k) {
		if s > 0 {
			rec.Copy(pf.ids, st.tok, 0, 0, nb)
		}
		rec.Copy(ch.pos, st.a.pos, s*rb, 0, nb)
		rec.Copy(ch.draws, pf.draws, shaders.ArgmaxDrawBytesPer/4*s*rb, 0, shaders.ArgmaxDrawBytesPer/4*nb)
		f, err := st.frame(n, n, n, true) // a chain's rows are each their sequence's only one
		if err != nil {
			return fail(err)
		}
		if err := r.recordFrameTo(rec, f); err != nil {
			return fail(err)
		}
		rec.Copy(pf.ids, ch.ids, 0, s*rb, nb)
		if st.nRouted > 0 {
			tb := st.trace.Size()
			rec.Copy(st.trace, ch.trace, 0, s*tb, tb)
			if s+1 < uint64(k) {
				push := shaders.PagedPush{N: uint32(n), NRouted: uint32(st.nRouted), Stride: uint32(st.ub)}
				r.dispatch(rec, newOp(advance, push, shaders.Groups((uint32(n)+63)/64), rd(st.trace, 0, 0), rw(pf.rmeta, 0, 0)))
			}
		}
	}
	if err := rec.Err(); err != nil {
		return fail(err)
	}
	if ch.recs == nil {
		ch.recs = map[[2]int]*vk.Recorder{}
	}
	ch.recs[key] = rec
	return rec, nil
}

// StepChain runs rows, then steps-1 more steps of the same sequences
// (sched.ChainRunner): each row its sequence's only one, with Argmax (a
// greedy argmax, or a draw at Row.Temp on a runner that draws), at step s
// at position Pos+s with the token it drew at step s-1, drawing with
// us[i][s] (us[i] may be nil for a greedy row; us[i][0] is rows[i].U). It
// runs the longest chain recorded that is at most steps (chainLengths),
// and gives each step's ids ([steps run][rows], ArgmaxNonFinite for a row
// whose logits were not finite: the row's later steps ran on no token)
// and routing ([steps run][rows][routed layers], nil for a dense model),
// advancing each sequence's routed tables' lengths by what the steps
// took. The scheduler has reserved the pages of every step.
func (st *Stepper) StepChain(rows []sched.Row, steps int, us [][]float64, bt int) (ids [][]int32, routes [][][]mod.Route, err error) {
	r, n := st.r, len(rows)
	if st.err != nil {
		err, st.err = st.err, nil
		return nil, nil, err
	}
	switch {
	case st.bt == 0:
		return nil, nil, fmt.Errorf("vulkan: a step before the pool is made (Stepper.Reserve)")
	case bt != st.bt:
		return nil, nil, fmt.Errorf("vulkan: pages of %d entries, the stepper's hold %d", bt, st.bt)
	case n == 0 || n > st.ub:
		return nil, nil, fmt.Errorf("vulkan: a chain of %d rows: want 1 to %d (UBatch)", n, st.ub)
	case steps < 1 || steps > st.ChainSteps():
		return nil, nil, fmt.Errorf("vulkan: a chain of %d steps: want 1 to %d (MODRUN_CHAIN)", steps, st.ChainSteps())
	case len(us) != n:
		return nil, nil, fmt.Errorf("vulkan: a chain of %d rows with %d rows of uniform numbers", n, len(us))
	}
	k := 1
	for _, l := range chainLengths(st.ChainSteps()) {
		if l <= steps {
			k = l
			break
		}
	}
	if k == 1 { // no chain of so few: one step
		if err := st.chainRows(rows, 1, us); err != nil {
			return nil, nil, err
		}
		_, got, rts, err := st.step(rows, bt, true)
		if err != nil {
			return nil, nil, err
		}
		ids = [][]int32{append([]int32(nil), got...)}
		if rts != nil {
			routes = [][][]mod.Route{rts}
		}
		return ids, routes, nil
	}
	t0 := time.Now()
	if err := st.chainRows(rows, k, us); err != nil {
		return nil, nil, err
	}
	if err := st.growLogits(n); err != nil {
		return nil, nil, err
	}
	if err := st.growChain(); err != nil {
		return nil, nil, err
	}
	ch, pf := &st.chain, &st.pf
	nr := st.nRouted
	seq, rmeta, words, err := st.tables(rows)
	if err != nil {
		return nil, nil, err
	}
	tok, lrows := make([]uint32, n), make([]uint32, n)
	pos := make([]uint32, k*ch.rows)
	draws := make([]shaders.ArgmaxDraw, k*ch.rows)
	for i, row := range rows {
		tok[i], lrows[i] = uint32(row.Token), uint32(i)
		for s := range k {
			pos[s*ch.rows+i] = uint32(row.Pos + s)
			if row.Temp > 0 {
				draws[s*ch.rows+i] = argmaxDraw(row.Draw, us[i][s])
			}
		}
	}
	if err := st.growTables(len(words)); err != nil {
		return nil, nil, err
	}
	rec, err := st.chainRecording(n, k)
	if err != nil {
		return nil, nil, err
	}
	t1 := time.Now()
	for _, up := range []struct {
		b *vk.Buffer
		x []byte
	}{{st.tok, u32Bytes(tok)}, {ch.pos, u32Bytes(pos)}, {ch.draws, shaders.ArgmaxDrawBytes(draws)}, {pf.rowSeq, u32Bytes(seq)},
		{pf.rmeta, u32Bytes(rmeta)}, {pf.tables, u32Bytes(words)}, {pf.lrows, u32Bytes(lrows)}, {pf.lcount, u32Bytes([]uint32{uint32(n)})}} {
		if len(up.x) == 0 {
			continue
		}
		if err := up.b.Upload(up.x, 0); err != nil {
			return nil, nil, fmt.Errorf("vulkan: a chain's composition: %w", err)
		}
	}
	t2 := time.Now()
	if err := r.dev.Run(rec); err != nil {
		return nil, nil, fmt.Errorf("vulkan: a chain of %d steps of %d rows: %w", k, n, err)
	}
	t3 := time.Now()
	got, err := downloadU32(ch.ids, k*ch.rows)
	if err != nil {
		return nil, nil, fmt.Errorf("vulkan: a chain's draws: %w", err)
	}
	ids = make([][]int32, k)
	for s := range k {
		ids[s] = make([]int32, n)
		for i := range n {
			id := int32(got[s*ch.rows+i])
			if uint32(id) == shaders.ArgmaxNonFinite {
				id = sched.ArgmaxNonFinite
			}
			ids[s][i] = id
		}
	}
	if nr > 0 {
		raw := make([]byte, ch.trace.Size())
		if err := ch.trace.Download(raw, 0); err != nil {
			return nil, nil, fmt.Errorf("vulkan: a chain's routing: %w", err)
		}
		tb := int(st.trace.Size())
		routes = make([][][]mod.Route, k)
		for s := range k {
			routes[s] = st.decodeRoutes(raw[s*tb:(s+1)*tb], rows)
		}
	}
	ph := &st.phases
	ph.Steps, ph.Rows, ph.Argmax, ph.Chains = ph.Steps+k, ph.Rows+k*n, ph.Argmax+k*n, ph.Chains+1
	ph.Compose += t1.Sub(t0)
	ph.Upload += t2.Sub(t1)
	ph.Run += t3.Sub(t2)
	ph.Logits += time.Since(t3) // the ids and the routing read back
	return ids, routes, nil
}

// chainRows checks a chain's rows: each its sequence's only one, an
// Argmax row with a uniform number a step where it draws, and room in its
// tables for k steps (tables checks the pages are the pool's).
func (st *Stepper) chainRows(rows []sched.Row, k int, us [][]float64) error {
	seen := make(map[*sched.Seq]bool, len(rows))
	for i, row := range rows {
		q := row.Seq
		switch {
		case !row.Logits || !row.Argmax:
			return fmt.Errorf("vulkan: chain row %d does not want its argmax alone (Row.Argmax)", i)
		case seen[q]:
			return fmt.Errorf("vulkan: chain rows of one sequence (row %d): a chain takes one row a sequence", i)
		case row.Token < 0 || int(row.Token) >= st.r.c.NVocab || row.Pos < 0 || row.Pos+k > st.r.ctx:
			return fmt.Errorf("vulkan: chain row %d: token %d at position %d, %d steps: outside the vocabulary [0, %d) or the context %d", i, row.Token, row.Pos, k, st.r.c.NVocab, st.r.ctx)
		case ((row.Pos+k-1)/st.bt+1)*q.Dense.Width > len(q.Dense.Pages):
			return fmt.Errorf("vulkan: chain row %d: position %d has no page in its table", i, row.Pos+k-1)
		}
		seen[q] = true
		for j, t := range q.Routed {
			if (t.Len+k-1)/st.bt+1 > len(t.Pages) {
				return fmt.Errorf("vulkan: chain row %d: routed layer %d's table has no page for entry %d", i, j, t.Len+k-1)
			}
		}
		if row.Temp > 0 {
			if !st.r.draws {
				return fmt.Errorf("vulkan: chain row %d: a draw at temperature %g: the head's %s does not draw", i, row.Temp, st.r.headArgmax())
			}
			if len(us[i]) < k {
				return fmt.Errorf("vulkan: chain row %d: %d uniform numbers for %d steps", i, len(us[i]), k)
			}
			for _, u := range us[i][:k] {
				if err := checkDraw(row.Draw, u); err != nil {
					return fmt.Errorf("vulkan: chain row %d: %w", i, err)
				}
			}
		}
	}
	return nil
}

// decodeRoutes is the routing of rows in a trace's bytes ([nRouted][3][ub]:
// r, p, selected), each sequence's routed tables advanced by the rows
// they took.
func (st *Stepper) decodeRoutes(raw []byte, rows []sched.Row) [][]mod.Route {
	n, nr, ub := len(rows), st.nRouted, st.ub
	word := func(j, field, i int) uint32 { return binary.LittleEndian.Uint32(raw[4*((3*j+field)*ub+i):]) }
	field := 0 // the score that decided
	if st.r.routing == mod.RoutingPredictor {
		field = 1
	}
	routed := st.r.c.RoutedLayers()
	flat := make([]mod.Route, n*nr)
	out := make([][]mod.Route, n)
	for i := range out {
		out[i] = flat[i*nr : (i+1)*nr]
		for j, l := range routed {
			sel := word(j, 2, i) != 0
			out[i][j] = mod.Route{Layer: l, Score: math.Float32frombits(word(j, field, i)), Selected: sel}
			if sel {
				rows[i].Seq.Routed[j].Len++
			}
		}
	}
	return out
}

var _ sched.ChainRunner = (*Stepper)(nil)
