package vulkan

import (
	"testing"

	"github.com/modrun/modrun/internal/shared"
	"github.com/modrun/modrun/mod"
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
			tok = argmax(want)
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
