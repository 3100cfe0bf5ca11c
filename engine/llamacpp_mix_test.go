package engine

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/shared"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/tokenizer"
)

// llamaCppMixes are the files llama.cpp's llama-quantize made of one small
// model (../shared/data/quant, SOURCES.md): each a real llama.cpp mix, most
// holding several tensor types.
var llamaCppMixes = []string{"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"}

// mixScorers are the backends on which a quantized model must score as its
// F32 twin, and how closely (relative perplexity). The reference's products
// of packed blocks sum in another order than its F32 dot products, and
// nothing else differs: a few float32 ulps in the logits.
var mixScorers = []struct {
	name string
	tol  float64
	open func(t *testing.T, m *mod.Model) Scorer
}{
	{"reference", 1e-4, func(t *testing.T, m *mod.Model) Scorer {
		sc, err := NewCPUScorer(m, mod.RoutingTopK)
		require.NoError(t, err)
		return sc
	}},
}

const mixText = `Once upon a time, in a small village by the sea, there lived a girl
named Mia. Every morning she walked to the shore to look for shells.`

// TestLlamaCppMixesScoreAsTheirF32Twin: a model in each llama.cpp mix scores
// a text (several windows) as an F32 model holding its dequantized values.
func TestLlamaCppMixesScoreAsTheirF32Twin(t *testing.T) {
	for _, mix := range llamaCppMixes {
		t.Run(mix, func(t *testing.T) {
			path := shared.Path(t, "quant/kq-"+mix+".gguf")
			twin := writeF32Twin(t, path)
			for _, sc := range mixScorers {
				q, f := scoreFile(t, path, sc.open), scoreFile(t, twin, sc.open)
				require.Greater(t, q.Windows, 2, "the text spans several windows")
				assert.InEpsilon(t, f.Perplexity(), q.Perplexity(), sc.tol, "%s on %s: perplexity of the mix vs its F32 twin", mix, sc.name)
				t.Logf("%s on %s: %d tokens in %d windows, perplexity %.6f, twin %.6f", mix, sc.name, q.Tokens, q.Windows, q.Perplexity(), f.Perplexity())
			}
		})
	}
}

// scoreFile is the perplexity of the model in path on mixText, in windows of 48.
func scoreFile(t *testing.T, path string, open func(t *testing.T, m *mod.Model) Scorer) PerplexityResult {
	m, err := mod.Open(path)
	require.NoError(t, err)
	defer m.Close()
	tok, err := tokenizer.FromGGUF(m.File)
	require.NoError(t, err)
	ids, err := tok.Encode(mixText, false)
	require.NoError(t, err)
	res, err := Perplexity(open(t, m), ids, tok.BOS(), 48, nil)
	require.NoError(t, err)
	return res
}

// writeF32Twin writes the model in path with every tensor dequantized to F32
// (the same metadata) into t.TempDir() and returns its path.
func writeF32Twin(t *testing.T, path string) string {
	f, err := gguf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	w := gguf.NewWriter()
	for _, kv := range f.KVs {
		if kv.Key != gguf.KeyAlignment {
			require.NoError(t, w.SetKV(kv.Key, kv.Value))
		}
	}
	for _, ti := range f.Tensors {
		vals, err := f.TensorFloat32(ti.Name)
		require.NoError(t, err)
		require.NoError(t, w.AddFloat32(ti.Name, gguf.TypeF32, ti.Dims, vals))
	}
	out := filepath.Join(t.TempDir(), "f32-twin.gguf")
	require.NoError(t, w.WriteFile(out))
	return out
}
