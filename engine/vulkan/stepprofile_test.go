package vulkan

import (
	"fmt"
	"os"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// BenchmarkStepProfile prints where a decode step's device time goes, kernel
// by kernel (Options.Profile: timestamps), at 1 and at 8 sequences, on the
// model named by $MODRUN_STEP_PROFILE_MODEL (skipped without it): each
// sequence a prompt of 32 tokens, then 64 greedy tokens, as bench
// --parallel runs them. Only the steps after every prompt has run count.
// Per kernel: device microseconds a decode step, and at 8 sequences the
// ratio to 1 (8 sequences doing the work of 8 single steps would be 8).
//
// MODRUN_STEP_PROFILE_NO_LANES=1 runs Q8_0's matvecs without matvec_lanes
// (Profile.MatvecLanes off: matvec.comp's rowsPass), for the comparison.
//
//	MODRUN_STEP_PROFILE_MODEL=/tmp/vk-s15m-q8_0.gguf go test ./engine/vulkan/ -run XXX -bench StepProfile -benchtime 1x
func BenchmarkStepProfile(b *testing.B) {
	path := os.Getenv("MODRUN_STEP_PROFILE_MODEL")
	if path == "" {
		b.Skip("set MODRUN_STEP_PROFILE_MODEL to a model file")
	}
	dev := openDevice(b, false)
	m := openModel(b, path)
	per := map[int]map[string]float64{}
	prof := shaders.NewProfile(deviceFacts(dev.Info(), nil))
	if os.Getenv("MODRUN_STEP_PROFILE_NO_LANES") != "" {
		prof.MatvecLanes = false
	}
	for _, n := range []int{1, 8} {
		per[n] = stepProfile(b, dev, m, n, &prof)
	}
	names := make([]string, 0, len(per[8]))
	for k := range per[8] {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return per[8][names[i]] > per[8][names[j]] })
	var t1, t8 float64
	for _, k := range names {
		t1, t8 = t1+per[1][k], t8+per[8][k]
		fmt.Printf("%-36s %9.0f us %9.0f us %5.2fx\n", k, per[1][k], per[8][k], per[8][k]/max(per[1][k], 1e-9))
	}
	fmt.Printf("%-36s %9.0f us %9.0f us %5.2fx\n", "total", t1, t8, t8/t1)
}

// stepProfile runs n sequences to the end and returns each kernel's
// device microseconds per decode step.
func stepProfile(b *testing.B, dev *vk.Device, m *mod.Model, n int, prof *shaders.Profile) map[string]float64 {
	run, err := New(dev, m, mod.RoutingRouter, Options{ContextLen: 128, Profile: true, DeviceProfile: prof})
	require.NoError(b, err)
	defer run.Close()
	_, s := stepScheduler(b, run, n, n, 128)
	var seqs []*sched.Seq
	for i := range n {
		prompt := make([]int32, 32)
		for j := range prompt {
			prompt[j] = int32(1 + (i*37+j*11)%(m.Config.NVocab-1))
		}
		q, err := s.Add(sched.Request{Prompt: prompt, MaxTokens: 64})
		require.NoError(b, err)
		seqs = append(seqs, q)
	}
	decoding := func() bool {
		for _, q := range seqs {
			if len(q.Tokens()) == 0 {
				return false
			}
		}
		return true
	}
	for !decoding() {
		_, err := s.Step()
		require.NoError(b, err)
	}
	clear(run.prof)
	steps := 0
	for s.Busy() {
		_, err := s.Step()
		require.NoError(b, err)
		steps++
	}
	out := map[string]float64{}
	for _, e := range run.Profile() {
		out[e.Kernel] = float64(e.NS) / 1e3 / float64(steps)
	}
	return out
}
