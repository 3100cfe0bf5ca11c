package modrun_test

import (
	"context"
	"testing"

	"github.com/modrun/modrun"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKVPages: a model with a page pool reports its pages, some in use
// while a session generates; one without reports none.
func TestKVPages(t *testing.T) {
	inUse, total, bt := open(t, modrun.Options{Backend: modrun.BackendCPU}).KVPages()
	assert.Equal(t, [3]int{0, 0, 0}, [3]int{inUse, total, bt}, "no pool: sessions take turns on one cache")

	m := open(t, modrun.Options{Backend: modrun.BackendCPU, Parallel: 2})
	inUse, total, bt = m.KVPages()
	assert.Zero(t, inUse)
	assert.Positive(t, total)
	assert.Positive(t, bt)
	held := 0
	_, err := m.NewSession().Generate(context.Background(), "Once upon a time", modrun.GenerateOptions{MaxTokens: 40}, func(tk modrun.Token) error {
		if tk.Pos == 40 {
			held, _, _ = m.KVPages()
		}
		return nil
	})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, held, 40/bt, "40 tokens fill at least %d pages of %d tokens", 40/bt, bt)
}
