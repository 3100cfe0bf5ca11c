package sched

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPoolRefcounts(t *testing.T) {
	p, err := NewPool(4, 16)
	require.NoError(t, err)
	a, ok := p.alloc()
	require.True(t, ok)
	assert.Equal(t, 1, p.Refs(a))
	p.retain(a)
	p.release(a)
	assert.Equal(t, 1, p.Refs(a), "a page with a reference left stays taken")
	assert.Equal(t, 3, p.Free())
	p.release(a)
	assert.Equal(t, 4, p.Free())
	assert.Panics(t, func() { p.release(a) }, "a double free is a broken invariant")
	for range 4 {
		_, ok := p.alloc()
		require.True(t, ok)
	}
	_, ok = p.alloc()
	assert.False(t, ok, "an empty pool says so")
	_, err = NewPool(0, 16)
	assert.Error(t, err)
}

// A table's reserve copies the shared partial block it writes next and
// leaves full shared blocks shared.
func TestTableCopyOnWrite(t *testing.T) {
	p, err := NewPool(16, 4)
	require.NoError(t, err)
	var copies [][2]int32
	cp := func(dst, src int32) { copies = append(copies, [2]int32{dst, src}) }
	a := Table{Width: 2}
	require.Equal(t, 4, a.need(p, 6)) // two blocks of two layers
	a.reserve(p, 6, cp)
	a.Len = 6
	b := Table{Width: 2}
	b.share(p, a.Pages, 6) // b reads all of a's entries: block 1 is partial
	for _, page := range a.Pages {
		assert.Equal(t, 2, p.Refs(page))
	}
	assert.Equal(t, 2, b.need(p, 7), "the partial shared block is copied, per layer")
	b.reserve(p, 7, cp)
	assert.Len(t, copies, 2)
	assert.Equal(t, a.Pages[:2], b.Pages[:2], "the full block stays shared")
	assert.NotEqual(t, a.Pages[2:], b.Pages[2:], "the written block is b's own")
	assert.Equal(t, a.Pages[2], copies[0][1])
	assert.Equal(t, 1, p.Refs(a.Pages[2]))
	assert.Equal(t, 0, a.need(p, 8), "a's block is its own again: no copy")
	b.Len = 7
	b.reserve(p, 12, cp) // a third block
	assert.Len(t, b.Pages, 6)
	b.trim(p)
	assert.Len(t, b.Pages, 4, "trim gives back the pages past Len")
	a.release(p)
	b.release(p)
	assert.Equal(t, 16, p.Free())
}

func TestChainHash(t *testing.T) {
	x := []int32{1, 2, 3, 4}
	assert.Equal(t, chainHash(0, x), chainHash(0, x))
	assert.NotEqual(t, chainHash(0, x), chainHash(chainHash(0, x), x), "the parent is part of the hash")
	assert.NotEqual(t, chainHash(0, x), chainHash(0, []int32{1, 2, 4, 3}), "order matters")
}
