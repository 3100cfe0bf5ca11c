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
// (docs/decode-attention-cost.md). Three sub-benchmarks separate it:
//   - dependent: perRun dispatches of add, in place (each reads what the
//     one before wrote, so vk puts a barrier between them), one submission,
//     GPU timestamps: us/dispatch is a dependent dispatch's cost, a tiny
//     kernel's included;
//   - independent: the same dispatches, each writing a buffer of its own
//     (no barrier): what the barrier adds is the difference;
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
			check := chain()
			require.NoError(b, dev.Run(check))
			check.Close()
			got := download(b, acc, n)
			require.Equal(b, float32(perRun), got[0], "the chain's first element")
			require.Equal(b, float32(perRun), got[n-1], "the chain's last element")
			rec := chain()
			defer rec.Close()
			b.ReportMetric(timeReplays(b, dev, rec)/float64(perRun)/1e3, "us/dispatch")
			b.ReportMetric(float64(rec.Stats().Barriers), "barriers")
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
			check := spread()
			require.NoError(b, dev.Run(check))
			check.Close()
			require.Equal(b, float32(2), download(b, outs[perRun-1], n)[n-1], "the last dispatch's output")
			rec := spread()
			defer rec.Close()
			b.ReportMetric(timeReplays(b, dev, rec)/float64(perRun)/1e3, "us/dispatch")
			b.ReportMetric(float64(rec.Stats().Barriers), "barriers")
		})
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
