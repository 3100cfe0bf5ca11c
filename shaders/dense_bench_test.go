package shaders

// Benchmarks of the dense ops (BenchmarkDense), each run checked against the
// reference before it is timed.

import (
	"fmt"
	"testing"
	"time"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/require"
)

// ---- Benchmarks

// BenchmarkDense times each dense op at a decode or prefill size on this
// device, after checking its result against the reference, and reports the
// bytes the op must read and write per second, the time per dispatch, and
// the ratio to add's bandwidth on 4M floats measured in the same run (what
// an elementwise pass can reach here). Each Run replays perRun dispatches,
// so the submit cost is spread over them, as in a decode step.
func BenchmarkDense(b *testing.B) {
	dev := openDeviceWith(b, vk.InstanceOptions{})
	const perRun = 8
	timed := func(b *testing.B, r *denseRun, reps int) float64 { // seconds per dispatch
		rec := dev.NewRecorder()
		defer rec.Close()
		for i := 0; i < perRun; i++ {
			r.record(rec)
		}
		require.NoError(b, dev.Run(rec)) // records
		start := time.Now()
		for i := 0; i < reps; i++ {
			require.NoError(b, dev.Run(rec))
		}
		return time.Since(start).Seconds() / float64(reps*perRun)
	}
	var w denseWorst
	addK := newKernel(b, dev, lookup(b, "add"))
	const addN = 4 << 20
	a := newBuffer(b, dev, f32bytes(make([]float32, addN)))
	add := &denseRun{k: addK, push: AddPush{N: addN}, groups: Groups(addN / 256),
		binds: []vk.Bind{denseBind(a, vk.Read), denseBind(a, vk.Read), denseBind(a, vk.Write)}, bytes: 3 * 4 * addN}
	addGBs := float64(add.bytes) / timed(b, add, 5) / 1e9
	b.Logf("baseline: add over %d floats, %.2f GB/s", addN, addGBs)

	type benchCase struct {
		name string
		make func(b *testing.B) *denseRun
	}
	var cases []benchCase
	// The row kernels, with each default spec: decode (one row) and prefill.
	rowRun := map[string]func(b *testing.B, k *vk.Kernel, cols, n int) *denseRun{
		"rmsnorm": func(b *testing.B, k *vk.Kernel, cols, n int) *denseRun {
			return rmsnormRun(b, dev, k, cols, n, false, 1)
		},
		"nll": func(b *testing.B, k *vk.Kernel, cols, n int) *denseRun {
			return nllRun(b, dev, k, cols, n, 1)
		},
		"argmax": func(b *testing.B, k *vk.Kernel, cols, n int) *denseRun { return argmaxRun(b, dev, k, cols, n, 1) },
	}
	for _, rc := range []struct {
		name    string
		n, cols int
	}{{"rmsnorm", 1, 4096}, {"rmsnorm", 64, 4096}, {"nll", 1, 32000}, {"nll", 64, 32000}, {"argmax", 1, 32000}} {
		for _, sp := range []struct {
			name string
			spec []uint32
		}{{"gpu-spec", RowSpecGPU}, {"cpu-spec", lavapipeProfile.Row(rc.name, uint32(rc.cols))}} {
			cases = append(cases, benchCase{fmt.Sprintf("%s/%dx%d/%s", rc.name, rc.n, rc.cols, sp.name), func(b *testing.B) *denseRun {
				return rowRun[rc.name](b, newKernel(b, dev, lookup(b, rc.name), sp.spec...), rc.cols, rc.n)
			}})
		}
	}
	cases = append(cases,
		benchCase{"rope/64x32x128", func(b *testing.B) *denseRun {
			return ropeRun(b, dev, newKernel(b, dev, lookup(b, "rope")), 128, 32, 64, 1, ropeTable(b, 128, "llama3.2"), false, 1)
		}},
		benchCase{"swiglu/64x11008", func(b *testing.B) *denseRun {
			return swigluRun(b, dev, newKernel(b, dev, lookup(b, "swiglu")), 64*11008, false, 1)
		}},
		benchCase{"mod_residual_sigmoid/512x4096/k64", func(b *testing.B) *denseRun {
			return modResidualRun(b, dev, newKernel(b, dev, lookup(b, "mod_residual_sigmoid")), mod.GateSigmoid, mod.GateTargetBlock, 4096, 512, 64, 0, 1)
		}},
		benchCase{"embed_f16/64/4096x4096", func(b *testing.B) *denseRun {
			_, r := embedRun(b, dev, newKernel(b, dev, lookup(b, "embed_f16")), gguf.TypeF16, 4096, 4096, 64, 0, 1, false)
			return r
		}},
	)
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			r := c.make(b)
			if err := r.run(b, dev, &w); err != nil {
				b.Fatalf("wrong before timing: %v", err)
			}
			b.ResetTimer()
			perDispatch := timed(b, r, b.N)
			gbs := float64(r.bytes) / perDispatch / 1e9
			b.ReportMetric(gbs, "GB/s")
			b.ReportMetric(gbs/addGBs, "x-add")
			b.ReportMetric(perDispatch*1e6, "us/dispatch")
		})
	}
}
