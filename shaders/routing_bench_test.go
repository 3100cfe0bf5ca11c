package shaders

// Benchmarks of the routing kernels: top-k and compaction at prefill and
// eval sizes.

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/require"
)

// BenchmarkRoutingTopK times top-k of n scores (k = mod.TopK(0.125, n)):
// the one-workgroup kernel at the context length 2048 with a few workgroup
// sizes, and the multi-pass plan at 8192. It checks the result first. Each
// Run replays perRun top-ks so the submit cost is spread; the baseline is
// mod.TopKIndices on the CPU, timed in the same run.
func BenchmarkRoutingTopK(b *testing.B) {
	dev := openDeviceWith(b, vk.InstanceOptions{})
	const perRun = 8
	for _, bc := range []struct {
		n  int
		wg uint32
	}{{2048, 64}, {2048, 256}, {2048, 1024}, {8192, 256}} {
		b.Run(fmt.Sprintf("n%d/wg%d", bc.n, bc.wg), func(b *testing.B) {
			n, k := bc.n, mod.TopK(0.125, bc.n)
			ks := newTopkKernels(b, dev)
			ks["topk"] = newKernel(b, dev, lookup(b, "topk"), bc.wg, TopkLocal)
			scores := topkScores("ties", n, rand.New(rand.NewSource(1)))
			want := mod.TopKIndices(scores, k)
			rec := dev.NewRecorder()
			defer rec.Close()
			bufs := newTopkBuffers(b, dev, rec, scores)
			for i := 0; i < perRun; i++ {
				ks.record(rec, bufs, uint32(n), uint32(k))
			}
			require.NoError(b, dev.Run(rec)) // records
			if err := routingExact(downloadU32(b, bufs.idx, k), routingU32(want)); err != nil {
				b.Fatalf("wrong before timing: %v", err)
			}
			cpu := routingCPUTime(func() { mod.TopKIndices(scores, k) })
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := dev.Run(rec); err != nil {
					b.Fatal(err)
				}
			}
			per := b.Elapsed().Seconds() / float64(b.N*perRun)
			b.ReportMetric(per*1e6, "us/topk")
			b.ReportMetric(cpu*1e6, "cpu_us/topk")
			b.ReportMetric(per/cpu, "gpu/cpu")
		})
	}
}

// BenchmarkRoutingCompact times compact_mask over n = 2048 with 1/8
// selected, checked first; the baseline is the same compaction in Go.
func BenchmarkRoutingCompact(b *testing.B) {
	dev := openDeviceWith(b, vk.InstanceOptions{})
	const n, perRun = 2048, 8
	k := newKernel(b, dev, lookup(b, "compact_mask"))
	sel := mod.TopKIndices(topkScores("random", n, rand.New(rand.NewSource(1))), mod.TopK(0.125, n))
	mask := routingMask(sel, n)
	rec := dev.NewRecorder()
	defer rec.Close()
	mb := newBuffer(b, dev, u32bytes(mask))
	idx, count, args := routingBuffer(b, dev, nil, n, 0), routingBuffer(b, dev, nil, 1, 0), routingBuffer(b, dev, nil, 3, 0)
	for i := 0; i < perRun; i++ {
		rec.Dispatch(k, vk.MustPackPush(CompactPush{N: n, RowsPerGroup: 1}), [3]uint32{1, 1, 1},
			vk.Bind{Buf: mb, Access: vk.Read}, vk.Bind{Buf: idx, Access: vk.Write},
			vk.Bind{Buf: count, Access: vk.Write}, vk.Bind{Buf: args, Access: vk.Write})
	}
	require.NoError(b, dev.Run(rec))
	if err := routingExact(downloadU32(b, idx, len(sel)), routingU32(sel)); err != nil {
		b.Fatalf("wrong before timing: %v", err)
	}
	out := make([]uint32, 0, n)
	cpu := routingCPUTime(func() {
		out = out[:0]
		for i, m := range mask {
			if m != 0 {
				out = append(out, uint32(i))
			}
		}
	})
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := dev.Run(rec); err != nil {
			b.Fatal(err)
		}
	}
	per := b.Elapsed().Seconds() / float64(b.N*perRun)
	b.ReportMetric(per*1e6, "us/compact")
	b.ReportMetric(cpu*1e6, "cpu_us/compact")
	b.ReportMetric(per/cpu, "gpu/cpu")
}
