// Package sched runs many sequences of one model at once (DESIGN.md §8):
// a pool of fixed-size KV pages with a block table per sequence (pool.go),
// prefix reuse of full token blocks (prefix.go), and the scheduler that
// packs each step's rows and hands them to a backend's StepRunner
// (sched.go). It knows nothing of any backend: a StepRunner owns the pages'
// memory, indexed by page id, and this package owns which page holds what.
package sched

import "fmt"

// Pool hands out pages: each holds BlockTokens entries of one layer's keys
// and values (the memory is the StepRunner's, indexed by page id). A page
// has a reference count: a sequence's table holds one, a prefix-cache
// entry another, so a shared page is copied before it is written
// (copy-on-write, Table.own).
type Pool struct {
	blockTokens int
	refs        []int32 // [pages] 0 = free
	free        []int32 // free page ids, the most recently freed last
}

// NewPool is a pool of pages pages of blockTokens entries each.
func NewPool(pages, blockTokens int) (*Pool, error) {
	if pages <= 0 || blockTokens <= 0 {
		return nil, fmt.Errorf("sched: a pool of %d pages of %d tokens: both must be positive", pages, blockTokens)
	}
	p := &Pool{blockTokens: blockTokens, refs: make([]int32, pages), free: make([]int32, pages)}
	for i := range p.free { // page 0 is handed out first
		p.free[i] = int32(pages - 1 - i)
	}
	return p, nil
}

// BlockTokens is the entries a page holds.
func (p *Pool) BlockTokens() int { return p.blockTokens }

// Pages is the pool's size; Free how many pages are unused.
func (p *Pool) Pages() int { return len(p.refs) }
func (p *Pool) Free() int  { return len(p.free) }

// Refs is page's reference count (0: free).
func (p *Pool) Refs(page int32) int { return int(p.refs[page]) }

// alloc takes a free page with one reference; ok is false when none is free.
func (p *Pool) alloc() (page int32, ok bool) {
	if len(p.free) == 0 {
		return -1, false
	}
	page = p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.refs[page] = 1
	return page, true
}

func (p *Pool) mustAlloc() int32 {
	page, ok := p.alloc()
	if !ok {
		panic("sched: the pool ran out of pages its caller counted")
	}
	return page
}

func (p *Pool) retain(page int32) {
	if p.refs[page] <= 0 {
		panic(fmt.Sprintf("sched: retain of free page %d", page))
	}
	p.refs[page]++
}

func (p *Pool) release(page int32) {
	switch p.refs[page] {
	case 0:
		panic(fmt.Sprintf("sched: release of free page %d", page))
	case 1:
		p.free = append(p.free, page)
	}
	p.refs[page]--
}

// Table is a block table: the pages holding a sequence's entries of one
// layer, or of every dense layer at once (Width pages per block of
// BlockTokens tokens: logical block b of dense layer i is page
// Pages[b*Width+i], since every dense layer holds every token). A routed
// layer's table has Width 1 and holds its compact cache: entry e is the
// e-th token the layer selected, in position order.
type Table struct {
	Width int
	Pages []int32 // [blocks*Width]
	Len   int     // entries written
}

// Page is the page holding entry e of the table's i-th layer, and the
// entry's slot in it.
func (t *Table) Page(i, e, blockTokens int) (page int32, slot int) {
	return t.Pages[(e/blockTokens)*t.Width+i], e % blockTokens
}

// blocks is how many blocks the table holds pages for.
func (t *Table) blocks() int { return len(t.Pages) / t.Width }

// need is how many pages reserve(p, n) takes: a copy of each page of the
// block that entry Len falls in when it is shared and written next, and
// the pages of the blocks up to n entries.
func (t *Table) need(p *Pool, n int) int {
	bt, k := p.blockTokens, 0
	if t.Len%bt != 0 && t.Len < n {
		b := t.Len / bt
		for i := range t.Width {
			if p.refs[t.Pages[b*t.Width+i]] > 1 {
				k++
			}
		}
	}
	if blocks := (n + bt - 1) / bt; blocks > t.blocks() {
		k += (blocks - t.blocks()) * t.Width
	}
	return k
}

// reserve grows the table to hold n entries, taking pages from p, and
// copies (cp) the block that entry Len falls in when it is shared, so that
// a write never reaches a page another table or the prefix cache reads.
// The caller has checked need(p, n) against p.Free().
func (t *Table) reserve(p *Pool, n int, cp func(dst, src int32)) {
	bt := p.blockTokens
	if t.Len%bt != 0 && t.Len < n {
		b := t.Len / bt
		for i := range t.Width {
			src := t.Pages[b*t.Width+i]
			if p.refs[src] == 1 {
				continue
			}
			dst := p.mustAlloc()
			cp(dst, src)
			p.release(src)
			t.Pages[b*t.Width+i] = dst
		}
	}
	for t.blocks()*bt < n {
		for range t.Width {
			t.Pages = append(t.Pages, p.mustAlloc())
		}
	}
}

// trim gives back the pages past the ones that hold Len entries (a routed
// layer's table reserves room for every row of a step; its router keeps
// some).
func (t *Table) trim(p *Pool) {
	bt := p.blockTokens
	keep := (t.Len + bt - 1) / bt * t.Width
	if len(t.Pages) > keep {
		for _, page := range t.Pages[keep:] {
			p.release(page)
		}
		t.Pages = t.Pages[:keep]
	}
}

// release gives every page back and empties the table.
func (t *Table) release(p *Pool) {
	for _, page := range t.Pages {
		p.release(page)
	}
	t.Pages, t.Len = t.Pages[:0], 0
}

// share makes t hold n entries in pages (each retained): a prefix cache
// entry's.
func (t *Table) share(p *Pool, pages []int32, n int) {
	t.Pages = append(t.Pages[:0], pages...)
	for _, page := range pages {
		p.retain(page)
	}
	t.Len = n
}
