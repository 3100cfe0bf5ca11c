package vulkan

import (
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRoutedLayersOfMixedTypes: routed layers whose matrices differ in
// type, as llama.cpp's K-quant mixes make them (Q4_K_M gives the last
// layers' attn_v and ffn_down more bits, so their q|k|v stack no longer
// holds one type), dispatch different kernels over different workgroups,
// and each must run over its own dispatch sizes (routedTable). Here layer
// 1 keeps the file's F32 and layer 3 takes attn_v in Q8_0 (q|k|v split in
// two matvecs, not one) and ffn_down in F16. A prompt in ragged chunks,
// then the decode step token by token: after every Feed, each routed
// layer's compact cache holds the tokens the CPU's selected and the logits
// are the CPU's within tolLogits (both run the same requantized matrices),
// and at the end the caches are the CPU's; and the step runner
// (Stepper) gives six sequences their solo runs' tokens and routing. When the tables were kept per
// pass shape only, layer 3's decode step (12 dispatches: q|k and v apart)
// ran over layer 1's table (10: one q|k|v matvec): decode_kv over
// decode_attention's 8 workgroups, each matvec over another's, the last two
// past the table's end, and the first decode step's logits were 3.7 off (on
// the stories15m Q4_K_M twin, whose last layer has attn_v in Q8_0 and
// ffn_down in Q6_K, its compact cache took 5 tokens in one step). A prompt
// chunk's block (19 dispatches, q, k and v apart in every layer) read the
// same sizes either way.
func TestRoutedLayersOfMixedTypes(t *testing.T) {
	dev := openDevice(t, true)
	base := "../../testdata/mod/mod-trained"
	m := openModel(t, base+".gguf")
	require.Equal(t, []int{1, 3}, m.Config.RoutedLayers())
	b := &m.Weights.Blocks[3]
	requantize(t, &b.V, gguf.TypeQ8_0)
	requantize(t, &b.Down, gguf.TypeF16) // 172 columns: not a multiple of 32 for Q8_0
	for _, routing := range []mod.Routing{mod.RoutingRouter, mod.RoutingPredictor} {
		t.Run(routing.String(), func(t *testing.T) {
			tokens := fixtureTokens(t, base+".fixture.json")["generate-"+routing.String()]
			require.Greater(t, len(tokens), 12)
			run, err := New(dev, m, routing, Options{KVType: "f32"})
			require.NoError(t, err)
			defer run.Close()
			cpu, err := m.NewState(routing)
			require.NoError(t, err)
			var sawDecodeSelect bool
			feed := func(toks []int32) {
				want, err := cpu.Forward(toks, false)
				require.NoError(t, err)
				before, err := run.CacheEntries()
				require.NoError(t, err)
				got, err := run.Feed(toks)
				require.NoError(t, err)
				entries, err := run.CacheEntries()
				require.NoError(t, err)
				for _, l := range m.Config.RoutedLayers() {
					require.Equal(t, cpu.Selected[l], entries[l], "layer %d's entries after %d tokens (a Feed of %d, the layer had %d)",
						l, cpu.Pos(), len(toks), before[l])
					if len(toks) == 1 && l == 3 && entries[l] > before[l] {
						sawDecodeSelect = true
					}
				}
				require.Empty(t, closeErr(want, got, tolLogits), "logits after %d tokens", cpu.Pos())
			}
			prompt := tokens[:len(tokens)/2]
			for _, n := range []int{5, 1, 3} {
				n = min(n, len(prompt))
				feed(prompt[:n])
				prompt = prompt[n:]
			}
			if len(prompt) > 0 {
				feed(prompt)
			}
			for _, tok := range tokens[len(tokens)/2:] {
				feed([]int32{tok})
			}
			assert.True(t, sawDecodeSelect, "layer 3 selected a token in the decode step (checked, not assumed)")
			assertCaches(t, cpu, run, tolF32)
		})
		// The step runner's routed blocks take their tables alike: six
		// sequences' tokens and routing are their solo runs' (checked
		// against the CPU above).
		t.Run(routing.String()+"/step", func(t *testing.T) { vulkanStepMatchesSolo(t, dev, m, routing, "f32", 6, nil) })
	}
}
