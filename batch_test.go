package modrun

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// turn is one Generate call of a conversation and what it gave.
type turn struct {
	prompt string
	opts   GenerateOptions
}

type turnOut struct {
	tokens []Token
	res    Result
}

// converse runs turns on a fresh session of m.
func converse(t *testing.T, m *Model, turns []turn) []turnOut {
	s := m.NewSession()
	defer s.Close()
	var out []turnOut
	for _, tr := range turns {
		var o turnOut
		var err error
		o.res, err = s.Generate(context.Background(), tr.prompt, tr.opts, func(tk Token) error {
			o.tokens = append(o.tokens, tk)
			return nil
		})
		require.NoError(t, err)
		out = append(out, o)
	}
	return out
}

// Eight goroutines converse on eight sessions of one model with Parallel
// 8: their steps are shared (more rows than steps), a session's later
// turns reuse its cached history instead of feeding it again, and every
// token, its text, routing and log-probability, and every result's stop
// and layer counts equal those of the same conversation on a model whose
// sessions take turns. On the CPU and on Vulkan (lavapipe here; skipped
// without a device).
func TestParallelSessionsShareSteps(t *testing.T) {
	for _, backend := range []string{BackendCPU, BackendVulkan} {
		t.Run(backend, func(t *testing.T) { parallelSessionsShareSteps(t, backend) })
	}
}

func parallelSessionsShareSteps(t *testing.T, backend string) {
	alone, err := Open("models/tinystories-mod.gguf", Options{Backend: backend})
	if backend == BackendVulkan && err != nil {
		t.Skipf("no Vulkan device: %v", err)
	}
	require.NoError(t, err)
	defer alone.Close()
	goroutines := runtime.NumGoroutine()
	m, err := Open("models/tinystories-mod.gguf", Options{Backend: backend, Parallel: 8})
	require.NoError(t, err)
	require.True(t, m.loop.Batched(), "the backend runs sessions in shared steps")
	convs := make([][]turn, 8)
	for i := range convs {
		sampled := GenerateOptions{MaxTokens: 6 + i, Temperature: 0.8, Seed: uint64(i), LogProbs: true, TopLogProbs: 2}
		convs[i] = []turn{
			{fmt.Sprintf("Once upon a time there was a %s named", []string{"cat", "dog", "girl", "boy", "bird", "fish", "king", "frog"}[i]), GenerateOptions{MaxTokens: 10 + i}},
			{" and then", sampled},
			{" The end. One day", GenerateOptions{MaxTokens: 5, RepeatPenalty: 1.3}},
		}
	}
	want := make([][]turnOut, len(convs))
	for i, c := range convs {
		want[i] = converse(t, alone, c)
	}
	got := make([][]turnOut, len(convs))
	var wg sync.WaitGroup
	start := make(chan struct{}) // the conversations start together, to overlap
	for i, c := range convs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i] = converse(t, m, c)
		}()
	}
	close(start)
	wg.Wait()
	for i := range convs {
		for j := range convs[i] {
			w, g := want[i][j], got[i][j]
			require.Equal(t, len(w.tokens), len(g.tokens), "conversation %d turn %d", i, j)
			for k := range w.tokens {
				a, b := w.tokens[k], g.tokens[k]
				assert.Equal(t, a.ID, b.ID, "conversation %d turn %d token %d", i, j, k)
				assert.Equal(t, a.Text, b.Text)
				assert.Equal(t, a.Pos, b.Pos)
				assert.Equal(t, a.Prompt, b.Prompt)
				assert.InDelta(t, a.LogProb, b.LogProb, 1e-3)
				require.Equal(t, len(a.Routes), len(b.Routes), "conversation %d turn %d token %d", i, j, k)
				for r := range a.Routes {
					assert.Equal(t, a.Routes[r].Selected, b.Routes[r].Selected)
				}
			}
			assert.Equal(t, w.res.Stop, g.res.Stop)
			assert.Equal(t, w.res.Tokens, g.res.Tokens)
			assert.Equal(t, w.res.Layers, g.res.Layers, "conversation %d turn %d", i, j)
		}
	}
	st := m.loop.Stats()
	t.Logf("%d steps (%d shared, up to %d sequences), %d rows, %d tokens reused from the sessions' caches", st.Steps, st.SharedSteps, st.MaxSeqsInStep, st.Rows, st.ReusedTokens)
	// How many steps the sessions share depends on how their goroutines
	// overlap in time: most of them on a 2-core machine, 40 of 99 on the
	// H200 machine's 16 cores (2026-11-27), where each session's turns run
	// ahead of the others'. That batching happens at all is what matters.
	assert.Positive(t, st.SharedSteps, "sessions shared steps")
	assert.GreaterOrEqual(t, st.MaxSeqsInStep, 4)
	assert.Positive(t, st.ReusedTokens, "later turns did not feed their history again")
	require.NoError(t, m.Close())
	for wait := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > goroutines && time.Now().Before(wait); {
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), goroutines, "the stepping goroutine ended")
}

// A KV budget too small for the sessions at once makes them wait, and
// each still gives its tokens; a budget too small for one sequence is an
// error naming it.
func TestParallelKVBudget(t *testing.T) {
	alone, err := Open("models/tinystories-mod.gguf", Options{Backend: BackendCPU, ContextLen: 64})
	require.NoError(t, err)
	defer alone.Close()
	info := alone.Info()
	page := int64(2 * 16 * info.NKVHead * (info.NEmbd / info.NHead) * 4) // 16 entries of K and V, f32
	// A sequence of 45 tokens takes 3 blocks of every layer, and the
	// scheduler wants room for 5 (two for a step's reservation and a copied
	// page) to take it at all: room for one and two thirds of the four.
	m, err := Open("models/tinystories-mod.gguf", Options{Backend: BackendCPU, Parallel: 4, ContextLen: 64, KVBudget: page * int64(info.NLayer) * 5})
	require.NoError(t, err)
	defer m.Close()
	fourAtOnceMatchAlone(t, m, alone)
	st := m.loop.Stats()
	t.Logf("budget %d pages: %d waits, %d preemptions, at most %d pages", m.loop.PoolPages(), st.Waits, st.Preemptions, st.MaxPagesInUse)
	assert.Positive(t, st.Waits+st.Preemptions, "the small budget made sessions wait")

	small, err := Open("models/tinystories-mod.gguf", Options{Backend: BackendCPU, Parallel: 2, KVBudget: 4096})
	require.NoError(t, err)
	defer small.Close()
	_, err = small.NewSession().Generate(context.Background(), "Once", GenerateOptions{MaxTokens: 4}, nil)
	assert.ErrorContains(t, err, "KV budget")
}

// With KVType f16 on the CPU the sessions' pages hold halves: the same KV
// budget holds twice the pages of f32, Info says f16, and four sessions at
// once give the tokens of one run alone with an F16 cache.
func TestParallelKVF16(t *testing.T) {
	alone, err := Open("models/tinystories-mod.gguf", Options{Backend: BackendCPU, ContextLen: 64, KVType: "f16"})
	require.NoError(t, err)
	defer alone.Close()
	assert.Equal(t, "f16", alone.Info().KVType)
	const budget = 1 << 20
	f32, err := Open("models/tinystories-mod.gguf", Options{Backend: BackendCPU, Parallel: 4, ContextLen: 64, KVBudget: budget})
	require.NoError(t, err)
	defer f32.Close()
	assert.Equal(t, "f32", f32.Info().KVType)
	m, err := Open("models/tinystories-mod.gguf", Options{Backend: BackendCPU, Parallel: 4, ContextLen: 64, KVBudget: budget, KVType: "f16"})
	require.NoError(t, err)
	defer m.Close()
	assert.Equal(t, "f16", m.Info().KVType)
	assert.Equal(t, 2*f32.loop.PoolPages(), m.loop.PoolPages(), "the budget holds twice the pages")

	fourAtOnceMatchAlone(t, m, alone)
}

// fourAtOnceMatchAlone runs four sessions of m at once, each one turn of
// 40 tokens, and checks each one's tokens are alone's.
func fourAtOnceMatchAlone(t *testing.T, m, alone *Model) {
	t.Helper()
	var wg sync.WaitGroup
	outs := make([][]turnOut, 4)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = converse(t, m, []turn{{"Once upon a time", GenerateOptions{MaxTokens: 40}}})
		}()
	}
	wg.Wait()
	want := converse(t, alone, []turn{{"Once upon a time", GenerateOptions{MaxTokens: 40}}})
	for i := range outs {
		require.Equal(t, len(want[0].tokens), len(outs[i][0].tokens))
		for k := range want[0].tokens {
			assert.Equal(t, want[0].tokens[k].ID, outs[i][0].tokens[k].ID)
		}
	}
}
