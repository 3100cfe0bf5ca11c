package sched

import (
	"fmt"

	"github.com/modrun/modrun/mod"
)

// fakeRunner is a StepRunner whose "model" is bookkeeping that checks
// itself: each row writes its (token, position) into its sequence's pages,
// then reads back every entry its attention would see and compares them
// with the sequence's own history, so a page shared wrongly, written past,
// freed early or copied badly is an error, not a quiet difference. Its
// logits are a hash of what it read, so a wrong read also changes the
// tokens. Routed layer j selects a token when hash(token, pos, j) % 3 == 0.
type fakeRunner struct {
	lay   Layout
	pages [][]int64 // [pages][blockTokens] token<<32 | pos, -1 = never written
	bt    int
	steps int
}

func newFake(dense, routed, ctx, vocab, pages, bt int) *fakeRunner {
	f := &fakeRunner{lay: Layout{DenseLayers: dense, RoutedLayers: routed, ContextLen: ctx, NVocab: vocab}, bt: bt}
	f.pages = make([][]int64, pages)
	for i := range f.pages {
		f.pages[i] = make([]int64, bt)
		for e := range f.pages[i] {
			f.pages[i][e] = -1
		}
	}
	return f
}

func (f *fakeRunner) Layout() Layout { return f.lay }

func (f *fakeRunner) CopyPage(dst, src int32) { copy(f.pages[dst], f.pages[src]) }

func entry(tok int32, pos int) int64 { return int64(tok)<<32 | int64(pos) }

func fakeSelects(tok int32, pos, j int) bool { return chainHash(uint64(pos*7+j), []int32{tok})%3 == 0 }

func (f *fakeRunner) Step(rows []Row, bt int) ([]float32, [][]mod.Route, error) {
	f.steps++
	var logits []float32
	routes := make([][]mod.Route, len(rows))
	for i, r := range rows {
		q := r.Seq
		if r.Token != q.tokens[r.Pos] {
			return nil, nil, fmt.Errorf("row %d: token %d, the sequence has %d at %d", i, r.Token, q.tokens[r.Pos], r.Pos)
		}
		h := uint64(0)
		for l := range f.lay.DenseLayers {
			page, slot := q.Dense.Page(l, r.Pos, bt)
			f.pages[page][slot] = entry(r.Token, r.Pos)
			for p := 0; p <= r.Pos; p++ { // attention over the sequence's own keys
				page, slot := q.Dense.Page(l, p, bt)
				got, want := f.pages[page][slot], entry(q.tokens[p], p)
				if got != want {
					return nil, nil, fmt.Errorf("seq %d dense layer %d: position %d reads %x, want %x", q.ID, l, p, got, want)
				}
				h = chainHash(h, []int32{int32(got)})
			}
		}
		routes[i] = make([]mod.Route, f.lay.RoutedLayers)
		for j := range f.lay.RoutedLayers {
			t := &q.Routed[j]
			routes[i][j].Layer = j
			if !fakeSelects(r.Token, r.Pos, j) {
				continue
			}
			routes[i][j].Selected = true
			page, slot := t.Page(0, t.Len, bt)
			f.pages[page][slot] = entry(r.Token, r.Pos)
			t.Len++
			e := 0
			for p := 0; p <= r.Pos; p++ {
				if !fakeSelects(q.tokens[p], p, j) {
					continue
				}
				page, slot := t.Page(0, e, bt)
				got, want := f.pages[page][slot], entry(q.tokens[p], p)
				if got != want {
					return nil, nil, fmt.Errorf("seq %d routed layer %d: entry %d reads %x, want %x", q.ID, j, e, got, want)
				}
				h = chainHash(h, []int32{int32(got)})
				e++
			}
			if e != t.Len {
				return nil, nil, fmt.Errorf("seq %d routed layer %d: %d entries, the table says %d", q.ID, j, e, t.Len)
			}
		}
		if r.Logits {
			for v := range f.lay.NVocab {
				logits = append(logits, float32(chainHash(h, []int32{int32(v)})%1000))
			}
		}
	}
	if f.lay.RoutedLayers == 0 {
		routes = nil
	}
	return logits, routes, nil
}

// argmaxFake is fakeRunner as an ArgmaxRunner: an Argmax row gives the
// argmax of the logits the fake would have given (ties to the lower id),
// or ArgmaxNonFinite for a sequence in nonFinite; bad gives an id outside
// the vocabulary instead. It counts the rows of each kind and which
// sequences had Argmax rows.
type argmaxFake struct {
	*fakeRunner
	nonFinite             map[int]bool
	bad                   bool
	argmaxRows, logitRows int
	argmaxSeqs            map[int]bool
}

func (f *argmaxFake) StepArgmax(rows []Row, bt int) ([]float32, []int32, [][]mod.Route, error) {
	all, routes, err := f.fakeRunner.Step(rows, bt)
	if err != nil {
		return nil, nil, nil, err
	}
	if f.argmaxSeqs == nil {
		f.argmaxSeqs = map[int]bool{}
	}
	nv := f.lay.NVocab
	var logits []float32
	var ids []int32
	k := 0
	for _, r := range rows {
		if !r.Logits {
			continue
		}
		x := all[k*nv : (k+1)*nv]
		k++
		if !r.Argmax {
			f.logitRows++
			logits = append(logits, x...)
			continue
		}
		f.argmaxRows++
		f.argmaxSeqs[r.Seq.ID] = true
		id := int32(0)
		for i, v := range x {
			if v > x[id] {
				id = int32(i)
			}
		}
		switch {
		case f.nonFinite[r.Seq.ID]:
			id = ArgmaxNonFinite
		case f.bad:
			id = int32(nv)
		}
		ids = append(ids, id)
	}
	return logits, ids, routes, nil
}
