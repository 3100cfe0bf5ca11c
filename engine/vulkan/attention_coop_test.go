package vulkan

import (
	"fmt"
	"slices"
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The prefill's attention on tensor cores (attention_coop,
// MODRUN_ATTENTION_COOP=1), its products emulated on this device.

// coopAttentionProfile is prof with the tensor-core matmul and attention,
// their products emulated.
func coopAttentionProfile(prof shaders.Profile) *shaders.Profile {
	prof.MatmulCoop, prof.MatmulCoopEmulate, prof.AttentionCoop = true, true, true
	return &prof
}

// TestAttentionCoopCheckCase: the self-check's case for attention_coop
// (the check's rows, heads and gapped cache in 2 key tiles, on the partial
// results) passes with the emulated product at both of Llama's head
// dimensions, and a profile under AttentionCoop checks it at both.
func TestAttentionCoopCheckCase(t *testing.T) {
	dev := openDevice(t, true)
	prof := coopAttentionProfile(DeviceProfile(dev.Info()))
	ks := newKernels(dev, prof, nil)
	defer ks.Close()
	real, err := shaders.Lookup(shaders.AttentionCoopName(false))
	require.NoError(t, err)
	for _, hd := range []uint32{64, 128} {
		spec := shaders.AttentionCoopSpec(hd)
		c, err := attentionLanesCase(real, spec)
		require.NoError(t, err)
		require.Equal(t, "prefill attention f16 tensor cores", c.op)
		emu, err := ks.get(shaders.AttentionCoopName(true), spec)
		require.NoError(t, err)
		worst, _, err := runCheck(dev, emu, c, false)
		require.NoError(t, err)
		assert.LessOrEqual(t, worst, 1.0, "head dim %d", hd)
		t.Logf("head dim %d: %.3g of the bound", hd, worst)
	}
	var coop []string
	for _, p := range profilePicks(*prof) {
		if shaders.IsAttentionCoop(p.name) {
			coop = append(coop, fmt.Sprint(p.spec))
		}
	}
	assert.Equal(t, []string{fmt.Sprint(shaders.AttentionCoopSpec(64)), fmt.Sprint(shaders.AttentionCoopSpec(128))}, coop, "the picks the self-check runs")
}

// MODRUN_ATTENTION_COOP: unset and 0 off, 1 on where the tensor-core
// matmul runs; anything else is refused by name when a runner opens.
func TestAttentionCoopEnv(t *testing.T) {
	dev := openDevice(t, false)
	for _, tc := range []struct {
		v  string
		on bool
	}{{"", false}, {"0", false}, {"1", true}} {
		t.Setenv("MODRUN_ATTENTION_COOP", tc.v)
		on, err := attentionCoopEnv(nil)
		require.NoError(t, err, tc.v)
		assert.Equal(t, tc.on, on, "%q", tc.v)
		facts := deviceFacts(dev.Info(), nil)
		assert.Equal(t, tc.on, facts.AttentionCoop, "%q", tc.v)
		facts.CPU, facts.CooperativeMatrixNV, facts.SubgroupSize, facts.TensorCores = false, true, shaders.MatmulCoopSubgroup, true
		assert.Equal(t, tc.on, shaders.NewProfile(facts).AttentionCoop, "%q: a GPU with tensor cores", tc.v)
		facts.CooperativeMatrixNV = false
		assert.False(t, shaders.NewProfile(facts).AttentionCoop, "%q: a GPU without them", tc.v)
	}
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	t.Setenv("MODRUN_ATTENTION_COOP", "yes")
	_, err := New(dev, m, mod.RoutingRouter, Options{})
	assert.ErrorContains(t, err, `MODRUN_ATTENTION_COOP="yes"`)
}

// TestPrefillAttentionCoop: a MoD model with heads of 32 (attention_coop's
// tiles; the fixtures' heads of 8 are not) prefilled in chunks of 1 to 70
// tokens (a chunk past a workgroup's 64 rows, a routed layer's few
// selected rows) under the device's own profile and a GPU's, each with the
// tensor-core attention and matmul emulated and an F16 cache, router and
// predictor routing, against the CPU: the logits after each chunk (the F16
// cache's bound), each routed layer's decisions, the caches; and the
// attention kernel that ran was attention_coop.
func TestPrefillAttentionCoop(t *testing.T) {
	dev := openDevice(t, true)
	wm := wideModel{nVocab: 96, nEmbd: 128, nLayer: 4, nHead: 4, nKVHead: 2, nFF: 256, ctx: 192,
		predHidden: 64, routed: []uint32{1, 3}, routerBias: 0.3, seed: 32}
	m := openModel(t, wm.write(t))
	require.Equal(t, 32, m.Config.HeadDim)
	tokens := make([]int32, 160)
	for i := range tokens {
		tokens[i] = int32((i*37 + 5) % wm.nVocab)
	}
	chunks := []int{1, 70, 9, 3} // then the rest, whole
	profiles := testProfiles(t, dev)
	for _, name := range []string{"own", "gpu-shared"} {
		prof := coopAttentionProfile(*profiles[name])
		for _, routing := range []mod.Routing{mod.RoutingRouter, mod.RoutingPredictor} {
			t.Run(fmt.Sprintf("%s/%s", name, routing), func(t *testing.T) {
				run, err := New(dev, m, routing, Options{DeviceProfile: prof, KVType: "f16", PromptSteps: -1})
				require.NoError(t, err)
				defer run.Close()
				cpu := runReference(t, m, routing, run)
				var worst float64
				for _, toks := range cutChunks(tokens, chunks) {
					want, tol := cpu.Forward(t, toks, false, tolF32)
					got, err := run.Feed(toks)
					require.NoError(t, err)
					require.Empty(t, closeErr(want, got, tol), "logits after %d tokens", cpu.Pos())
					worst = max(worst, maxAbsDiff(want, got)/tol)
					entries, err := run.CacheEntries()
					require.NoError(t, err)
					for l := range entries {
						if m.Config.Routed[l] {
							require.Equal(t, cpu.Selected[l], entries[l], "after %d tokens, layer %d: routing", cpu.Pos(), l)
						}
					}
				}
				cpu.assertCaches(t, run, tolF32)
				var names []string
				for k := range run.ks.made {
					names = append(names, k)
				}
				assert.True(t, slices.ContainsFunc(names, shaders.IsAttentionCoop), "attention_coop ran: %v", names)
				t.Logf("%d tokens: max |logit diff| %.2g of its bound", len(tokens), worst)
			})
		}
	}
}
