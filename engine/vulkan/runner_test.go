package vulkan

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/shared"
	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/tokenizer"
	"github.com/modrun/modrun/vk"
	"github.com/modrun/modrun/vk/vktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tolerance of GPU logits against mod's CPU reference, F32 weights: the
// kernels sum in other orders than the CPU (matvec one running sum per row,
// dotF32 four; attention an online softmax), so each value carries a few
// float32 ulps of its partial sums, ~1e-6 at |logit| < 20; 1e-4 is the
// issue's bound and leaves room. Router scores are the CPU's bit for bit
// given the same x (router.comp), but x itself differs by those ulps, so a
// routing decision may only differ where |r| is within decisionMargin of 0.
const (
	tolLogits      = 1e-4
	decisionMargin = 1e-4
)

// openDevice opens the default Vulkan device with the validation layer when
// it is installed, or skips t when there is no device. At cleanup it fails t
// on any validation message.
func openDevice(t testing.TB, validation bool) *vk.Device {
	t.Helper()
	return vktest.Open(t, vk.InstanceOptions{Validation: validation})
}

func openModel(t testing.TB, path string) *mod.Model {
	t.Helper()
	m, err := mod.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// newRunner makes a runner with the device's profile and an F32 KV cache,
// whatever the device's default: the tests that use it compare with the
// CPU at tolLogits (TestKVCacheF16 has the F16 cache's tolerance).
func newRunner(t testing.TB, dev *vk.Device, m *mod.Model, r mod.Routing) *Runner {
	t.Helper()
	run, err := New(dev, m, r, Options{KVType: "f32"})
	require.NoError(t, err)
	t.Cleanup(run.Close)
	return run
}

// closeErr says how got differs from want beyond tol: the max abs error, the
// first bad index and a few pairs; "" when it does not.
func closeErr(want, got []float32, tol float64) string {
	if len(want) != len(got) {
		return fmt.Sprintf("length %d, want %d", len(got), len(want))
	}
	var maxErr float64
	first := -1
	for i := range want {
		e := math.Abs(float64(want[i]) - float64(got[i]))
		if (e > tol || math.IsNaN(e)) && first < 0 {
			first = i
		}
		maxErr = math.Max(maxErr, e)
	}
	if first < 0 {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "max abs error %.3g > %.3g, first bad index %d:", maxErr, tol, first)
	for i := first; i < min(first+4, len(want)); i++ {
		fmt.Fprintf(&sb, "\n  [%d] want %.7g got %.7g", i, want[i], got[i])
	}
	return sb.String()
}

func maxAbsDiff(a, b []float32) float64 {
	var m float64
	for i := range a {
		m = math.Max(m, math.Abs(float64(a[i])-float64(b[i])))
	}
	return m
}

// TestStories260KGreedy: 200 greedy tokens of stories260K on the GPU are
// llama2.c's, the GPU's argmax is the CPU's, and the logits are within
// tolLogits of the CPU reference at every step.
func TestStories260KGreedy(t *testing.T) {
	path := shared.Path(t, "models/stories260K.gguf")
	g := shared.Stories260KGreedy(t)

	dev := openDevice(t, true)
	m := openModel(t, path)
	run := newRunner(t, dev, m, mod.RoutingRouter)
	cpu, err := m.NewState(mod.RoutingRouter)
	require.NoError(t, err)

	var ids []int32
	var worst float64
	var gpuTime, cpuTime time.Duration
	tok := g.BOS
	for step := 0; step < len(g.IDs); step++ {
		t0 := time.Now()
		got, err := run.Feed([]int32{tok})
		require.NoError(t, err)
		best, err := run.lastArgmax()
		require.NoError(t, err)
		t1 := time.Now()
		want, err := cpu.Forward([]int32{tok}, false)
		require.NoError(t, err)
		cpuTime += time.Since(t1)
		gpuTime += t1.Sub(t0)
		if msg := closeErr(want, got, tolLogits); msg != "" {
			require.Failf(t, "logits differ", "step %d: %s", step, msg)
		}
		worst = math.Max(worst, maxAbsDiff(want, got))
		require.Equal(t, stats.Argmax(want), best, "step %d: GPU argmax", step)
		tok = best
		ids = append(ids, tok)
	}
	assert.Equal(t, g.IDs, ids)
	assert.Equal(t, len(g.IDs), run.Pos())
	t.Logf("max |logit diff| over 200 steps %.2g; decode with validation: GPU %.0f tokens/s, CPU %.0f tokens/s",
		worst, 200/gpuTime.Seconds(), 200/cpuTime.Seconds())

	if want, err := os.ReadFile(shared.Path(t, "models/stories260K_greedy200_expected.txt")); err == nil {
		tk, err := tokenizer.FromGGUF(m.File)
		require.NoError(t, err)
		text, err := tk.Decode(ids)
		require.NoError(t, err)
		assert.Equal(t, strings.TrimSpace(string(want)), strings.TrimSpace(string(text)))
	}
}

// TestStepRecordedOnce: decoding N tokens, across a Reset, records the step's
// command buffer once (at the first token), whatever N.
func TestStepRecordedOnce(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	run := newRunner(t, dev, m, mod.RoutingRouter)
	before := dev.Stats()
	feed := func(n int) {
		for i := 0; i < n; i++ {
			_, err := run.Feed([]int32{int32(1 + 7*i%500)})
			require.NoError(t, err)
		}
	}
	feed(3)
	after3 := dev.Stats()
	feed(20)
	run.Reset()
	feed(10)
	after := dev.Stats()
	assert.Equal(t, 1, after3.Recordings-before.Recordings, "the first token records the step")
	assert.Equal(t, 0, after.Recordings-after3.Recordings, "30 more tokens and a Reset record nothing")
	assert.Equal(t, 1, run.step.Stats().Recordings)
	assert.Equal(t, 33, run.step.Stats().Submits, "one replay per token")
	t.Logf("step: %d dispatches, %d barriers", run.step.Stats().Dispatches, run.step.Stats().Barriers)
}

// fixtureTokens are the token sequences of a fixture's generate cases.
func fixtureTokens(t *testing.T, path string) map[string][]int32 {
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var f struct {
		Cases []struct {
			Name   string  `json:"name"`
			Mode   string  `json:"mode"`
			Tokens []int32 `json:"tokens"`
		} `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(raw, &f))
	out := map[string][]int32{}
	for _, c := range f.Cases {
		if c.Mode == "generate" {
			out[c.Name] = c.Tokens
		}
	}
	return out
}

// fixtureCase is a fixture model (testdata/mod/MODEL.gguf) and a causal
// routing to run it with.
type fixtureCase struct {
	model   string
	routing mod.Routing
}

// modFixtures are the MoD fixture models with each routing they have.
var modFixtures = []fixtureCase{
	{"mod-trained", mod.RoutingRouter},
	{"mod-trained", mod.RoutingPredictor},
	{"mod-rand-sigmoid-pred", mod.RoutingRouter},
	{"mod-rand-sigmoid-pred", mod.RoutingPredictor},
	{"mod-rand-identity-bias", mod.RoutingRouter},
}

// TestMoDGenerate runs the MoD fixture models on the GPU with causal routing
// decided there, against mod's CPU State with the same routing: the logits
// of every step within tolLogits, the tokens each routed layer selected
// equal after every step, and at the end each layer's compact KV cache holds
// the CPU's entries (same positions, keys and values within tolLogits);
// under each of deviceProfiles with its own KV cache, and the F16 cache's
// bound on top where that is F16 (reference_test.go).
func TestMoDGenerate(t *testing.T) {
	dev := openDevice(t, true)
	for _, pc := range deviceProfiles(dev) {
		for _, tc := range modFixtures {
			t.Run(pc.name+"/"+tc.model+"/"+tc.routing.String(), func(t *testing.T) {
				base := "../../testdata/mod/" + tc.model
				m := openModel(t, base+".gguf")
				require.True(t, m.Config.IsMoD())
				seqs := fixtureTokens(t, base+".fixture.json")
				tokens := seqs["generate-"+tc.routing.String()]
				require.NotEmpty(t, tokens)
				checkAgainstCPUWith(t, dev, m, tc.routing, tokens, Options{DeviceProfile: pc.prof})
			})
		}
	}
}

// checkAgainstCPU feeds tokens one at a time to the GPU and to mod's State
// and compares logits, routing counts and, at the end, the KV caches.
func checkAgainstCPU(t *testing.T, dev *vk.Device, m *mod.Model, routing mod.Routing, tokens []int32) {
	checkAgainstCPUWith(t, dev, m, routing, tokens, Options{KVType: "f32"})
}

// tolerance bounds |got - want| by abs + rel * max |want| (over a step's
// logits, or a layer's keys or values).
type tolerance struct{ abs, rel float64 }

func (tl tolerance) of(want []float32) float64 {
	return tl.abs + tl.rel*maxAbsDiff(want, make([]float32, len(want)))
}

// tolF32 is tolLogits: the bound of an F32 cache.
var tolF32 = tolerance{abs: tolLogits}

// checkAgainstCPUWith is checkAgainstCPU with a runner made with opts: the
// logits and the cached keys and values within tolF32, and the F16 cache's
// bound on top where the runner's cache is F16 (reference_test.go).
func checkAgainstCPUWith(t *testing.T, dev *vk.Device, m *mod.Model, routing mod.Routing, tokens []int32, opts Options) {
	run, err := New(dev, m, routing, opts)
	require.NoError(t, err)
	t.Cleanup(run.Close)
	cpu := runReference(t, m, routing, run)
	cpu.Trace = &mod.Trace{}
	var worst, biggest, worstOfBound float64
	for step, tok := range tokens {
		got, err := run.Feed([]int32{tok})
		require.NoError(t, err)
		want, tol := cpu.Forward(t, []int32{tok}, false, tolF32)
		entries, err := run.CacheEntries()
		require.NoError(t, err)
		for _, lt := range cpu.Trace.Layers {
			if entries[lt.Layer] != cpu.Selected[lt.Layer] {
				score := lt.RouterLogits[0]
				if routing == mod.RoutingPredictor {
					score = lt.PredictorLogits[0]
				}
				require.Failf(t, "routing differs", "step %d layer %d: GPU cache has %d entries, CPU %d (score %g, margin %g)",
					step, lt.Layer, entries[lt.Layer], cpu.Selected[lt.Layer], score, decisionMargin)
			}
		}
		if msg := closeErr(want, got, tol); msg != "" {
			require.Failf(t, "logits differ", "step %d: %s", step, msg)
		}
		worst = math.Max(worst, maxAbsDiff(want, got))
		worstOfBound = math.Max(worstOfBound, maxAbsDiff(want, got)/tol)
		biggest = math.Max(biggest, maxAbsDiff(want, make([]float32, len(want))))
	}
	var sel []string
	kvWorst, kvBiggest := cpu.assertCaches(t, run, tolF32)
	for l := 0; l < m.Config.NLayer; l++ {
		if _, _, pw := cpu.KV(l); m.Config.Routed[l] {
			sel = append(sel, fmt.Sprintf("layer %d: %d of %d", l, len(pw), len(tokens)))
		}
	}
	t.Logf("%s cache, %d steps, max |logit diff| %.2g = %.2g of its bound (max |logit| %.3g), max |k, v diff| %.2g (max |k|, |v| %.3g); selected %s",
		run.KVType(), len(tokens), worst, worstOfBound, biggest, kvWorst, kvBiggest, strings.Join(sel, ", "))
}

// assertCaches asserts that every layer's GPU cache holds the CPU's
// entries: the same positions, keys and values within tol of the largest,
// and returns the largest difference of a key or value and the largest
// one of them.
func assertCaches(t *testing.T, cpu *mod.State, run *Runner, tol tolerance) (worst, biggest float64) {
	t.Helper()
	for l := 0; l < run.c.NLayer; l++ {
		kw, vw, pw := cpu.KV(l)
		kg, vg, pg, err := run.Cache(l)
		require.NoError(t, err)
		assert.Equal(t, pw, pg, "layer %d: cache positions", l)
		assert.Empty(t, closeErr(kw, kg, tol.of(kw)), "layer %d keys", l)
		assert.Empty(t, closeErr(vw, vg, tol.of(vw)), "layer %d values", l)
		worst = math.Max(worst, math.Max(maxAbsDiff(kw, kg), maxAbsDiff(vw, vg)))
		biggest = math.Max(biggest, math.Max(maxAbsDiff(kw, make([]float32, len(kw))), maxAbsDiff(vw, make([]float32, len(vw)))))
	}
	return worst, biggest
}

// requantize replaces a loaded matrix by its values stored as typ.
func requantize(t *testing.T, mt *mod.Mat, typ gguf.TensorType) {
	t.Helper()
	f32 := make([]float32, mt.Rows*mt.Cols)
	for i := 0; i < mt.Rows; i++ {
		mt.Row(i, f32[i*mt.Cols:(i+1)*mt.Cols])
	}
	data, err := gguf.Quantize(typ, f32)
	require.NoError(t, err)
	q, err := mod.NewMat(mt.Name, typ, []uint64{uint64(mt.Cols), uint64(mt.Rows)}, data)
	require.NoError(t, err)
	*mt = q
}

// weightMix is a weight type for each block matrix and for the token
// embedding.
type weightMix struct {
	q, k, v, o, gate, up, down gguf.TensorType
	embd                       gguf.TensorType
}

// requantize makes w's matrices mix's types: every block's, the token
// embedding (and the output tied to it), and an untied output as F16.
func (mix weightMix) requantize(t *testing.T, w *mod.Weights) {
	t.Helper()
	tied := w.Output.Name == w.TokenEmbd.Name
	requantize(t, &w.TokenEmbd, mix.embd)
	if tied {
		w.Output = w.TokenEmbd
	} else {
		requantize(t, &w.Output, gguf.TypeF16)
	}
	for l := range w.Blocks {
		b := &w.Blocks[l]
		requantize(t, &b.Q, mix.q)
		requantize(t, &b.K, mix.k)
		requantize(t, &b.V, mix.v)
		requantize(t, &b.O, mix.o)
		requantize(t, &b.Gate, mix.gate)
		requantize(t, &b.Up, mix.up)
		requantize(t, &b.Down, mix.down) // 172 columns: not a multiple of 32 for Q8_0
	}
}

// gpuProfileOn is the profile a GPU of d's subgroup size would get, with
// subgroup arithmetic or without it, for d (shaders.GPUProfile): it runs a
// GPU's variants on lavapipe (subgroup size 8), keeping d's loop cap,
// which the device still has.
func gpuProfileOn(d shaders.Device, subgroupArithmetic bool) shaders.Profile {
	d.SubgroupArithmetic = subgroupArithmetic
	return shaders.GPUProfile(d)
}

// profileCase is a profile a test runs under, named for its subtest.
type profileCase struct {
	name string
	prof *shaders.Profile
}

// deviceProfiles are the profiles every test whose results or counts
// depend on the profile runs under (issue 46): the device's own ("own")
// and, on a CPU device, the profile a GPU with its facts gets ("gpu":
// gpuProfileOf: F16 KV, fused norm and attention, attention chunks, the
// subgroup matvec at lavapipe's size 8, no matvec_lanes), so that CI on
// lavapipe runs what every real GPU runs. On a GPU the two are one
// profile, run once.
func deviceProfiles(dev *vk.Device) []profileCase {
	own, gpu := DeviceProfile(dev.Info()), gpuProfileOf(dev)
	out := []profileCase{{"own", &own}}
	if own.CPU {
		out = append(out, profileCase{"gpu", &gpu})
	}
	return out
}

// testProfiles are the kernel profiles every GPU-vs-CPU test of the step
// runs under on this device: its own, and a GPU's with and without subgroup
// arithmetic forced onto it (so lavapipe runs the subgroup matvec at its
// subgroup size 8, as CI must: no GPU there).
func testProfiles(t *testing.T, dev *vk.Device) map[string]*shaders.Profile {
	own := DeviceProfile(dev.Info())
	d := own.Device
	gpu, shared := gpuProfileOn(d, true), gpuProfileOn(d, false)
	out := map[string]*shaders.Profile{"own": &own, "gpu-shared": &shared}
	if d.SubgroupArithmetic {
		out["gpu-subgroup"] = &gpu
	} else {
		t.Logf("the device has no subgroup arithmetic: the subgroup profile is not tested here")
	}
	return out
}
