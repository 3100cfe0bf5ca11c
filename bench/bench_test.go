package bench

import (
	"testing"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const benchModel = "../testdata/mod/mod-trained.gguf"

// benchCPU opens benchModel (closed when t ends) with its CPU runner, and
// an 8-token prompt of its vocabulary.
func benchCPU(t *testing.T) (*mod.Model, *engine.CPU, []int32) {
	t.Helper()
	m, err := mod.Open(benchModel)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	cpu, err := engine.NewCPU(m, mod.RoutingRouter)
	require.NoError(t, err)
	return m, cpu, []int32{1, 403, 407, 261, 378, 1, 403, 407}
}

// skewed is a runner whose logits are off by delta from its inner runner's.
type skewed struct {
	engine.Runner
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
	m, cpu, prompt := benchCPU(t)
	o := Options{PromptTokens: 8, DecodeTokens: 8, Repeats: 1, ValidateTokens: 4}

	res, err := bench(&engine.Backend{Runner: cpu, Name: "cpu"}, m, mod.RoutingRouter, prompt, o)
	require.NoError(t, err)
	assert.Positive(t, res.DecodeRate)
	assert.Positive(t, res.PrefillRate)
	assert.Zero(t, res.Validation.MaxLogitDiff, "the CPU agrees with itself exactly")
	assert.Equal(t, 5, res.Validation.Steps, "the prompt's last token and 4 greedy ones")
	assert.Equal(t, 1.0, res.Validation.Top1Agreement)
	assert.Len(t, res.RoutedPercent, 2, "one entry per routed layer")

	// Logits off by 0-0.02 on float32 arithmetic's path, whose bound is
	// 1e-3 + 1e-4 of the largest |logit|.
	_, err = bench(&engine.Backend{Runner: skewed{cpu, 0.01}, Name: "skewed"}, m, mod.RoutingRouter, prompt, o)
	assert.ErrorContains(t, err, "validation failed at step 0 (float32 arithmetic tolerance")
	assert.ErrorContains(t, err, "the next-token distribution is KL")

	o.ValidateTokens = 0
	res, err = bench(&engine.Backend{Runner: skewed{cpu, 0.01}, Name: "skewed"}, m, mod.RoutingRouter, prompt, o)
	require.NoError(t, err, "--validate 0: nothing validated")
	assert.Zero(t, res.Validation.Steps)
	o.ValidateTokens = 4

	_, err = bench(&engine.Backend{Runner: cpu, Name: "cpu"}, m, mod.RoutingRouter, prompt[:3], o)
	assert.ErrorContains(t, err, "needs a prompt of 8 tokens")
}

func TestBenchmarkTimesOneRunAtATime(t *testing.T) {
	m, cpu, prompt := benchCPU(t)
	o := Options{PromptTokens: 8, DecodeTokens: 8, ValidateTokens: 4}

	k, err := NewBenchmark(&engine.Backend{Runner: cpu, Name: "cpu"}, m, mod.RoutingRouter, prompt, o)
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

	_, err = NewBenchmark(&engine.Backend{Runner: skewed{cpu, 0.01}, Name: "skewed"}, m, mod.RoutingRouter, prompt, o)
	assert.ErrorContains(t, err, "validation failed", "a backend that disagrees is never timed")
}

// promptCounter counts the prompts fed (a Feed of more than one token).
type promptCounter struct {
	engine.Runner
	prompts int
}

func (p *promptCounter) Feed(tokens []int32) ([]float32, error) {
	if len(tokens) > 1 {
		p.prompts++
	}
	return p.Runner.Feed(tokens)
}

// Without validation, and so without the run that records and warms the
// prompt's work, the first Time runs the prompt once untimed before its
// timed run; later ones run it once each.
func TestBenchmarkWarmsUpFirst(t *testing.T) {
	m, cpu, prompt := benchCPU(t)
	pc := &promptCounter{Runner: cpu}
	k, err := NewBenchmark(&engine.Backend{Runner: pc, Name: "cpu"}, m, mod.RoutingRouter, prompt, Options{PromptTokens: 8, DecodeTokens: 4})
	require.NoError(t, err)
	assert.Zero(t, pc.prompts, "--validate 0 feeds nothing while opening")
	require.NoError(t, k.Time())
	assert.Equal(t, 2, pc.prompts, "the first Time: the untimed run, then the timed one")
	require.NoError(t, k.Time())
	assert.Equal(t, 3, pc.prompts, "the second Time: the timed run only")
	assert.Len(t, k.prefill, 2, "two timed runs")
}

// A model too big for the CPU reference to check at length validates fewer
// tokens, never none; a small one validates all it was asked to.
func TestValidationFor(t *testing.T) {
	o := Options{PromptTokens: 64, ValidateTokens: 16}
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

// bench validates then times backend b running model m: first greedy
// decoding against the CPU reference (same tokens, logits within tolerance;
// a backend that disagrees is not timed), then prefill and decode speeds.
func bench(b *engine.Backend, m *mod.Model, routing mod.Routing, prompt []int32, o Options) (Result, error) {
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
