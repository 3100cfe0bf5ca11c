package vulkan

import (
	"fmt"
	"testing"
	"time"

	"github.com/modrun/modrun/internal/shared"
	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/stretchr/testify/require"
)

// BenchmarkDecode times the decode step (one token per Feed, 64 tokens per
// sequence) on the Vulkan device, without the validation layer, and the CPU
// reference in the same run; each first checks 64 steps of logits against
// the other (STYLE.md: validate, then time).
//
//	go test ./engine/vulkan -run '^$' -bench Decode
func BenchmarkDecode(b *testing.B) {
	const steps = 64
	for _, bc := range []struct {
		name, path string
	}{
		{"stories260K", ""},
		{"mod-trained", "../../testdata/mod/mod-trained.gguf"},
	} {
		path := bc.path
		if path == "" {
			path = shared.Path(b, "models/stories260K.gguf")
		}
		m := openModel(b, path)
		dev := openDevice(b, false)
		run := newRunner(b, dev, m, mod.RoutingRouter)
		cpu, err := m.NewState(mod.RoutingRouter)
		require.NoError(b, err)
		tokens := make([]int32, steps)
		tok := int32(1)
		for i := range tokens { // validate: the CPU's greedy sequence, logits close
			tokens[i] = tok
			want, err := cpu.Forward([]int32{tok}, false)
			require.NoError(b, err)
			got, err := run.Feed([]int32{tok})
			require.NoError(b, err)
			require.Empty(b, closeErr(want, got, tolLogits), "step %d", i)
			tok = stats.Argmax(want)
		}
		b.Run(bc.name+"/vulkan", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				run.Reset()
				for _, t := range tokens {
					_, err := run.Feed([]int32{t})
					require.NoError(b, err)
				}
			}
			b.ReportMetric(float64(b.N*steps)/b.Elapsed().Seconds(), "tokens/s")
		})
		b.Run(bc.name+"/cpu", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				cpu.Reset()
				for _, t := range tokens {
					_, err := cpu.Forward([]int32{t}, false)
					require.NoError(b, err)
				}
			}
			b.ReportMetric(float64(b.N*steps)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkDecodeContext times 16 decode steps after 16 and after 2000
// tokens of context (stories260K, 2048 tokens of context), under the
// device's own profile and a GPU's (subgroup matvec, fused and split
// attention) forced onto it, and reports tokens/s: DESIGN.md §6 wants the
// rate at 2K context to stay near the rate at 16 (the issue: >= 70%). The
// context is fed untimed before each timed window. It validates first: the
// GPU profile's logits at the end of a 2000-token context within
// TestKVCacheF16's tolerance of the CPU's.
//
//	go test ./engine/vulkan -run '^$' -bench DecodeContext -benchtime 1x
func BenchmarkDecodeContext(b *testing.B) {
	const window = 16
	m := openModel(b, shared.Path(b, "models/stories260K.gguf"))
	dev := openDevice(b, false)
	own := DeviceProfile(dev.Info())
	gpu := gpuProfileOn(own.Device, own.SubgroupArithmetic)
	tokens := make([]int32, 2000+window)
	for i := range tokens {
		tokens[i] = int32(1 + (i*7919)%(m.Config.NVocab-1))
	}
	for _, pc := range []struct {
		name string
		p    *shaders.Profile
	}{{"own", &own}, {"gpu", &gpu}} {
		run, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: pc.p})
		require.NoError(b, err)
		b.Cleanup(run.Close)
		if pc.name == "gpu" { // validate at the long context
			cpu, err := m.NewState(mod.RoutingRouter)
			require.NoError(b, err)
			want, err := cpu.Forward(tokens[:2000], false)
			require.NoError(b, err)
			got, err := run.Feed(tokens[:2000])
			require.NoError(b, err)
			tol := tolerance{abs: tolLogits, rel: 2e-3}
			require.Empty(b, closeErr(want, got, tol.of(want)), "logits after 2000 tokens, %s", gpu)
		}
		for _, ctx := range []int{16, 2000} {
			b.Run(fmt.Sprintf("%s/ctx%d", pc.name, ctx), func(b *testing.B) {
				var timed time.Duration
				for i := 0; i < b.N; i++ {
					run.Reset()
					_, err := run.Feed(tokens[:ctx])
					require.NoError(b, err)
					start := time.Now()
					for _, t := range tokens[ctx : ctx+window] {
						_, err := run.FeedArgmax([]int32{t})
						require.NoError(b, err)
					}
					timed += time.Since(start)
				}
				b.ReportMetric(float64(b.N*window)/timed.Seconds(), "tokens/s")
				b.ReportMetric(float64(run.attnSplits), "chunks")
			})
		}
	}
}
