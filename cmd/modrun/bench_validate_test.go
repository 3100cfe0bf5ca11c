package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine"
)

// stale is a backend whose kernels hand back the previous position's
// logits (a buffer read before it was written), keeping the backend's
// path, and so its validation tolerance.
type stale struct {
	engine.Runner
	prev []float32
}

func (s *stale) Feed(tokens []int32) ([]float32, error) {
	l, err := s.Runner.Feed(tokens)
	if err != nil || s.prev == nil {
		s.prev = append([]float32(nil), l...)
		return l, err
	}
	cur := append([]float32(nil), l...)
	copy(l, s.prev)
	s.prev = cur
	return l, nil
}
func (s *stale) Reset() { s.Runner.Reset(); s.prev = nil }
func (s *stale) QuantizedActivations() bool {
	q, ok := s.Runner.(interface{ QuantizedActivations() bool })
	return ok && q.QuantizedActivations()
}

// TestBenchRefusesAPlantedError: bench validates a K-quant model on the CPU
// backend (its loosest tolerance) and reports the statistics; with a
// corrupted kernel result planted it refuses the row, naming the step and
// the path, and times nothing; --validate 0 checks nothing.
func TestBenchRefusesAPlantedError(t *testing.T) {
	args := []string{"bench", "--synthetic", "stories260k", "--type", "q4_k_m", "--backends", "cpu", "--prompt", "16", "-n", "4", "--repeats", "1"}
	code, stdout, stderr := modrun(t, args...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "| validated | top-1 | mean KL | max KL | max Δlogit |")
	assert.Regexp(t, `\| 16 after 16 \| 100% \| [0-9.e-]+ \| [0-9.e-]+ \| [0-9.e-]+ \([0-9.e-]+%\) \|`, stdout)

	plantError = func(r engine.Runner) engine.Runner { return &stale{Runner: r} }
	defer func() { plantError = nil }()
	code, stdout, stderr = modrun(t, args...)
	assert.Equal(t, 1, code)
	assert.Empty(t, stdout, "a refused row is never timed or reported")
	assert.Contains(t, stderr, "validation failed at step 1 (cpu, 8-bit activations, Q8_0/Q4_0/Q4_1/Q5 weights tolerance") // stories260k's widths are no whole K-quant blocks: Q5_0, Q5_1, Q8_0

	code, stdout, stderr = modrun(t, append(args, "--validate", "0")...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "| no (--validate 0) | — | — | — | — |")

	code, _, stderr = modrun(t, "bench", "--synthetic", "stories260k", "--validate", "-1")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "--validate -1: want a number of tokens, or 0 for none")
}
