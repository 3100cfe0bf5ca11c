package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine/vulkan"
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/synth"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
	"github.com/modrun/modrun/vk/vktest"
)

// BenchmarkSampledToken is a decode token at temperature 1 on the Vulkan
// runner under a GPU's profile, drawn three ways: "host" (Feed: the
// logits read back, then engine.Sampler's draw), "device" (FeedDraw:
// argmax_wide's draw, 4 bytes back) and, for scale, "greedy" (FeedArgmax);
// and with top-p 0.95, min-p 0.05 and top-k 40 on the host and the device
// ("host-top-p", "device-top-p", "device-min-p", "host-top-k",
// "device-top-k"), and top-k 40 with top-p 0.95 ("device-top-k-top-p").
// The model is stories15M's shape cut to one layer, so that the head (a
// 32,000-token vocabulary) is a large part of the token, as it is for a
// 1.1B model on a GPU.
func BenchmarkSampledToken(b *testing.B) {
	if err := vk.Load(); err != nil {
		b.Skipf("no Vulkan loader: %v", err)
	}
	dev := vktest.Open(b, vk.InstanceOptions{})
	sh, err := synth.ParseShape("stories15m,L=1")
	require.NoError(b, err)
	sm, err := synth.Build(sh, synth.Options{Type: gguf.TypeQ8_0, Seed: 1})
	require.NoError(b, err)
	defer sm.Close()
	own := vulkan.DeviceProfile(dev.Info())
	gpu := shaders.GPUProfile(own.Device)
	const ctx = 256
	run, err := vulkan.New(dev, sm.Model, mod.RoutingRouter, vulkan.Options{DeviceProfile: &gpu, ContextLen: ctx, Knobs: vulkan.Knobs{"MODRUN_CHAIN": "1"}})
	require.NoError(b, err)
	defer run.Close()
	for _, mode := range []string{"host", "device", "greedy", "host-top-p", "device-top-p", "device-min-p", "host-top-k", "device-top-k", "device-top-k-top-p"} {
		opts := DefaultSampler()
		opts.Temperature, opts.Seed = 1, 3
		switch mode {
		case "host-top-p", "device-top-p":
			opts.TopP = 0.95
		case "device-min-p":
			opts.MinP = 0.05
		case "host-top-k", "device-top-k":
			opts.TopK = 40
		case "device-top-k-top-p":
			opts.TopK, opts.TopP = 40, 0.95
		}
		b.Run(mode, func(b *testing.B) {
			s, err := NewSampler(opts)
			require.NoError(b, err)
			token := int32(1)
			run.Reset()
			b.ResetTimer()
			for range b.N {
				if run.Pos() == ctx {
					run.Reset()
				}
				switch mode {
				case "host", "host-top-p", "host-top-k":
					logits, err := run.Feed([]int32{token})
					require.NoError(b, err)
					token = s.Sample(logits)
				case "device", "device-top-p", "device-min-p", "device-top-k", "device-top-k-top-p":
					d, ok := s.Plain()
					require.True(b, ok)
					token, err = run.FeedDraw([]int32{token}, d, s.Uniform())
					require.NoError(b, err)
				case "greedy":
					token, err = run.FeedArgmax([]int32{token})
					require.NoError(b, err)
				}
			}
		})
	}
}
