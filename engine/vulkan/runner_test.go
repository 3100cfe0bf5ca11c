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

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

// greedyVector is ../shared/data/models/stories260K_greedy200_ids.json
// (see mod/stories_test.go).
type greedyVector struct {
	BOS int32   `json:"bos"`
	IDs []int32 `json:"greedy_token_ids"`
}

// TestStories260KGreedy: 200 greedy tokens of stories260K on the GPU are
// llama2.c's, the GPU's argmax is the CPU's, and the logits are within
// tolLogits of the CPU reference at every step.
func TestStories260KGreedy(t *testing.T) {
	path := shared.Path(t, "models/stories260K.gguf")
	raw, err := os.ReadFile(shared.Path(t, "models/stories260K_greedy200_ids.json"))
	require.NoError(t, err)
	var g greedyVector
	require.NoError(t, json.Unmarshal(raw, &g))
	require.Len(t, g.IDs, 200)

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
		best, err := run.Argmax()
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
		require.Equal(t, argmax(want), best, "step %d: GPU argmax", step)
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
// the CPU's entries (same positions, keys and values within tolLogits).
func TestMoDGenerate(t *testing.T) {
	dev := openDevice(t, true)
	for _, tc := range modFixtures {
		t.Run(tc.model+"/"+tc.routing.String(), func(t *testing.T) {
			base := "../../testdata/mod/" + tc.model
			m := openModel(t, base+".gguf")
			require.True(t, m.Config.IsMoD())
			seqs := fixtureTokens(t, base+".fixture.json")
			tokens := seqs["generate-"+tc.routing.String()]
			require.NotEmpty(t, tokens)
			checkAgainstCPU(t, dev, m, tc.routing, tokens)
		})
	}
}

// checkAgainstCPU feeds tokens one at a time to the GPU and to mod's State
// and compares logits, routing counts and, at the end, the KV caches.
func checkAgainstCPU(t *testing.T, dev *vk.Device, m *mod.Model, routing mod.Routing, tokens []int32) {
	checkAgainstCPUWith(t, dev, m, routing, tokens, Options{KVType: "f32"}, tolF32, tolF32)
}

// tolerance bounds |got - want| by abs + rel * max |want| (over a step's
// logits, or a layer's keys or values).
type tolerance struct{ abs, rel float64 }

func (tl tolerance) of(want []float32) float64 {
	return tl.abs + tl.rel*maxAbsDiff(want, make([]float32, len(want)))
}

// tolF32 is tolLogits: the bound of an F32 cache.
var tolF32 = tolerance{abs: tolLogits}

// checkAgainstCPUWith is checkAgainstCPU with a runner made with opts, the
// logits within tol and the cached keys and values within tolKV.
func checkAgainstCPUWith(t *testing.T, dev *vk.Device, m *mod.Model, routing mod.Routing, tokens []int32, opts Options, tol, tolKV tolerance) {
	run, err := New(dev, m, routing, opts)
	require.NoError(t, err)
	t.Cleanup(run.Close)
	cpu, err := m.NewState(routing)
	require.NoError(t, err)
	cpu.Trace = &mod.Trace{}
	var worst, biggest float64
	for step, tok := range tokens {
		got, err := run.Feed([]int32{tok})
		require.NoError(t, err)
		want, err := cpu.Forward([]int32{tok}, false)
		require.NoError(t, err)
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
		if msg := closeErr(want, got, tol.of(want)); msg != "" {
			require.Failf(t, "logits differ", "step %d: %s", step, msg)
		}
		worst = math.Max(worst, maxAbsDiff(want, got))
		biggest = math.Max(biggest, maxAbsDiff(want, make([]float32, len(want))))
	}
	var sel []string
	kvWorst, kvBiggest := assertCaches(t, cpu, run, tolKV)
	for l := 0; l < m.Config.NLayer; l++ {
		if _, _, pw := cpu.KV(l); m.Config.Routed[l] {
			sel = append(sel, fmt.Sprintf("layer %d: %d of %d", l, len(pw), len(tokens)))
		}
	}
	t.Logf("%d steps, max |logit diff| %.2g (max |logit| %.3g), max |k, v diff| %.2g (max |k|, |v| %.3g); selected %s",
		len(tokens), worst, biggest, kvWorst, kvBiggest, strings.Join(sel, ", "))
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

// testProfiles are the kernel profiles every GPU-vs-CPU test of the step
// runs under on this device: its own, and a GPU's with and without subgroup
// arithmetic forced onto it (so lavapipe runs the subgroup matvec at its
// subgroup size 8, as CI must: no GPU there).
func testProfiles(t *testing.T, dev *vk.Device) map[string]*shaders.Profile {
	own := DeviceProfile(dev.Info())
	d := own.Device
	gpu, shared := shaders.GPUProfileOn(d), shaders.SharedGPUProfileOn(d)
	out := map[string]*shaders.Profile{"own": &own, "gpu-shared": &shared}
	if d.SubgroupArithmetic {
		out["gpu-subgroup"] = &gpu
	} else {
		t.Logf("the device has no subgroup arithmetic: the subgroup profile is not tested here")
	}
	return out
}

// TestQuantizedWeights: the same checks with the block matrices in F16,
// Q8_0 and Q4_0, mixed so that q|k|v and gate|up are not one type (the
// unstacked, aligned-offset path), and the token embedding (tied to the
// output) in Q8_0 or Q4_0, both in matvec's split layout; under every test
// profile. The CPU runs the same quantized matrices, so the tolerance stays
// tolLogits: only the summation order differs.
func TestQuantizedWeights(t *testing.T) {
	dev := openDevice(t, true)
	for name, prof := range testProfiles(t, dev) {
		for _, embd := range []gguf.TensorType{gguf.TypeQ8_0, gguf.TypeQ4_0} {
			t.Run(fmt.Sprintf("%s/embd-%s", name, embd), func(t *testing.T) {
				m := openModel(t, "../../testdata/mod/mod-trained.gguf")
				w := m.Weights
				quantize := func(mt *mod.Mat, typ gguf.TensorType) { requantize(t, mt, typ) }
				tied := w.Output.Name == w.TokenEmbd.Name
				quantize(&w.TokenEmbd, embd)
				if tied {
					w.Output = w.TokenEmbd
				} else {
					quantize(&w.Output, gguf.TypeF16)
				}
				for l := range w.Blocks {
					b := &w.Blocks[l]
					quantize(&b.Q, gguf.TypeF16)
					quantize(&b.K, gguf.TypeQ8_0)
					quantize(&b.V, gguf.TypeQ4_0)
					quantize(&b.O, gguf.TypeQ8_0)
					quantize(&b.Gate, gguf.TypeQ4_0)
					quantize(&b.Up, gguf.TypeQ8_0)
					quantize(&b.Down, gguf.TypeF16) // 172 columns: not a multiple of 32 for Q8_0
				}
				tokens := fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-router"]
				checkAgainstCPUWith(t, dev, m, mod.RoutingRouter, tokens, Options{DeviceProfile: prof, KVType: "f32"}, tolF32, tolF32)
			})
		}
	}
}

// TestProfilesStacked: the stacked (one type) q|k|v and gate|up of each
// quantized type, split at upload as one matrix, under every test profile;
// and BF16 and a sub-block type (Q5_1: a min and a fifth bit), whose
// kernels no llama.cpp file here holds (BF16) or holds only in its mix.
func TestProfilesStacked(t *testing.T) {
	dev := openDevice(t, true)
	for name, prof := range testProfiles(t, dev) {
		for _, typ := range []gguf.TensorType{gguf.TypeF32, gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeBF16, gguf.TypeQ5_1} {
			t.Run(fmt.Sprintf("%s/%s", name, typ), func(t *testing.T) {
				m := openModel(t, "../../testdata/mod/mod-trained.gguf")
				if typ != gguf.TypeF32 {
					for l := range m.Weights.Blocks {
						b := &m.Weights.Blocks[l]
						for _, mt := range []*mod.Mat{&b.Q, &b.K, &b.V, &b.O, &b.Gate, &b.Up} {
							requantize(t, mt, typ)
						}
					}
				}
				tokens := fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-predictor"]
				checkAgainstCPUWith(t, dev, m, mod.RoutingPredictor, tokens, Options{DeviceProfile: prof, KVType: "f32"}, tolF32, tolF32)
			})
		}
	}
}

// TestKVCacheF16 runs the MoD fixtures with an F16 KV cache (the GPU
// default) against the CPU reference, whose cache is F32, under every test
// profile. Tolerances, relative to the largest value compared (of a step's
// logits, of a layer's keys or values):
//   - keys and values: a half keeps 11 significant bits, so each is off by
//     at most 2^-11 of itself, plus the F32 path's few ulps: 2^-10 of the
//     largest (measured 5.1e-4 = 0.012 of 23.6 on mod-trained);
//   - logits: scores and attention outputs carry that relative error
//     through every layer; measured 6.1e-4 of the largest logit
//     (0.012 of 19.7, mod-trained) and 2.7e-4 (mod-rand-sigmoid-pred):
//     2e-3 leaves room. A routing decision may flip where |r| is that
//     close to 0, which these fixtures do not come near.
func TestKVCacheF16(t *testing.T) {
	tolF16 := tolerance{abs: tolLogits, rel: 2e-3}
	tolKVF16 := tolerance{abs: tolLogits, rel: 1.0 / 1024}
	dev := openDevice(t, true)
	for name, prof := range testProfiles(t, dev) {
		for _, tc := range []struct {
			model   string
			routing mod.Routing
		}{{"mod-trained", mod.RoutingRouter}, {"mod-rand-sigmoid-pred", mod.RoutingPredictor}} {
			t.Run(name+"/"+tc.model, func(t *testing.T) {
				base := "../../testdata/mod/" + tc.model
				m := openModel(t, base+".gguf")
				tokens := fixtureTokens(t, base+".fixture.json")["generate-"+tc.routing.String()]
				run, err := New(dev, m, tc.routing, Options{DeviceProfile: prof, KVType: "f16"})
				require.NoError(t, err)
				assert.Equal(t, "f16", run.KVType())
				run.Close()
				checkAgainstCPUWith(t, dev, m, tc.routing, tokens, Options{DeviceProfile: prof, KVType: "f16"}, tolF16, tolKVF16)
			})
		}
	}
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	_, err := New(dev, m, mod.RoutingRouter, Options{KVType: "q8"})
	assert.ErrorContains(t, err, `KV cache type "q8"`)
	run, err := New(dev, m, mod.RoutingRouter, Options{})
	require.NoError(t, err)
	defer run.Close()
	assert.Equal(t, shaders.KVTypeName(DeviceProfile(dev.Info()).KV), run.KVType(), "the profile's default")
}

// TestSplitAttention runs the MoD fixtures with decode attention split
// across workgroups (flash-decoding) into the most chunks, 16 (a chunk per 4
// entries of the capacity, capped): the 37 tokens make chunks of 1 to 3
// entries, and the routed layers' shorter caches leave some empty; in
// dense and routed (indirectly dispatched) blocks, under each GPU profile
// forced onto this device, with both cache types, fused into decode_attend
// (one dispatch, the merge by the last workgroup) and not (decode_kv, the
// split pass and the combine pass). Tolerance as without the
// split (tolF32), or TestKVCacheF16's for F16: the chunks are one more level
// of the same online-softmax merge.
func TestSplitAttention(t *testing.T) {
	dev := openDevice(t, true)
	for name, prof := range testProfiles(t, dev) {
		if prof.AttentionChunk == 0 {
			continue // a CPU profile never splits
		}
		for _, fuse := range []bool{true, false} {
			split := *prof
			split.AttentionChunk, split.FuseAttention = 4, fuse
			for _, kv := range []string{"f32", "f16"} {
				t.Run(fmt.Sprintf("%s/fused-%t/%s", name, fuse, kv), func(t *testing.T) {
					m := openModel(t, "../../testdata/mod/mod-trained.gguf")
					run, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: &split})
					require.NoError(t, err)
					require.Greater(t, run.attnSplits, uint32(1), "context %d", run.ctx)
					t.Logf("context %d: %d chunks", run.ctx, run.attnSplits)
					run.Close()
					tokens := fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-router"]
					tol, tolKV := tolF32, tolF32
					if kv == "f16" {
						tol, tolKV = tolerance{abs: tolLogits, rel: 2e-3}, tolerance{abs: tolLogits, rel: 1.0 / 1024}
					}
					checkAgainstCPUWith(t, dev, m, mod.RoutingRouter, tokens, Options{DeviceProfile: &split, KVType: kv}, tol, tolKV)
				})
			}
		}
	}
}

// TestMatricesInPieces: with a binding range of 8 KiB forced on the
// profile, every matrix of the fixture (the token embedding, tied or not,
// and the block matrices, stacked or not) is over it and is uploaded and
// bound in pieces of whole rows, a matvec (or an embedding lookup) per
// piece: what lets a 7B model's 250 MiB token_embd load on lavapipe (128
// MiB). The results are the unpieced step's: the same kernels on the same
// rows, so tolF32. Q4_1 is bigger repacked than in the file (22 bytes a
// block against 20): its pieces are sized by the device layout.
func TestMatricesInPieces(t *testing.T) {
	dev := openDevice(t, true)
	for name, prof := range testProfiles(t, dev) {
		small := *prof
		small.MaxStorageBufferRange = 8 << 10
		for _, typ := range []gguf.TensorType{gguf.TypeF32, gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ4_1} {
			t.Run(fmt.Sprintf("%s/%s", name, typ), func(t *testing.T) {
				m := openModel(t, "../../testdata/mod/mod-trained.gguf")
				w := m.Weights
				if typ != gguf.TypeF32 {
					tied := w.Output.Name == w.TokenEmbd.Name
					requantize(t, &w.TokenEmbd, typ)
					if tied {
						w.Output = w.TokenEmbd
					}
					for l := range w.Blocks {
						b := &w.Blocks[l]
						for _, mt := range []*mod.Mat{&b.Q, &b.K, &b.V, &b.O, &b.Gate, &b.Up} {
							requantize(t, mt, typ)
						}
					}
				}
				run, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: &small, KVType: "f32"})
				require.NoError(t, err)
				for _, mt := range []mat{run.w.tokenEmbd, run.w.output, run.w.blocks[0].down, run.w.blocks[1].gateUp.mvs[0]} {
					assert.Greater(t, len(mt.pieces), 1, "%s is in pieces", mt.name)
				}
				t.Logf("token_embd in %d pieces, output in %d", len(run.w.tokenEmbd.pieces), len(run.w.output.pieces))
				run.Close()
				tokens := fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-router"]
				checkAgainstCPUWith(t, dev, m, mod.RoutingRouter, tokens, Options{DeviceProfile: &small, KVType: "f32"}, tolF32, tolF32)
			})
		}
	}
	// A row longer than the range cannot be split.
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	tiny := DeviceProfile(dev.Info())
	tiny.MaxStorageBufferRange = 64
	_, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: &tiny})
	assert.ErrorContains(t, err, "fit in maxStorageBufferRange 64")
}

// TestDecodeDispatches counts the dispatches of the recorded decode step of
// a dense model (q|k|v and gate|up stacked, one type), per block and for
// the embedding and the head, under each profile:
//   - GPU profiles (RMSNorm folded into the matvecs, SwiGLU into gate|up,
//     the residual adds into the output and down matvecs, RoPE, the KV
//     append and split attention into decode_attend): per block
//     norm+q|k|v, attention, output+add, norm+gate|up+SwiGLU, down+add: 5,
//     DESIGN.md §6's target, however many chunks the attention has. The
//     head: embed, then norm+output and argmax (3).
//   - the same without the attention fusion: decode_kv and attention apart,
//     6, or 7 with split attention (its combine pass).
//   - a CPU profile (no norm or attention fusion): rmsnorm, q|k|v,
//     decode_kv, attention, output+add, rmsnorm, gate|up, swiglu,
//     down+add: 9; the head 4.
func TestDecodeDispatches(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/dense-rand.gguf")
	require.False(t, m.Config.IsMoD())
	for name, prof := range testProfiles(t, dev) {
		for _, fuse := range []bool{true, false} {
			for _, chunk := range []uint32{0, 4} {
				if (chunk > 0 || !fuse) && prof.AttentionChunk == 0 {
					continue // a CPU profile: one case
				}
				p := *prof
				p.FuseAttention = p.FuseAttention && fuse
				if p.AttentionChunk > 0 {
					p.AttentionChunk = chunk
					if chunk == 0 {
						p.AttentionChunk = uint32(m.Config.ContextLen) // one chunk: the single pass
					}
				}
				run, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: &p})
				require.NoError(t, err)
				_, err = run.Feed([]int32{1})
				require.NoError(t, err)
				perBlock, head := 9, 4
				switch {
				case p.FuseAttention:
					perBlock, head = 5, 3
				case p.FuseNorm:
					perBlock, head = 6, 3
					if run.attnSplits > 1 {
						perBlock++
					}
				}
				got := run.step.Stats().Dispatches
				assert.Equal(t, head+m.Config.NLayer*perBlock, got, "%s, fused attention %t, %d chunks", name, p.FuseAttention, run.attnSplits)
				if p.FuseNorm && p.FuseAttention {
					assert.LessOrEqual(t, got, 3+5*m.Config.NLayer, "DESIGN.md §6: at most 5 per dense block plus 3")
				}
				t.Logf("%s, fused attention %t, %d attention chunks: %d dispatches = %d per block x %d blocks + %d",
					name, p.FuseAttention, run.attnSplits, got, perBlock, m.Config.NLayer, head)
				run.Close()
			}
		}
	}
}

func TestFeedErrors(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	_, err := New(dev, m, mod.RoutingTopK, Options{})
	assert.ErrorContains(t, err, "causal routing")
	run, err := New(dev, m, mod.RoutingRouter, Options{ContextLen: 4})
	require.NoError(t, err)
	defer run.Close()
	assert.Equal(t, 4, run.ContextLen())
	_, err = run.Feed(nil)
	assert.ErrorContains(t, err, "no tokens")
	_, err = run.Feed([]int32{int32(m.Config.NVocab)})
	assert.ErrorContains(t, err, "outside the vocabulary")
	_, err = run.Feed([]int32{1, 2, 3, 4, 5})
	assert.ErrorContains(t, err, "context length 4")
	_, err = run.Feed([]int32{1, 2, 3, 4})
	assert.NoError(t, err)
	assert.Equal(t, 4, run.Pos())
	run.Reset()
	assert.Equal(t, 0, run.Pos())
}
