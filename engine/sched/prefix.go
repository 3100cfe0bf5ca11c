package sched

import (
	"slices"

	"github.com/modrun/modrun/mod"
)

// prefixCache keeps the pages of sequences' full token blocks, keyed by a
// chain hash (block i's hash covers blocks 0..i), so that a new sequence
// whose tokens begin with a cached prefix shares those pages instead of
// prefilling them again (vLLM's automatic prefix caching, llama-server's
// cache_prompt). An entry holds everything a sequence needs to resume
// after its prefix: the dense pages of blocks 0..i and, for each routed
// layer, how many compact entries lie below the prefix's end and the pages
// that hold them. A routed layer's last page is usually partial; the
// reusing sequence shares it and copies it when it writes there
// (Table.reserve). Entries are evicted least recently used first when the
// pool runs short.
type prefixCache struct {
	entries map[uint64]*prefixEntry
	clock   uint64
}

type prefixEntry struct {
	parent uint64        // the hash of blocks 0..i-1 (0 for block 0)
	tokens []int32       // [blockTokens] block i's tokens, to tell a collision
	dense  []int32       // [(i+1)*denseWidth] pages of blocks 0..i
	routed []Table       // [routed layers] Len: entries below the block's end
	routes [][]mod.Route // [blockTokens][routed layers] the block's tokens' routing; nil for a dense model
	used   uint64        // clock of the last use
}

func newPrefixCache() *prefixCache { return &prefixCache{entries: map[uint64]*prefixEntry{}} }

// chainHash is FNV-1a over the parent's hash and a block's tokens.
func chainHash(parent uint64, tokens []int32) uint64 {
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		for range 8 {
			h ^= v & 0xff
			h *= 1099511628211
			v >>= 8
		}
	}
	mix(parent)
	for _, t := range tokens {
		mix(uint64(uint32(t)))
	}
	if h == 0 { // 0 is "no parent"
		h = 1
	}
	return h
}

// lookup is the entries of the longest prefix of tokens, in at most
// maxBlocks full blocks, that the cache holds, block by block (the last
// holds the pages of them all); empty when none.
func (c *prefixCache) lookup(tokens []int32, bt, maxBlocks int) []*prefixEntry {
	var parent uint64
	var chain []*prefixEntry
	for b := 0; b < maxBlocks && (b+1)*bt <= len(tokens); b++ {
		block := tokens[b*bt : (b+1)*bt]
		h := chainHash(parent, block)
		next, ok := c.entries[h]
		if !ok || next.parent != parent || !slices.Equal(next.tokens, block) {
			break
		}
		chain, parent = append(chain, next), h
	}
	if len(chain) > 0 {
		c.clock++
		chain[len(chain)-1].used = c.clock
	}
	return chain
}

// add records a sequence's block i (hash h, parent's hash parent) with its
// pages: dense pages of blocks 0..i and each routed layer's entries below
// the block's end (counts) in its table's pages, and its tokens' routing
// (routes). A block already cached is left as it is.
func (c *prefixCache) add(p *Pool, h, parent uint64, tokens []int32, dense []int32, routed []Table, counts []int, routes [][]mod.Route) {
	if _, ok := c.entries[h]; ok {
		return
	}
	bt := p.blockTokens
	e := &prefixEntry{parent: parent, tokens: slices.Clone(tokens), dense: slices.Clone(dense), routed: make([]Table, len(routed)), routes: routes}
	for _, page := range e.dense {
		p.retain(page)
	}
	for j, t := range routed {
		pages := slices.Clone(t.Pages[:(counts[j]+bt-1)/bt])
		for _, page := range pages {
			p.retain(page)
		}
		e.routed[j] = Table{Width: 1, Pages: pages, Len: counts[j]}
	}
	c.clock++
	e.used = c.clock
	c.entries[h] = e
}

// evict drops the least recently used entry, releasing its pages; false
// when the cache is empty.
func (c *prefixCache) evict(p *Pool) bool {
	var oldest uint64
	var victim *prefixEntry
	for h, e := range c.entries {
		if victim == nil || e.used < victim.used {
			oldest, victim = h, e
		}
	}
	if victim == nil {
		return false
	}
	delete(c.entries, oldest)
	for _, page := range victim.dense {
		p.release(page)
	}
	for j := range victim.routed {
		victim.routed[j].release(p)
	}
	return true
}

// pages is how many distinct pages the cache holds.
func (c *prefixCache) pages() int {
	seen := map[int32]bool{}
	for _, e := range c.entries {
		for _, page := range e.dense {
			seen[page] = true
		}
		for _, t := range e.routed {
			for _, page := range t.Pages {
				seen[page] = true
			}
		}
	}
	return len(seen)
}
