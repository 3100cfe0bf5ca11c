package engine

import (
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const benchModel = "../testdata/mod/mod-trained.gguf"

// skewed is a runner whose logits are off by delta from its inner runner's.
type skewed struct {
	Runner
	delta float32
}

func (s skewed) Feed(tokens []int32) ([]float32, error) {
	l, err := s.Runner.Feed(tokens)
	for i := range l {
		l[i] += s.delta * float32(i%3)
	}
	return l, err
}

func TestBenchValidatesBeforeTiming(t *testing.T) {
	m, err := mod.Open(benchModel)
	require.NoError(t, err)
	defer m.Close()
	cpu, err := NewCPU(m, mod.RoutingRouter)
	require.NoError(t, err)
	prompt := []int32{1, 403, 407, 261, 378, 1, 403, 407}
	o := BenchOptions{PromptTokens: 8, DecodeTokens: 8, Repeats: 1, ValidateTokens: 4, ValidateTol: 1e-3}

	res, err := bench(&Backend{Runner: cpu, Name: "cpu"}, m, mod.RoutingRouter, prompt, o)
	require.NoError(t, err)
	assert.Positive(t, res.DecodeRate)
	assert.Positive(t, res.PrefillRate)
	assert.Zero(t, res.MaxLogitDiff, "the CPU agrees with itself exactly")
	assert.Len(t, res.RoutedPercent, 2, "one entry per routed layer")

	_, err = bench(&Backend{Runner: skewed{cpu, 0.01}, Name: "skewed"}, m, mod.RoutingRouter, prompt, o)
	assert.ErrorContains(t, err, "validation failed at step 0: a logit differs from the CPU reference by 0.02")

	_, err = bench(&Backend{Runner: cpu, Name: "cpu"}, m, mod.RoutingRouter, prompt[:3], o)
	assert.ErrorContains(t, err, "needs a prompt of 8 tokens")
}

func TestBenchmarkTimesOneRunAtATime(t *testing.T) {
	m, err := mod.Open(benchModel)
	require.NoError(t, err)
	defer m.Close()
	cpu, err := NewCPU(m, mod.RoutingRouter)
	require.NoError(t, err)
	prompt := []int32{1, 403, 407, 261, 378, 1, 403, 407}
	o := BenchOptions{PromptTokens: 8, DecodeTokens: 8, ValidateTokens: 4, ValidateTol: 1e-3}

	k, err := NewBenchmark(&Backend{Runner: cpu, Name: "cpu"}, m, mod.RoutingRouter, prompt, o)
	require.NoError(t, err)
	res := k.Result()
	assert.Zero(t, res.DecodeRate, "validated, not yet timed")
	assert.Empty(t, res.RoutedPercent)
	for i := 0; i < 3; i++ {
		require.NoError(t, k.Time())
	}
	res = k.Result()
	assert.Equal(t, median(k.decode), res.DecodeRate)
	assert.Len(t, k.decode, 3)
	assert.Positive(t, res.PrefillRate)
	assert.Len(t, res.RoutedPercent, 2)

	_, err = NewBenchmark(&Backend{Runner: skewed{cpu, 0.01}, Name: "skewed"}, m, mod.RoutingRouter, prompt, o)
	assert.ErrorContains(t, err, "validation failed", "a backend that disagrees is never timed")
}

// A model too big for the CPU reference to check at length validates fewer
// tokens, never none; a small one validates all it was asked to.
func TestValidationFor(t *testing.T) {
	o := BenchOptions{PromptTokens: 64, ValidateTokens: 16}
	small := ValidationFor(o, 15e6)
	assert.Equal(t, 64, small.ValidatePrompt)
	assert.Equal(t, 16, small.ValidateTokens)
	big := ValidationFor(o, 7e9) // 4e11 / 1.4e10: 28 tokens
	assert.Equal(t, 14, big.ValidateTokens)
	assert.Equal(t, 14, big.ValidatePrompt)
	huge := ValidationFor(o, 1e12)
	assert.Equal(t, 2, huge.ValidateTokens)
	assert.Equal(t, 2, huge.ValidatePrompt)
}

// scripted is a runner whose Feed returns its steps' logits in turn.
type scripted struct {
	steps [][]float32
	i     int
}

func (s *scripted) Feed([]int32) ([]float32, error) {
	l := append([]float32(nil), s.steps[s.i]...)
	s.i++
	return l, nil
}
func (s *scripted) Pos() int        { return s.i }
func (s *scripted) ContextLen() int { return 100 }
func (s *scripted) Reset()          { s.i = 0 }

// Each step's logits are held to a bound relative to that step's own
// largest |logit|: a difference allowed at a step of large logits does not
// fail a later step of small ones, and one too big for its own step does.
func TestValidateBoundsEachStep(t *testing.T) {
	ref := &scripted{steps: [][]float32{{100, 0}, {1, 0}, {1, 0}}}
	o := BenchOptions{ValidateTokens: 2, ValidateRelTol: 1e-2}
	ok := &scripted{steps: [][]float32{{99.5, 0}, {1.001, 0}, {1, 0}}}
	worst, err := validate(ok, ref, []int32{1}, o)
	require.NoError(t, err)
	assert.InDelta(t, 0.5, worst, 1e-6, "the largest difference of any step")

	bad := &scripted{steps: [][]float32{{99.5, 0}, {1.02, 0}, {1, 0}}}
	_, err = validate(bad, ref, []int32{1}, o)
	assert.ErrorContains(t, err, "validation failed at step 1: a logit differs from the CPU reference by 0.02 (> 0.01)")
}

// bench validates then times backend b running model m: first greedy
// decoding against the CPU reference (same tokens, logits within tolerance;
// a backend that disagrees is not timed), then prefill and decode speeds.
func bench(b *Backend, m *mod.Model, routing mod.Routing, prompt []int32, o BenchOptions) (BenchResult, error) {
	k, err := NewBenchmark(b, m, routing, prompt, o)
	if err != nil {
		return k.Result(), err
	}
	for i := 0; i < max(1, o.Repeats); i++ {
		if err := k.Time(); err != nil {
			return k.Result(), err
		}
	}
	return k.Result(), nil
}
