package engine

import (
	"context"
	"testing"

	"github.com/modrun/modrun/mod"
)

// BenchmarkLoopToken is the generation loop's own cost per token: a runner
// that computes nothing (its logits ready), decoding greedily through a
// Loop over it, with a callback that takes each token.
func BenchmarkLoopToken(b *testing.B) {
	next := make([]int32, 4096)
	for i := range next {
		next[i] = int32(1 + i%6)
	}
	f := &greedyFake{fakeRunner: fakeRunner{next: next, ctx: len(next)}}
	l, err := NewLoop(&Backend{Runner: f, Name: "fake"}, LoopOptions{ContextLen: len(next), NVocab: 8})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.ResetTimer()
	tokens := 0
	for tokens < b.N {
		n := min(b.N-tokens, 1024)
		res, err := l.Generate(context.Background(), []int32{1}, GenerateOptions{EOS: -1, MaxTokens: n, Sampler: DefaultSampler(), OnToken: func(Token) error { return nil }})
		if err != nil {
			b.Fatal(err)
		}
		tokens += len(res.Tokens)
	}
}

// BenchmarkDecodeThroughLoop decodes 64 greedy tokens of the trained MoD
// model on the CPU backend through the generation loop (Generate), and
// BenchmarkDecodeByFeeds the same tokens by the runner's own FeedArgmax
// calls one after another (the loop it replaced, less its bookkeeping):
// their ratio is what the loop costs a stream.
func BenchmarkDecodeThroughLoop(b *testing.B) { benchDecode(b, true) }
func BenchmarkDecodeByFeeds(b *testing.B)     { benchDecode(b, false) }

func benchDecode(b *testing.B, loop bool) {
	m, err := mod.Open(benchModel)
	if err != nil {
		b.Skip(err)
	}
	defer m.Close()
	bk, _, err := OpenBackend(m, mod.RoutingRouter, BackendOptions{Name: BackendCPU, Device: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer bk.Close()
	prompt := []int32{1, 403, 407, 261, 378}
	const n = 64
	b.ResetTimer()
	for range b.N {
		if loop {
			if _, err := Generate(context.Background(), bk, m.Config.NVocab, prompt, GenerateOptions{EOS: -1, MaxTokens: n, Sampler: DefaultSampler()}); err != nil {
				b.Fatal(err)
			}
			continue
		}
		r := bk.Runner.(GreedyFeeder)
		bk.Reset()
		id, err := r.FeedArgmax(prompt)
		for i := 1; i < n && err == nil; i++ {
			id, err = r.FeedArgmax([]int32{id})
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/token")
}
