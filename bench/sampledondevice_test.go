package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/mod"
)

// deviceDrawer is the CPU runner as a runner that draws plain sampled
// tokens itself (engine.DrawFeeder), counting its draws: its token for u
// is the argmax (a stand-in; the test counts where draws are made).
type deviceDrawer struct {
	*engine.CPU
	draws int
}

func (d *deviceDrawer) DrawsOnDevice() bool { return true }

func (d *deviceDrawer) FeedDraw(tokens []int32, dr sched.Draw, u float64) (int32, error) {
	l, err := d.Feed(tokens)
	if err != nil {
		return 0, err
	}
	d.draws++
	best := int32(0)
	for i, v := range l {
		if v > l[best] {
			best = int32(i)
		}
	}
	return best, nil
}

// TestSampledOnDevice: a row's sampled_on_device says whether its timed
// decode draws on the device: a plain temperature on a backend that draws
// it, with top-p or top-k or not (and its timed tokens are drawn there),
// not a penalty, not greedy decoding, not a backend that does not draw.
func TestSampledOnDevice(t *testing.T) {
	m, cpu, prompt := benchCPU(t)
	plain := engine.DefaultSampler()
	plain.Temperature = 1
	topP, topK, penalty := plain, plain, plain
	topP.TopP, topK.TopK, penalty.RepeatPenalty = 0.9, 40, 1.1
	for _, tc := range []struct {
		name    string
		drawer  bool
		sampler *engine.SamplerOptions
		want    bool
	}{
		{"plain on a drawer", true, &plain, true},
		{"top-p on a drawer", true, &topP, true},
		{"top-k on a drawer", true, &topK, true},
		{"a repeat penalty on a drawer", true, &penalty, false},
		{"greedy on a drawer", true, nil, false},
		{"plain on the CPU", false, &plain, false},
	} {
		var run engine.Runner = cpu
		d := &deviceDrawer{CPU: cpu}
		if tc.drawer {
			run = d
		}
		o := Options{PromptTokens: 8, DecodeTokens: 4, Sampler: tc.sampler}
		k, err := NewBenchmark(&engine.Backend{Runner: run, Name: "b"}, m, mod.RoutingRouter, prompt, o)
		require.NoError(t, err, tc.name)
		require.NoError(t, k.Time(), tc.name)
		assert.Equal(t, tc.want, k.Result().SampledOnDevice, tc.name)
		if tc.want {
			assert.Positive(t, d.draws, "%s: drawn on the runner", tc.name)
		} else {
			assert.Zero(t, d.draws, "%s: drawn on the host", tc.name)
		}
	}
}
