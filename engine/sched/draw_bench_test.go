package sched

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// expSampler stands in for engine.Sampler's cost at a temperature: a pass
// of exp over the logits and a walk to a seeded uniform number's token.
type expSampler struct{ rng *rand.Rand }

func (e *expSampler) Sample(logits []float32) int32 {
	z := 0.0
	for _, v := range logits {
		z += math.Exp(float64(v))
	}
	target, cum := e.rng.Float64()*z, 0.0
	for i, v := range logits {
		if cum += math.Exp(float64(v)); target < cum {
			return int32(i)
		}
	}
	return int32(len(logits) - 1)
}

// BenchmarkSampledPicks times a step's draws for 16 sampled sequences of
// 32,000 logits: one after another (workers 1, the scheduler before) and
// side by side on every core (drawWorkers).
func BenchmarkSampledPicks(b *testing.B) {
	const seqs, nv = 16, 32000
	r := rand.New(rand.NewPCG(1, 2))
	logits := make([]float32, seqs*nv)
	for i := range logits {
		logits[i] = float32(r.NormFloat64() * 3)
	}
	for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers%d", workers), func(b *testing.B) {
			s := &Scheduler{lay: Layout{NVocab: nv}}
			picks := make([]pick, seqs)
			for i := range picks {
				picks[i] = pick{row: i, seq: &Seq{req: Request{Sampler: &expSampler{rand.New(rand.NewPCG(uint64(i), 3))}}}}
			}
			for i := 0; i < b.N; i++ {
				s.sampledPicks(picks, logits, workers)
			}
		})
	}
}
