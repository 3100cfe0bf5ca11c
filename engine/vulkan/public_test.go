package vulkan

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/convert"
	"github.com/modrun/modrun/mod/quant"
)

// convertedPublic converts a public layout's fixture checkpoint
// (testdata/convert/NAME/, see mod/convert's public_test.go) and opens it.
func convertedPublic(t *testing.T, dir string) (*mod.Model, []int32) {
	t.Helper()
	root := filepath.Join("../../testdata/convert", dir)
	raw, err := os.ReadFile(filepath.Join(root, "golden.json"))
	require.NoError(t, err)
	var g struct {
		Checkpoint, Config string
		Tokens             []int32
	}
	require.NoError(t, json.Unmarshal(raw, &g))
	src, err := convert.Load(filepath.Join(root, g.Checkpoint), filepath.Join(root, g.Config))
	require.NoError(t, err)
	vocab, err := gguf.Open("../../testdata/convert/vocab512.gguf")
	require.NoError(t, err)
	defer vocab.Close()
	f32, err := quant.Pure(gguf.TypeF32)
	require.NoError(t, err)
	w, err := convert.Convert(src.Checkpoint, src.Config, vocab, convert.Options{Scheme: f32})
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), dir+".gguf")
	require.NoError(t, w.WriteFile(out))
	return openModel(t, out), g.Tokens
}

// TestEvalPublicLayouts: eval mode of the public MoD layouts' semantics
// (gate on the MLP or on the output, compact positions, k as a token count
// or floor(c·S), k = 0 included) on the GPU equals the CPU reference:
// logits within tolLogits, the same selected positions. Longer and shorter
// sequences than the fixture's move k across its rules' edges.
func TestEvalPublicLayouts(t *testing.T) {
	dev := openDevice(t, true)
	for _, dir := range []string{"modllama2-aux", "modllama2", "mixtureai-meta", "mixtureai-hf"} {
		t.Run(dir, func(t *testing.T) {
			m, tokens := convertedPublic(t, dir)
			require.NotEmpty(t, m.Config.Semantics())
			e := newEvaluator(t, dev, m)
			for _, s := range []int{len(tokens), 3, 11} {
				seq := tokens[:s]
				got, err := e.Eval(seq)
				require.NoError(t, err)
				cpu, cpuSel := cpuEval(t, m, seq)
				assert.Empty(t, closeErr(cpu, got, tolLogits), "S=%d", s)
				gotSel, err := e.Selected()
				require.NoError(t, err)
				for l, want := range cpuSel {
					if want == nil && gotSel[l] != nil {
						want = []int{}
					}
					assert.Equal(t, want, gotSel[l], "S=%d layer %d selected positions", s, l)
				}
				t.Logf("S=%d k=%d: max |logit diff| vs CPU %.2g", s, m.Config.TopKCount(s), maxAbsDiff(cpu, got))
			}
		})
	}
}

// TestGenerateRefusesPublicSemantics: the causal step does not run those
// variants yet, so New refuses them, naming the keys (auto falls back to
// the CPU).
func TestGenerateRefusesPublicSemantics(t *testing.T) {
	dev := openDevice(t, true)
	m, _ := convertedPublic(t, "modllama2")
	_, err := New(dev, m, mod.RoutingRouter, Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mod.gate_target = mlp")
	assert.Contains(t, err.Error(), "generate on the CPU only")
}
