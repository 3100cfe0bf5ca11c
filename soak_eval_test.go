package modrun_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/modrun/modrun"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSoakEvalAndNesting: the misuse TestSoak leaves out, on the one
// generation loop: 6 goroutines for soakFor, each at random scoring with
// LogProbs (from outside, and from inside a token callback), generating
// with a nested Generate of another session inside its callback, with
// OnRouted and a stop string, or under a deadline that expires mid-way.
// Every score equals the model's score alone, every whole greedy
// generation from a fresh session its tokens alone, no call fails but with
// its context's error, and nothing hangs.
func TestSoakEvalAndNesting(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() *modrun.Model) {
		m := open()
		want := ids(t, m, "Once upon", 8)
		scored := want[:6]
		wantLP, err := m.LogProbs(context.Background(), scored, 2)
		require.NoError(t, err)
		end := time.Now().Add(soakFor)
		var wg sync.WaitGroup
		var mu sync.Mutex
		ops := map[string]int{}
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(i), 41))
				count := func(op string, err error) {
					mu.Lock()
					defer mu.Unlock()
					ops[op]++
					if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("goroutine %d: %s: %v", i, op, err)
					}
				}
				score := func(op string) {
					lp, err := m.LogProbs(context.Background(), scored, 2)
					count(op, err)
					assert.Equal(t, wantLP, lp, "goroutine %d: %s scores as alone", i, op)
				}
				generate := func(op string, opts modrun.GenerateOptions, ctx context.Context, inside func(n int)) []int32 {
					var got []int32
					res, err := m.NewSession().Generate(ctx, "Once upon", opts, func(tk modrun.Token) error {
						if !tk.Prompt {
							got = append(got, tk.ID)
							inside(len(got))
						}
						return nil
					})
					count(op, err)
					if err != nil || res.Stop == modrun.StopString {
						return nil
					}
					return got
				}
				asAlone := func(got []int32) {
					if len(got) > 0 {
						assert.Equal(t, want[3:3+len(got)], got, "goroutine %d: as alone", i)
					}
				}
				for time.Now().Before(end) {
					switch rng.IntN(5) {
					case 0:
						score("LogProbs")
					case 1:
						got := generate("Generate, LogProbs inside", modrun.GenerateOptions{MaxTokens: 8}, context.Background(), func(n int) {
							if n == 2 {
								score("LogProbs inside")
							}
						})
						asAlone(got)
					case 2:
						got := generate("Generate, Generate inside", modrun.GenerateOptions{MaxTokens: 1 + rng.IntN(8)}, context.Background(), func(n int) {
							if n == 1 {
								_, err := m.NewSession().Generate(context.Background(), "Lily", modrun.GenerateOptions{MaxTokens: 3}, nil)
								count("Generate inside", err)
							}
						})
						asAlone(got)
					case 3:
						routed := 0
						opts := modrun.GenerateOptions{MaxTokens: 8, Stop: []string{" the"}, OnRouted: func(int, []modrun.Route) { routed++ }}
						got := generate("Generate, OnRouted and a stop", opts, context.Background(), func(int) {})
						asAlone(got)
					default:
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
						generate("Generate, deadline", modrun.GenerateOptions{MaxTokens: 8}, ctx, func(int) {})
						cancel()
					}
				}
			}()
		}
		within(t, "the soak", wg.Wait)
		t.Logf("operations: %v", ops)
	})
}
