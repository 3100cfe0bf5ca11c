// Command sessions times the API's path as a server runs it: P sessions of
// one model generating at once (Options.Parallel P), each 64 greedy tokens
// after a prompt; it prints the aggregate tokens/s (new tokens over wall
// time), the median of rounds.
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/modrun/modrun"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: sessions FILE.gguf BACKEND P")
		os.Exit(2)
	}
	backend := os.Args[2]
	p, err := strconv.Atoi(os.Args[3])
	if err != nil || p < 1 {
		fmt.Fprintf(os.Stderr, "sessions: P %q: want a number of sessions, 1 or more\n", os.Args[3])
		os.Exit(2)
	}
	m, err := modrun.Open(os.Args[1], modrun.Options{Backend: backend, Parallel: p, ContextLen: 256})
	if err != nil {
		panic(err)
	}
	defer m.Close()
	prompts := []string{"Once upon a time there was a little girl named Lily who", "Tom and his dog went to the park to play with a ball and", "The sun was shining and the birds were singing in the tall", "A big red truck drove down the road to the farm where the", "Sam liked to read books about space and stars and the moon so", "One day a cat found a box in the garden behind the old", "The little boat sailed on the blue sea with a happy fish that", "Mia had a new toy and she wanted to show it to her best"}
	var rates []float64
	for round := 0; round < 6; round++ {
		var wg sync.WaitGroup
		start := time.Now()
		var mu sync.Mutex
		total := 0
		for i := 0; i < p; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := m.NewSession()
				defer s.Close()
				n := 0
				_, err := s.Generate(context.Background(), prompts[i%len(prompts)], modrun.GenerateOptions{MaxTokens: 64, IgnoreEOS: true}, func(t modrun.Token) error {
					if !t.Prompt {
						n++
					}
					return nil
				})
				if err != nil {
					panic(err)
				}
				mu.Lock()
				total += n
				mu.Unlock()
			}()
		}
		wg.Wait()
		if round > 0 {
			rates = append(rates, float64(total)/time.Since(start).Seconds())
		}
	}
	sort.Float64s(rates)
	fmt.Printf("%.0f\n", rates[len(rates)/2])
}
