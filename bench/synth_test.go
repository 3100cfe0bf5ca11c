package bench

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/synthtest"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/synth"
	"github.com/modrun/modrun/tokenizer"
)

// A synthetic model and its twin give the CPU's greedy tokens and logits
// on Vulkan, with router and predictor routing: what bench validates
// before timing, here as a test.
func TestSyntheticModelsOnVulkanEqualTheCPU(t *testing.T) {
	for _, typ := range []gguf.TensorType{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ8_0} {
		for _, capacity := range []float32{0, 0.25} {
			m := synthtest.Build(t, typ, capacity)
			routings := []mod.Routing{mod.RoutingRouter}
			if capacity > 0 {
				routings = append(routings, mod.RoutingPredictor)
			}
			for _, r := range routings {
				b, _, err := engine.OpenBackend(m.Model, r, engine.BackendOptions{Name: engine.BackendVulkan})
				if err != nil && strings.Contains(err.Error(), "no Vulkan") {
					t.Skipf("no Vulkan device: %v", err)
				}
				require.NoError(t, err)
				ref, err := engine.NewCPU(m.Model, r)
				require.NoError(t, err)
				prompt := []int32{1, 80, 111, 122, 259, 101, 120, 259, 40, 99}
				// F32 weights: the GPU sums in other orders, a few ulps of
				// logits of |x| < 40; F16/Q8_0 weights are the same numbers
				// on both sides, so the same bound holds.
				st, err := validate(b, ref, prompt, 12, tolFloat)
				b.Close()
				require.NoError(t, err, "%s capacity %g %s", typ, capacity, r)
				assert.LessOrEqual(t, st.MaxLogitDiff, 1e-3, "%s capacity %g %s", typ, capacity, r)
				assert.Equal(t, 1.0, st.Top1Agreement, "%s capacity %g %s", typ, capacity, r)
				t.Logf("%s capacity %g %s: max |Δlogit| %.2g", typ, capacity, r, st.MaxLogitDiff)
			}
		}
	}
}

// The Llama 3 synthetic shape at a small width (its 128,256 vocabulary,
// output tied to the token embedding, RoPE at base 500000 with Llama 3.2's
// frequency factors) and its MoD twin: a chat prompt, encoded by its gpt2
// tokenizer with the special tokens read, gives the CPU's greedy tokens
// and logits on Vulkan. Tolerance as above.
func TestSyntheticLlama3OnVulkanEqualsTheCPU(t *testing.T) {
	shape, err := synth.ParseShape("llama3.2-1b,d=256,L=2,h=4,kv=2,ff=512,ctx=128")
	require.NoError(t, err)
	for _, tc := range []struct {
		typ      gguf.TensorType
		capacity float32
	}{{gguf.TypeQ8_0, 0}, {gguf.TypeF16, 0.25}} {
		m, err := synth.Build(shape, synth.Options{Type: tc.typ, Seed: 5, Capacity: tc.capacity})
		require.NoError(t, err)
		defer m.Close()
		tok, err := tokenizer.FromGGUF(m.File)
		require.NoError(t, err)
		prompt, err := tok.EncodeWith("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhello there<|eot_id|>"+
			"<|start_header_id|>assistant<|end_header_id|>\n\n", tokenizer.EncodeOptions{ParseSpecial: true})
		require.NoError(t, err)
		b, _, err := engine.OpenBackend(m.Model, mod.RoutingRouter, engine.BackendOptions{Name: engine.BackendVulkan})
		if err != nil && strings.Contains(err.Error(), "no Vulkan") {
			t.Skipf("no Vulkan device: %v", err)
		}
		require.NoError(t, err)
		ref, err := engine.NewCPU(m.Model, mod.RoutingRouter)
		require.NoError(t, err)
		st, err := validate(b, ref, prompt, 6, tolFloat)
		b.Close()
		require.NoError(t, err, "%s capacity %g", tc.typ, tc.capacity)
		assert.LessOrEqual(t, st.MaxLogitDiff, 1e-3, "%s capacity %g", tc.typ, tc.capacity)
		assert.Equal(t, 1.0, st.Top1Agreement, "%s capacity %g", tc.typ, tc.capacity)
		t.Logf("%s capacity %g: max |Δlogit| %.2g over %d prompt tokens and 6 greedy ones", tc.typ, tc.capacity, st.MaxLogitDiff, len(prompt))
	}
}

// The decode traffic adds to the weights (mod.Model.WeightBytesPerToken,
// tested in mod) the KV entries attended to: every entry of the context in
// a dense layer, a routed layer's share of them with the chance it attends.
func TestDecodeTraffic(t *testing.T) {
	dense := synthtest.Build(t, gguf.TypeQ8_0, 0)
	twin := synthtest.Build(t, gguf.TypeQ8_0, 0.25)
	kvEntry := float64(2 * synthtest.Tiny.NKVHead * (synthtest.Tiny.NEmbd / synthtest.Tiny.NHead) * 2) // F16 entries
	d := DecodeTrafficOf(dense.Model, mod.RoutingRouter, nil, 10, 2)
	assert.Equal(t, dense.WeightBytesPerToken(mod.RoutingRouter, nil), d.WeightBytes)
	assert.InDelta(t, 4*10*kvEntry, d.KVBytes, 1e-6)

	half := []float64{0, 0.5, 0, 0.5}
	r := DecodeTrafficOf(twin.Model, mod.RoutingPredictor, half, 10, 2)
	assert.Equal(t, twin.WeightBytesPerToken(mod.RoutingPredictor, half), r.WeightBytes)
	assert.InDelta(t, (2+2*0.25)*10*kvEntry, r.KVBytes, 1e-6)
	assert.Less(t, r.Total(), d.Total())
}

// Each backend's probe reports a rate and how it got it.
func TestProbeBandwidth(t *testing.T) {
	cpu, err := ProbeBandwidth(engine.BackendOptions{Name: engine.BackendCPU})
	require.NoError(t, err)
	assert.Positive(t, cpu.GBps)
	assert.Equal(t, "cpu", cpu.Device)
	_, err = ProbeBandwidth(engine.BackendOptions{Name: "metal"})
	assert.ErrorContains(t, err, `backend "metal" is not cpu, reference or vulkan`)
	gpu, err := ProbeBandwidth(engine.BackendOptions{Name: engine.BackendVulkan, Device: -1})
	if err != nil && strings.Contains(err.Error(), "no Vulkan") {
		t.Skipf("no Vulkan device: %v", err)
	}
	require.NoError(t, err)
	assert.Positive(t, gpu.GBps)
	assert.True(t, strings.HasPrefix(gpu.Device, "vulkan: "), gpu.Device)
	assert.Contains(t, gpu.Method, "probe kernel")
}
