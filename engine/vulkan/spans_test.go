package vulkan

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/sched/schedtest"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
)

// TestConditionalSpansOrdered: in every recording the engine makes with
// conditional spans (prefill chunks, the decode step and its greedy twin,
// the step runner's batched steps), each span's predicate, the routed
// count a selector kernel writes, is ordered before the span reads it by
// a barrier that waits for the writer's stage and makes the count visible
// to the conditional-rendering read (vk.Recorder.CheckSpans). Issue 46: on
// NVIDIA a predicate whose write is not so ordered discards the span.
func TestConditionalSpansOrdered(t *testing.T) {
	dev := openDevice(t, true)
	if !dev.Info().Features.ConditionalRendering {
		t.Skipf("%s has no VK_EXT_conditional_rendering", dev.Info().Name)
	}
	m := openModel(t, "../../models/tinystories-mod.gguf")
	for _, routing := range []mod.Routing{mod.RoutingRouter, mod.RoutingPredictor} {
		t.Run(routing.String(), func(t *testing.T) {
			const ctx = 128
			run, err := New(dev, m, routing, Options{KVType: "f32", ContextLen: ctx, UBatch: 48})
			require.NoError(t, err)
			defer run.Close()
			require.True(t, run.conditional)
			_, err = run.Feed([]int32{1, 80, 111, 122, 259, 101, 120, 259, 40, 99})
			require.NoError(t, err)
			_, err = run.Feed([]int32{44})
			require.NoError(t, err)
			_, err = run.FeedArgmax([]int32{45})
			require.NoError(t, err)

			st, s := stepScheduler(t, run, 2, 2, ctx)
			schedtest.JoinAndLeaveKeeping(t, s, m.Config.NVocab, 2, func(i int) bool { return i == 0 })

			recs := map[string]*vk.Recorder{"decode step": run.step, "greedy decode step": run.stepGreedy}
			for key, pr := range run.pf.recs {
				recs[fmt.Sprintf("prefill %+v", key)] = pr.rec
			}
			for key, rec := range st.recs {
				recs[fmt.Sprintf("step runner %v", key)] = rec
			}
			spans := 0
			for name, rec := range recs {
				if rec == nil {
					continue
				}
				for i, sp := range rec.Spans() {
					spans++
					if i == 0 {
						t.Logf("%s: %d spans; the first's predicate is written by %s, barrier before it: %s",
							name, len(rec.Spans()), sp.Writer, sp.Before)
					}
				}
				assert.NoError(t, rec.CheckSpans(), name)
			}
			assert.Positive(t, spans, "the recordings hold conditional spans")
		})
	}
}
