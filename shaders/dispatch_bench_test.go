package shaders

import (
	"fmt"
	"testing"
	"time"

	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/require"
)

// BenchmarkDispatchGPU measures what a dispatch costs beyond its work
// (issue 42 item 6): a decode step is about 5 dispatches a block, each
// ordered after the one before by a barrier, and on the H200 (run B) a
// 1.1B token took 2.55 ms where its kernels' timestamps summed to 1.81:
// ~6.6 us for each of its 113 dispatches, the host's round trip included
// (docs/decode-attention-cost.md). Its sub-benchmarks separate it:
//   - dependent: perRun dispatches of add, in place (each reads what the
//     one before wrote, so vk puts a barrier between them), one submission,
//     GPU timestamps: us/dispatch is a dependent dispatch's cost, a tiny
//     kernel's included;
//   - independent: the same dispatches, each writing a buffer of its own
//     (no barrier): what the barrier adds is the difference;
//   - handoff: the dependent chain as stages of one dispatch
//     (stage_chain.comp), each stage's workgroups waiting for the stage
//     before through an atomic count: us/stage against dependent's
//     us/dispatch says whether fusing a decode block's dispatches that way
//     would pay;
//   - handoff-dispatch: a stage a dispatch (stage_chain_dispatch), the
//     same waits, no barrier between the dispatches (vk.Handoff): a
//     launch's cost without the barrier's;
//   - submit: one dispatch a submission, wall clock: the host's round
//     trip (submit, fence, wait) that each token pays once.
//
// At 1, 132 and 1024 workgroups of 256 (one SM, one an SM of an H100 or
// H200, a matvec's grid). Each chain is checked first (perRun adds of 1
// to zeros give perRun). On a CPU device (lavapipe) shorter chains: a check
// that it runs, not a cost a GPU has.
//
//	shaders.test -test.run '^$' -test.bench BenchmarkDispatchGPU -test.benchtime 50x
func BenchmarkDispatchGPU(b *testing.B) {
	dev := openDeviceWith(b, vk.InstanceOptions{})
	cpu := dev.Info().Type == vk.CPU
	perRun, groupsList := 128, []int{1, 132, 1024}
	if cpu {
		perRun, groupsList = 16, []int{1, 8}
	}
	add := newKernel(b, dev, lookup(b, "add"))
	for _, groups := range groupsList {
		n := groups * 256
		push := vk.MustPackPush(AddPush{N: uint32(n)})
		ones := make([]float32, n)
		for i := range ones {
			ones[i] = 1
		}
		bOnes := newBuffer(b, dev, f32bytes(ones))
		b.Run(fmt.Sprintf("dependent/groups%d", groups), func(b *testing.B) {
			acc := newBuffer(b, dev, f32bytes(make([]float32, n)))
			chain := func() *vk.Recorder {
				rec := dev.NewRecorder()
				for i := 0; i < perRun; i++ {
					rec.Dispatch(add, push, Groups(uint32(groups)), vk.Bind{Buf: acc, Access: vk.Read}, vk.Bind{Buf: bOnes, Access: vk.Read},
						vk.Bind{Buf: acc, Access: vk.Write})
				}
				return rec
			}
			runOnce(b, dev, chain)
			requireEnds(b, download(b, acc, n), perRun)
			timeChain(b, dev, chain, perRun, "us/dispatch")
		})
		b.Run(fmt.Sprintf("independent/groups%d", groups), func(b *testing.B) {
			outs := make([]*vk.Buffer, perRun)
			for i := range outs {
				outs[i] = denseNaNBuffer(b, dev, n)
			}
			spread := func() *vk.Recorder {
				rec := dev.NewRecorder()
				for _, out := range outs {
					rec.Dispatch(add, push, Groups(uint32(groups)), vk.Bind{Buf: bOnes, Access: vk.Read}, vk.Bind{Buf: bOnes, Access: vk.Read},
						vk.Bind{Buf: out, Access: vk.Write})
				}
				return rec
			}
			runOnce(b, dev, spread)
			requireEnds(b, download(b, outs[perRun-1], n), 2)
			timeChain(b, dev, spread, perRun, "us/dispatch")
		})
	}
	// handoff: the dependent chain as stages of one dispatch (stage_chain),
	// each waiting for the whole stage before through an atomic count;
	// handoff-dispatch: a stage a dispatch, no barrier between them
	// (vk.Handoff), the same waits.
	for _, perDispatch := range []bool{false, true} {
		for _, groups := range groupsList {
			name := "handoff"
			if perDispatch {
				name = "handoff-dispatch"
			}
			b.Run(fmt.Sprintf("%s/groups%d", name, groups), func(b *testing.B) {
				benchHandoff(b, dev, groups, perRun, perDispatch)
			})
		}
	}
	b.Run("submit", func(b *testing.B) {
		out := denseNaNBuffer(b, dev, 256)
		one := newBuffer(b, dev, f32bytes(make([]float32, 256)))
		rec := dev.NewRecorder()
		defer rec.Close()
		rec.Dispatch(add, vk.MustPackPush(AddPush{N: 256}), Groups(1), vk.Bind{Buf: one, Access: vk.Read}, vk.Bind{Buf: one, Access: vk.Read},
			vk.Bind{Buf: out, Access: vk.Write})
		require.NoError(b, dev.Run(rec))
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			if err := dev.Run(rec); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N)/1e3, "us/submit")
	})
}

// runOnce runs a recording of record once (the check before timing).
func runOnce(b *testing.B, dev *vk.Device, record func() *vk.Recorder) {
	rec := record()
	defer rec.Close()
	require.NoError(b, dev.Run(rec))
}

// requireEnds checks a chain's output at both ends.
func requireEnds(b *testing.B, got []float32, want int) {
	require.Equal(b, float32(want), got[0], "the output's first element")
	require.Equal(b, float32(want), got[len(got)-1], "the output's last element")
}

// timeChain times a fresh recording of record, steps dependent or
// independent steps a run, and reports the time of one step as unit and
// the recording's barriers.
func timeChain(b *testing.B, dev *vk.Device, record func() *vk.Recorder, steps int, unit string) {
	rec := record()
	defer rec.Close()
	b.ReportMetric(timeReplays(b, dev, rec)/float64(steps)/1e3, unit)
	b.ReportMetric(float64(rec.Stats().Barriers), "barriers")
}

// benchHandoff checks, then times, a chain of perRun stages of groups
// workgroups handed on by atomic counts (stage_chain.comp): in one
// dispatch, or a stage a dispatch with no barrier between them.
func benchHandoff(b *testing.B, dev *vk.Device, groups, perRun int, perDispatch bool) {
	n := groups * 256
	even, odd := newBuffer(b, dev, f32bytes(make([]float32, n))), newBuffer(b, dev, f32bytes(make([]float32, n)))
	count := newBuffer(b, dev, u32bytes(make([]uint32, perRun+1)))
	handoff := vk.ReadWrite | vk.Handoff
	binds := []vk.Bind{{Buf: even, Access: handoff}, {Buf: odd, Access: handoff}, {Buf: count, Access: handoff}}
	name := StageChainName
	if perDispatch {
		name += "_dispatch"
	}
	k := newKernel(b, dev, lookup(b, name))
	chain := func() *vk.Recorder {
		rec := dev.NewRecorder()
		if perDispatch {
			for s := 0; s < perRun; s++ {
				rec.Dispatch(k, vk.MustPackPush(StageChainPush{N: uint32(n), Stage: uint32(s), Stages: uint32(perRun)}), Groups(uint32(groups)), binds...)
			}
			return rec
		}
		rec.Dispatch(k, vk.MustPackPush(AddPush{N: uint32(n)}), [3]uint32{uint32(perRun * groups), 1, 1}, binds...)
		return rec
	}
	if !perDispatch && perRun*groups > int(dev.Info().Limits.MaxComputeWorkGroupCount[0]) {
		b.Skipf("%d workgroups along x: the device allows %d", perRun*groups, dev.Info().Limits.MaxComputeWorkGroupCount[0])
	}
	runOnce(b, dev, chain)
	counts := downloadU32(b, count, perRun+1)
	require.Zero(b, counts[perRun], "a stage gave up waiting for the one before (the driver does not start workgroups in order)")
	require.Equal(b, make([]uint32, perRun), counts[:perRun], "the last workgroup zeroes the counts")
	last := even // perRun stages from even: an even count ends in even
	if perRun%2 == 1 {
		last = odd
	}
	requireEnds(b, download(b, last, n), perRun)
	timeChain(b, dev, chain, perRun, "us/stage")
}
