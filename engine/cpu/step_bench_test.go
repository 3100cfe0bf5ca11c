package cpu

import (
	"fmt"
	"testing"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/synth"
)

// BenchmarkStepDecode times decode steps of P sequences of a
// stories15m-shape Q8_0 model on the scheduler (32-token prompts, up to 64
// new tokens, as issue 33's measurement), reporting aggregate tokens/s.
func BenchmarkStepDecode(b *testing.B) {
	s, err := synth.ParseShape("stories15m")
	if err != nil {
		b.Fatal(err)
	}
	m, err := synth.Build(s, synth.Options{Type: gguf.TypeQ8_0, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	for _, p := range []int{1, 8} {
		b.Run(fmt.Sprintf("P%d", p), func(b *testing.B) {
			st, err := NewStepper(m.Model, mod.RoutingRouter, Options{ContextLen: 128})
			if err != nil {
				b.Fatal(err)
			}
			var sc *sched.Scheduler
			start := func() {
				sc, err = sched.New(st, sched.Options{Pages: sched.PagesFor(st.Layout(), p, 160, 16)})
				if err != nil {
					b.Fatal(err)
				}
				for i := range p {
					prompt := make([]int32, 32)
					for j := range prompt {
						prompt[j] = int32(3 + (i*31+j*7)%31000)
					}
					if _, err := sc.Add(sched.Request{Prompt: prompt, MaxTokens: 64}); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := sc.Step(); err != nil { // the prompts
					b.Fatal(err)
				}
			}
			start()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if !sc.Busy() {
					b.StopTimer()
					start()
					b.StartTimer()
				}
				if _, err := sc.Step(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*p)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
