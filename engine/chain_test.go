package engine

import (
	"context"
	"testing"

	"github.com/modrun/modrun/engine/vulkan"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chainFake is a tracingFake that chains greedy steps (GreedyChainer) and
// drops tokens (Truncater), recording each chain's length and each
// truncation; its argmax after position p is next[p], whatever the tokens.
type chainFake struct {
	tracingFake
	steps  int
	chains []int
	truncs []int
}

func (f *chainFake) FeedArgmax(tokens []int32) (int32, error) {
	if _, err := f.Feed(tokens); err != nil {
		return 0, err
	}
	return f.next[f.pos-1], nil
}

func (f *chainFake) ChainSteps() int { return f.steps }

func (f *chainFake) FeedArgmaxChain(token int32, n int) ([]int32, error) {
	f.chains = append(f.chains, n)
	fed := []int32{token}
	for len(fed) < n {
		fed = append(fed, f.next[f.pos+len(fed)-1])
	}
	f.feeds = append(f.feeds, fed)
	f.last = fed
	f.pos += n
	return append([]int32(nil), f.next[f.pos-n:f.pos]...), nil
}

// RoutingStats counts the tokens the runner holds as one routed layer's.
func (f *chainFake) RoutingStats() []LayerStat {
	return []LayerStat{{Layer: 1, Selected: f.pos, Seen: f.pos}}
}

func (f *chainFake) Truncate(p int) error {
	f.truncs = append(f.truncs, p)
	f.pos = p
	return nil
}

// TestLoopChains: greedy rows of a runner that chains take the tokens a
// chain ran ahead without running them, and come out as one step at a
// time: the same tokens, positions and routes. A chain stops at MaxTokens
// and the context; tokens it ran past a stop token are dropped when the
// sequence ends (its routing counts then are the sequence's), and a
// continuation of the sequence runs on from there.
func TestLoopChains(t *testing.T) {
	next := []int32{0, 5, 6, 7, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6, 7}
	collect := func(r Runner, prompt []int32, opts GenerateOptions) (Result, []Token) {
		t.Helper()
		var got []Token
		opts.Sampler, opts.Routes = DefaultSampler(), true
		opts.OnToken = func(tk Token) error { got = append(got, tk); return nil }
		res, err := Generate(context.Background(), r, 8, prompt, opts)
		require.NoError(t, err)
		return res, got
	}
	for _, tc := range []struct {
		name   string
		opts   GenerateOptions
		chains []int
		truncs []int
	}{
		// Draws 5 6 7 3 4 5: the prompt's argmax, a chain of 3, then one
		// of the 2 draws MaxTokens leaves.
		{"max-tokens", GenerateOptions{EOS: -1, MaxTokens: 6}, []int{3, 2}, nil},
		// The context (16) holds 14 more tokens after the prompt's 2: the
		// last chain is cut to 2 where the context ends.
		{"context", GenerateOptions{EOS: -1}, []int{3, 3, 3, 3, 2}, nil},
		// EOS 4 is drawn after position 5: the chain from position 5 ran 6
		// and 7 ahead, dropped when the sequence ends.
		{"eos", GenerateOptions{EOS: 4, MaxTokens: 10}, []int{3, 3}, []int{6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, wantTokens := collect(&tracingFake{fakeRunner: fakeRunner{next: next, ctx: 16}}, []int32{1, 2}, tc.opts)
			f := &chainFake{tracingFake: tracingFake{fakeRunner: fakeRunner{next: next, ctx: 16}}, steps: 3}
			got, gotTokens := collect(f, []int32{1, 2}, tc.opts)
			assert.Equal(t, want.Tokens, got.Tokens)
			assert.Equal(t, want.Stop, got.Stop)
			assert.Equal(t, want.Fed, got.Fed)
			assert.Equal(t, wantTokens, gotTokens, "each token as OnToken receives it: position and routes")
			assert.Equal(t, tc.chains, f.chains, "the chains' lengths")
			assert.Equal(t, tc.truncs, f.truncs, "the truncations")
			assert.Equal(t, len(got.Fed), f.pos, "the runner holds what the sequence fed")
			assert.Equal(t, []LayerStat{{Layer: 1, Selected: len(got.Fed), Seen: len(got.Fed)}}, got.RoutingStats, "the counts of the sequence's tokens")
		})
	}

	// A sequence that continues the one before after its EOS: the tokens
	// it shares with what the chain ran ahead are not run again, the rest
	// from the first one that differs.
	f := &chainFake{tracingFake: tracingFake{fakeRunner: fakeRunner{next: next, ctx: 16}}, steps: 4}
	l, err := NewLoop(&Backend{Runner: f, Name: "fake"}, LoopOptions{ContextLen: 16, NVocab: 8})
	require.NoError(t, err)
	defer l.Close()
	first, err := l.Generate(context.Background(), []int32{1, 2}, GenerateOptions{EOS: 7, MaxTokens: 10, Sampler: DefaultSampler()})
	require.NoError(t, err)
	require.Equal(t, []int32{5, 6}, first.Tokens)
	require.Equal(t, []int{4}, f.chains, "one chain from position 2: 5 6 7 3 ahead")
	require.Equal(t, []int{4}, f.truncs, "dropped back to the sequence's 4 tokens at its end")
	f.feeds, f.chains, f.truncs = nil, nil, nil
	res, err := l.Generate(context.Background(), []int32{1, 2, 5, 6, 7, 0}, GenerateOptions{EOS: -1, MaxTokens: 1, Sampler: DefaultSampler()})
	require.NoError(t, err)
	assert.Equal(t, [][]int32{{7, 0}}, f.feeds, "the held tokens skipped, then the two new ones")
	assert.Equal(t, 4, res.CachedTokens)
	assert.Equal(t, []int32{next[5]}, res.Tokens)
}

// TestGenerateChainsOnVulkan: greedy generation on the Vulkan backend
// with chained steps (MODRUN_CHAIN=5) gives what it gives with none: the
// tokens, each token's routing and the routing counts, for a stop token
// met inside a chain and for MaxTokens, and for a continuation of the
// sequence after the stop (the tokens the chain ran past it dropped).
func TestGenerateChainsOnVulkan(t *testing.T) {
	if err := vk.Load(); err != nil {
		t.Skipf("no Vulkan loader: %v", err)
	}
	m, err := mod.Open(modTrained)
	require.NoError(t, err)
	defer m.Close()
	open := func(chain string) *Backend {
		b, _, err := OpenBackend(m, mod.RoutingRouter, BackendOptions{Name: BackendVulkan, Device: -1, Trace: true, Knobs: vulkan.Knobs{"MODRUN_CHAIN": chain}})
		if err != nil {
			t.Skipf("no Vulkan device: %v", err)
		}
		t.Cleanup(b.Close)
		return b
	}
	one, five := open("1"), open("5")
	prompt := []int32{1, 403, 407, 261}
	free, err := Generate(context.Background(), one, m.Config.NVocab, prompt, GenerateOptions{EOS: -1, MaxTokens: 12, Sampler: DefaultSampler()})
	require.NoError(t, err)
	stop := free.Tokens[6] // met at the 7th draw: inside the second chain of 5
	require.NotContains(t, free.Tokens[:6], stop)
	gen := func(l *Loop, seq []int32, opts GenerateOptions) routedRun {
		opts.Sampler = DefaultSampler()
		return generateRouted(t, l, seq, opts)
	}
	var want, got []routedRun
	for _, c := range []struct {
		b   *Backend
		out *[]routedRun
	}{{one, &want}, {five, &got}} {
		l, err := NewLoop(c.b, LoopOptions{ContextLen: m.Config.ContextLen, NVocab: m.Config.NVocab})
		require.NoError(t, err)
		first := gen(l, prompt, GenerateOptions{EOS: stop, MaxTokens: 12})
		next := append(append(append([]int32(nil), first.res.Fed...), first.res.Pending...), 13, 500)
		second := gen(l, next, GenerateOptions{EOS: -1, MaxTokens: 7, Held: len(first.res.Fed) + len(first.res.Pending)})
		*c.out = append(*c.out, first, second)
		l.Close()
	}
	for i := range want {
		assert.Equal(t, want[i].res.Tokens, got[i].res.Tokens, "call %d: the tokens", i)
		assert.Equal(t, want[i].res.Stop, got[i].res.Stop, "call %d", i)
		assert.Equal(t, want[i].res.Fed, got[i].res.Fed, "call %d", i)
		assert.Equal(t, want[i].res.RoutingStats, got[i].res.RoutingStats, "call %d: the routing counts", i)
		assert.Equal(t, want[i].tokens, got[i].tokens, "call %d: each token, its routes bit for bit", i)
	}
	assert.Equal(t, StopEOS, got[0].res.Stop)
	assert.Equal(t, free.Tokens[:6], got[0].res.Tokens)
	assert.NotEmpty(t, got[0].res.RoutingStats)
}

// routedRun is a generation's result and each token delivered, with its
// routing (generateRouted).
type routedRun struct {
	res    Result
	tokens []Token
}

// generateRouted runs opts on l from seq, each token's routing asked for.
func generateRouted(t *testing.T, l *Loop, seq []int32, opts GenerateOptions) routedRun {
	t.Helper()
	var r routedRun
	opts.Routes = true
	opts.OnToken = func(tk Token) error { r.tokens = append(r.tokens, tk); return nil }
	var err error
	r.res, err = l.Generate(context.Background(), seq, opts)
	require.NoError(t, err)
	return r
}
