package mod

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/modrun/modrun/internal/stats"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The golden fixtures in testdata/mod are written by train/fixtures.py: the
// PyTorch reference's logits, routing decisions and hidden states for fixed
// models (converted to GGUF by modrun convert) and fixed tokens.
type fixtureFile struct {
	Format string        `json:"format"`
	Model  string        `json:"model"`
	Cases  []fixtureCase `json:"cases"`
}

type fixtureCase struct {
	Name    string         `json:"name"`
	Mode    string         `json:"mode"`    // "eval" | "generate"
	Routing string         `json:"routing"` // generate: "router" | "predictor"
	Prompt  []int32        `json:"prompt"`  // greedy cases: the prompt; tokens = prompt + greedy continuation
	Tokens  []int32        `json:"tokens"`
	Logits  f32Tensor      `json:"logits"` // [S][nVocab]
	Hidden  f32Tensor      `json:"hidden"` // [S][nEmbd], after output_norm
	Layers  []fixtureLayer `json:"layers"`
}

type fixtureLayer struct {
	Layer           int       `json:"layer"`
	RouterLogits    f32Tensor `json:"router_logits"`
	Selected        []int     `json:"selected"`
	PredictorLogits f32Tensor `json:"predictor_logits"`
}

// f32Tensor is {"shape": [...], "f32": base64 of little-endian float32}.
type f32Tensor struct {
	Shape []int  `json:"shape"`
	F32   string `json:"f32"`
}

func (f f32Tensor) values(t *testing.T) []float32 {
	if f.F32 == "" {
		return nil
	}
	raw, err := base64.StdEncoding.DecodeString(f.F32)
	require.NoError(t, err)
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	n := 1
	for _, d := range f.Shape {
		n *= d
	}
	require.Len(t, out, n, "shape %v", f.Shape)
	return out
}

// Tolerances, Go float32 against PyTorch float32. The two sum in different
// orders (PyTorch's BLAS blocks its dot products), so each value carries a
// few float32 ulps of its partial sums. Measured maxima over all fixtures:
// router 2.6e-6, predictor 6.6e-6, hidden 8.6e-6, logits 1.7e-5; each
// tolerance leaves about 4x room for another machine's summation order.
const (
	tolRouter = 1e-5
	tolHidden = 4e-5
	tolLogits = 1e-4
	// Decisions must agree wherever the router (or predictor) logit is
	// farther than this from the threshold that decided it.
	decisionMargin = 1e-3
)

func TestGoldenFixtures(t *testing.T) {
	paths, err := filepath.Glob("../testdata/mod/*.fixture.json")
	require.NoError(t, err)
	require.NotEmpty(t, paths, "the fixtures are committed under testdata/mod")
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		var fx fixtureFile
		require.NoError(t, json.Unmarshal(raw, &fx), path)
		require.Equal(t, "modrun-mod-fixture/1", fx.Format, path)
		t.Run(fx.Model, func(t *testing.T) {
			m, err := Open(filepath.Join(filepath.Dir(path), fx.Model))
			require.NoError(t, err)
			defer m.Close()
			for _, c := range fx.Cases {
				t.Run(c.Name, func(t *testing.T) { checkFixtureCase(t, m, c) })
			}
		})
	}
}

func checkFixtureCase(t *testing.T, m *Model, c fixtureCase) {
	routing := RoutingTopK
	if c.Mode == "generate" {
		var err error
		routing, err = ParseRouting(c.Routing)
		require.NoError(t, err)
	}
	s, err := m.NewState(routing)
	require.NoError(t, err)
	tr := &Trace{}
	s.Trace = tr
	var logits, hidden []float32
	traces := map[int]*LayerTrace{}
	if len(c.Prompt) > 0 {
		// A greedy case: the prompt in one call, then one token at a time,
		// through the compact caches, as generation runs.
		out, err := s.Forward(c.Prompt, true)
		require.NoError(t, err)
		logits, hidden = append(logits, out...), append(hidden, tr.Hidden...)
		mergeTraces(traces, tr)
		for i := len(c.Prompt); i < len(c.Tokens); i++ {
			assert.Equal(t, c.Tokens[i], stats.Argmax(out[len(out)-m.Config.NVocab:]), "greedy token %d", i)
			out, err = s.Forward(c.Tokens[i:i+1], true)
			require.NoError(t, err)
			logits, hidden = append(logits, out...), append(hidden, tr.Hidden...)
			mergeTraces(traces, tr)
		}
	} else {
		out, err := s.Forward(c.Tokens, true)
		require.NoError(t, err)
		logits, hidden = out, tr.Hidden
		mergeTraces(traces, tr)
	}

	require.Len(t, traces, len(c.Layers), "routed layers")
	for _, want := range c.Layers {
		got := traces[want.Layer]
		require.NotNil(t, got, "layer %d", want.Layer)
		wantR := want.RouterLogits.values(t)
		assertClose(t, wantR, got.RouterLogits, tolRouter, "layer %d router logits", want.Layer)
		wantP := want.PredictorLogits.values(t)
		if wantP != nil {
			assertClose(t, wantP, got.PredictorLogits, tolRouter, "layer %d predictor logits", want.Layer)
		}
		decisive := wantR
		if routing == RoutingPredictor {
			decisive = wantP
		}
		checkDecisions(t, want.Layer, routing, decisive, want.Selected, got.Selected, TopK(m.Config.Capacity, len(c.Tokens)))
		// The compact cache holds exactly the selected tokens, in order.
		_, _, pos := s.KV(want.Layer)
		assert.Equal(t, toInt32(want.Selected), nilIfEmpty(pos), "layer %d cache positions", want.Layer)
	}
	assertClose(t, c.Hidden.values(t), hidden, tolHidden, "final hidden states")
	assertClose(t, c.Logits.values(t), logits, tolLogits, "logits")
}

// mergeTraces appends one call's per-layer trace to the sequence's.
func mergeTraces(acc map[int]*LayerTrace, tr *Trace) {
	for _, lt := range tr.Layers {
		a, ok := acc[lt.Layer]
		if !ok {
			a = &LayerTrace{Layer: lt.Layer}
			acc[lt.Layer] = a
		}
		a.RouterLogits = append(a.RouterLogits, lt.RouterLogits...)
		a.PredictorLogits = append(a.PredictorLogits, lt.PredictorLogits...)
		a.Selected = append(a.Selected, lt.Selected...)
	}
}

// checkDecisions compares the selected positions. A disagreement is allowed
// only where the deciding logit is within decisionMargin of the threshold:
// 0 for causal routing, the k-th largest logit for top-k.
func checkDecisions(t *testing.T, layer int, r Routing, logits []float32, want, got []int, k int) {
	t.Helper()
	threshold := float32(0)
	if r == RoutingTopK {
		sorted := append([]float32(nil), logits...)
		sortDesc(sorted)
		threshold = (sorted[k-1] + sorted[min(k, len(sorted)-1)]) / 2
	}
	in := func(s []int, p int) bool {
		for _, v := range s {
			if v == p {
				return true
			}
		}
		return false
	}
	var differing int
	for p := range logits {
		if in(want, p) == in(got, p) {
			continue
		}
		differing++
		assert.LessOrEqual(t, math.Abs(float64(logits[p]-threshold)), decisionMargin,
			"layer %d position %d: decisions differ where the logit %g is far from the threshold %g", layer, p, logits[p], threshold)
	}
	if differing == 0 {
		assert.Equal(t, want, nilIfEmptyInts(got), "layer %d selected positions", layer)
	}
}

func sortDesc(x []float32) {
	for i := 1; i < len(x); i++ {
		for j := i; j > 0 && x[j] > x[j-1]; j-- {
			x[j], x[j-1] = x[j-1], x[j]
		}
	}
}

func toInt32(x []int) []int32 {
	if len(x) == 0 {
		return nil
	}
	out := make([]int32, len(x))
	for i, v := range x {
		out[i] = int32(v)
	}
	return out
}

func nilIfEmpty(x []int32) []int32 {
	if len(x) == 0 {
		return nil
	}
	return x
}

func nilIfEmptyInts(x []int) []int {
	if len(x) == 0 {
		return []int{}
	}
	return x
}
