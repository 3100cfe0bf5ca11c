package vulkan

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/synth"
)

// BenchmarkStepDecode times the Vulkan step runner's decode steps of P
// sequences of a stories15m-shape Q8_0 model under the scheduler (32-token
// prompts, up to 64 new tokens each, issue 33's measurement; a first round
// and the prompts' steps untimed), reporting aggregate tok/s and where a step's time went:
// the stepper's host phases (StepPhases: compose, upload, run = submit and
// wait, routes, logits) and the scheduler's own (sched: the rest of a step,
// its draws among it), in ms a step. With MODRUN_STEP_PROFILE=1 the runner
// also times every dispatch (Options.Profile, where the device has
// timestamps) and logs the kernels' GPU ms a step, most first. Each P
// runs twice: greedy rows drawn on the device (argmax: StepArgmax) and
// every row's logits read back and drawn on the host (logits: Step).
//
//	go test ./engine/vulkan -run '^$' -bench StepDecode -benchtime 128x
func BenchmarkStepDecode(b *testing.B) {
	s, err := synth.ParseShape("stories15m")
	require.NoError(b, err)
	m, err := synth.Build(s, synth.Options{Type: gguf.TypeQ8_0, Seed: 1})
	require.NoError(b, err)
	defer m.Close()
	dev := openDevice(b, false)
	profile := os.Getenv("MODRUN_STEP_PROFILE") == "1"
	const ctx, bt = 96, 16
	for _, bc := range []struct {
		p      int
		argmax bool
	}{{1, true}, {1, false}, {8, true}, {8, false}} {
		p, how := bc.p, "argmax"
		if !bc.argmax {
			how = "logits"
		}
		b.Run(fmt.Sprintf("P%d/%s", p, how), func(b *testing.B) {
			run, err := New(dev, m.Model, mod.RoutingRouter, Options{ContextLen: ctx, UBatch: ctx, Profile: profile})
			require.NoError(b, err)
			defer run.Close()
			st, err := run.Stepper(p)
			require.NoError(b, err)
			pages := sched.PagesFor(st.Layout(), p, ctx+2*bt, bt)
			require.NoError(b, st.Reserve(pages, bt))
			var runner sched.StepRunner = st
			if !bc.argmax {
				runner = logitsOnly{st} // every logits row comes back, greedy draws on the host
			}
			var sc *sched.Scheduler
			start := func() {
				sc, err = sched.New(runner, sched.Options{BlockTokens: bt, Pages: pages, BatchTokens: st.MaxRows()})
				require.NoError(b, err)
				for i := range p {
					prompt := make([]int32, 32)
					for j := range prompt {
						prompt[j] = int32(3 + (i*31+j*7)%31000)
					}
					_, err := sc.Add(sched.Request{Prompt: prompt, MaxTokens: 64})
					require.NoError(b, err)
				}
				for sc.Stats().Rows < 32*p { // the prompts, in steps of MaxRows (with a few decode rows)
					_, err := sc.Step()
					require.NoError(b, err)
				}
			}
			start() // a round untimed: every step shape's recording is made
			for sc.Busy() {
				_, err := sc.Step()
				require.NoError(b, err)
			}
			start()
			var ph StepPhases // the timed steps'
			gpu, calls := map[string]uint64{}, map[string]int{}
			var timed time.Duration
			steps := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if !sc.Busy() {
					b.StopTimer()
					start()
					b.StartTimer()
				}
				ph0, prof0, calls0 := st.Phases(), profileByKernel(run), callsByKernel(run)
				t := time.Now()
				_, err := sc.Step()
				require.NoError(b, err)
				timed += time.Since(t)
				steps++
				ph = subPhases(st.Phases(), ph0, ph)
				for k, ns := range profileByKernel(run) {
					gpu[k] += ns - prof0[k]
				}
				for k, c := range callsByKernel(run) {
					calls[k] += c - calls0[k]
				}
			}
			b.StopTimer()
			per := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(steps) }
			b.ReportMetric(float64(steps*p)/timed.Seconds(), "tok/s")
			b.ReportMetric(per(timed), "ms/step")
			b.ReportMetric(per(ph.Compose), "compose-ms")
			b.ReportMetric(per(ph.Upload), "upload-ms")
			b.ReportMetric(per(ph.Run), "run-ms")
			b.ReportMetric(per(ph.Routes), "routes-ms")
			b.ReportMetric(per(ph.Logits), "logits-ms")
			b.ReportMetric(per(timed-ph.Compose-ph.Upload-ph.Run-ph.Routes-ph.Logits), "sched-ms")
			if profile {
				for _, e := range run.Profile() { // most first over the whole run
					if d := gpu[e.Kernel]; d > 0 {
						b.Logf("P%d %s %-28s %7.3f ms a step, %5.1f calls", p, how, e.Kernel, float64(d)/1e6/float64(steps), float64(calls[e.Kernel])/float64(steps))
					}
				}
			}
		})
	}
}

// subPhases is a - b (+ c): the phases of the steps between two reads.
func subPhases(a, b, c StepPhases) StepPhases {
	return StepPhases{Steps: a.Steps - b.Steps + c.Steps, Rows: a.Rows - b.Rows + c.Rows,
		Compose: a.Compose - b.Compose + c.Compose, Upload: a.Upload - b.Upload + c.Upload, Run: a.Run - b.Run + c.Run,
		Routes: a.Routes - b.Routes + c.Routes, Logits: a.Logits - b.Logits + c.Logits}
}

// profileByKernel is the runner's GPU ns so far by kernel.
func profileByKernel(r *Runner) map[string]uint64 {
	out := map[string]uint64{}
	for _, e := range r.Profile() {
		out[e.Kernel] = e.NS
	}
	return out
}

// callsByKernel is the runner's commands timed so far by kernel.
func callsByKernel(r *Runner) map[string]int {
	out := map[string]int{}
	for _, e := range r.Profile() {
		out[e.Kernel] = e.Calls
	}
	return out
}

// logitsOnly is a step runner without StepArgmax (sched.ArgmaxRunner), so
// the scheduler reads every row's logits back.
type logitsOnly struct{ sched.StepRunner }
