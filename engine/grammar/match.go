package grammar

import (
	"fmt"
	"math/bits"
	"slices"
	"unsafe"
)

// The recognizer keeps llama.cpp's grammar state: a set of stacks, each
// the positions still to match, its top always a terminal (or the empty
// stack: the text may end here). A byte moves every stack whose top
// matches it past that terminal and expands what follows. Stacks are
// interned (a node is a position and the node below it), so a set of
// stacks is a short list of ints: expansions and advances are computed once
// per node and the mask of a set seen before is looked up, not recomputed
// (inside a JSON string each character brings the same set back).

// maxMasks is how many masks a Matcher keeps; past it the cache starts
// over (a mask is the vocabulary's size in bits).
const maxMasks = 1024

type stackNode struct{ pos, below int32 }

// A Matcher is one sequence's state under a Grammar: which tokens may come
// next (Mask, Allowed) and the tokens drawn (Accept). Not safe for
// concurrent use; each sequence has its own.
type Matcher struct {
	g *Grammar
	v *Vocab

	nodes    []stackNode // node 0: the empty stack
	index    map[uint64]int32
	expanded [][]int32 // node -> the terminal-topped (or empty) stacks it expands to; nil: not yet
	advanced [][]int32 // terminal-topped node -> the stacks after matching its terminal
	ended    bool      // an end-of-generation token was accepted

	// Sets of stacks, interned: sets[id] sorted, trans[id][c] the set
	// after byte c plus one (0: not computed yet).
	sets   [][]int32
	setIdx map[string]int32
	trans  [][256]int32
	state  int32 // the current set

	masks  map[int32][]uint64 // by set
	seen   []uint32           // dedup stamps, by node
	stamp  uint32
	buf    []int32
	frames []struct{ e, end, sid int32 }
}

// NewMatcher starts g over v at the beginning of the text.
func NewMatcher(g *Grammar, v *Vocab) *Matcher {
	m := &Matcher{g: g, v: v, nodes: []stackNode{{-1, -1}}, index: map[uint64]int32{}, setIdx: map[string]int32{}, masks: map[int32][]uint64{}}
	m.expanded = [][]int32{{0}}
	m.advanced = [][]int32{nil}
	m.internSet(nil) // deadSet
	m.state = m.internSet(m.expandRef(g.root, 0))
	return m
}

func (m *Matcher) intern(pos, below int32) int32 {
	key := uint64(uint32(pos))<<32 | uint64(uint32(below))
	if id, ok := m.index[key]; ok {
		return id
	}
	id := int32(len(m.nodes))
	m.nodes = append(m.nodes, stackNode{pos, below})
	m.expanded = append(m.expanded, nil)
	m.advanced = append(m.advanced, nil)
	m.index[key] = id
	return id
}

// expand is the terminal-topped stacks node id stands for.
func (m *Matcher) expand(id int32) []int32 {
	if e := m.expanded[id]; e != nil {
		return e
	}
	n := m.nodes[id]
	var out []int32
	switch e := m.g.code[n.pos]; e.kind {
	case elemEnd:
		out = m.expand(n.below)
	case elemTerm:
		out = []int32{id}
	case elemRef:
		below := n.below // a reference that ends its alternative pops at once: no stack growth on x*
		if m.g.code[n.pos+1].kind != elemEnd {
			below = m.intern(n.pos+1, n.below)
		}
		out = m.expandRef(e.arg, below)
	}
	m.expanded[id] = out
	return out
}

// expandRef is the stacks of rule r's alternatives over below.
func (m *Matcher) expandRef(r, below int32) []int32 {
	var out []int32
	for _, a := range m.g.alts[r] {
		out = append(out, m.expand(m.intern(a, below))...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// advance is the stacks after node id's top terminal matched a byte.
func (m *Matcher) advance(id int32) []int32 {
	if a := m.advanced[id]; a != nil {
		return a
	}
	n := m.nodes[id]
	a := m.expand(m.intern(n.pos+1, n.below))
	m.advanced[id] = a
	return a
}

// step appends to dst the set after byte c from set (deduplicated, unsorted).
func (m *Matcher) step(dst, set []int32, c byte) []int32 {
	m.stamp++
	if m.stamp == 0 { // wrapped: old stamps could collide
		clear(m.seen)
		m.stamp = 1
	}
	for _, s := range set {
		if s == 0 || !m.g.terms[m.g.code[m.nodes[s].pos].arg].has(c) {
			continue
		}
		for _, t := range m.advance(s) {
			if int(t) >= len(m.seen) {
				m.seen = append(m.seen, make([]uint32, max(int(t)+1, 2*len(m.seen))-len(m.seen))...)
			}
			if m.seen[t] != m.stamp {
				m.seen[t] = m.stamp
				dst = append(dst, t)
			}
		}
	}
	return dst
}

// internSet is the id of set (sorted), adding it if new.
func (m *Matcher) internSet(set []int32) int32 {
	key := unsafe.String((*byte)(unsafe.Pointer(unsafe.SliceData(set))), 4*len(set))
	if id, ok := m.setIdx[key]; ok {
		return id
	}
	id := int32(len(m.sets))
	m.sets = append(m.sets, slices.Clone(set))
	m.trans = append(m.trans, [256]int32{})
	m.setIdx[string([]byte(key))] = id
	return id
}

// next is the set after byte c from set sid: its id, or deadSet. A trie
// walk mostly meets sets it has met before (inside a string each
// character leads back to the same set), so each (set, byte) is computed
// once and then looked up.
func (m *Matcher) next(sid int32, c byte) int32 {
	if t := m.trans[sid][c]; t != 0 {
		return t - 1
	}
	n := m.step(m.buf[:0], m.sets[sid], c)
	m.buf = n
	slices.Sort(n)
	t := m.internSet(n)
	m.trans[sid][c] = t + 1
	return t
}

// deadSet is the empty set: no text continues from it.
const deadSet = 0

// maxSets bounds the interned sets; past it, Accept starts the tables over.
const maxSets = 1 << 14

// CanEnd says whether the text so far is a sentence of the grammar.
func (m *Matcher) CanEnd() bool {
	set := m.sets[m.state]
	return !m.ended && len(set) > 0 && set[0] == 0
}

// Ended says whether an end-of-generation token was accepted.
func (m *Matcher) Ended() bool { return m.ended }

// Allowed says whether token id may come next.
func (m *Matcher) Allowed(id int32) bool {
	if id < 0 || int(id) >= m.v.n || m.ended {
		return false
	}
	if m.v.eog[id] {
		return m.CanEnd()
	}
	b := m.v.bytes[id]
	if b == nil {
		return false
	}
	sid := m.state
	for _, c := range b {
		if sid = m.next(sid, c); sid == deadSet {
			return false
		}
	}
	return true
}

// Accept moves past token id, which must be Allowed.
func (m *Matcher) Accept(id int32) error {
	if !m.Allowed(id) {
		return fmt.Errorf("grammar: token %d does not continue the text inside the grammar", id)
	}
	if m.v.eog[id] {
		m.ended = true
		return nil
	}
	for _, c := range m.v.bytes[id] {
		m.state = m.next(m.state, c)
	}
	if len(m.sets) > maxSets {
		m.resetSets()
	}
	return nil
}

// resetSets forgets every set but the state's (and the masks keyed by them).
func (m *Matcher) resetSets() {
	state := m.sets[m.state]
	m.sets, m.trans, m.setIdx = m.sets[:0], m.trans[:0], map[string]int32{}
	clear(m.masks)
	m.internSet(nil) // deadSet
	m.state = m.internSet(state)
}

// Mask sets bit id of mask (len >= (Vocab.Len()+63)/64 words) for each
// token that may come next, clears the others, and returns how many are set.
func (m *Matcher) Mask(mask []uint64) int {
	words := (m.v.n + 63) / 64
	mask = mask[:words]
	if cached, ok := m.masks[m.state]; ok && !m.ended {
		copy(mask, cached)
		return popcount(mask)
	}
	clear(mask)
	if m.ended {
		return 0
	}
	if m.CanEnd() {
		for id, e := range m.v.eog {
			if e {
				mask[id>>6] |= 1 << (id & 63)
			}
		}
	}
	m.walk(mask, m.state)
	if len(m.masks) >= maxMasks {
		clear(m.masks)
	}
	m.masks[m.state] = slices.Clone(mask)
	return popcount(mask)
}

// walk marks the tokens below the trie's root that set sid lets through:
// a depth-first walk with its own stack (a call per trie node was a third
// of a mask's time), each edge one lookup in sid's transitions once
// those are known.
func (m *Matcher) walk(mask []uint64, sid int32) {
	v := m.v
	type frame struct{ e, end, sid int32 }
	stack := append(m.frames[:0], frame{v.edgeStart[0], v.edgeStart[1], sid})
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		if f.e == f.end {
			stack = stack[:len(stack)-1]
			continue
		}
		e := f.e
		f.e++
		c := v.edgeByte[e]
		n := m.trans[f.sid][c] - 1
		if n < 0 {
			n = m.next(f.sid, c)
		}
		if n == deadSet {
			continue
		}
		t := v.edgeChild[e]
		for _, id := range v.toks[v.tokStart[t]:v.tokStart[t+1]] {
			mask[id>>6] |= 1 << (id & 63)
		}
		if v.edgeStart[t] < v.edgeStart[t+1] {
			stack = append(stack, frame{v.edgeStart[t], v.edgeStart[t+1], n})
		}
	}
	m.frames = stack
}

func popcount(mask []uint64) int {
	n := 0
	for _, w := range mask {
		n += bits.OnesCount64(w)
	}
	return n
}
