package vulkan

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPrefillSplits: a sequence fed to the GPU whole, in chunks split
// anywhere, with a small UBatch, or token by token gives the logits of mod's
// CPU State (fed token by token) after every Feed, and the same compact
// caches at the end; decoding then continues from the batched prefill's
// caches. Tolerance tolLogits, as the decode step: the batched kernels
// (matmul, attention) only sum in other orders than the CPU. On the CPU,
// the same chunks give the token-by-token logits exactly. The splits
// include chunks in which a routed layer selects none of the chunk's tokens
// and chunks in which it selects all (checked, not assumed).
func TestPrefillSplits(t *testing.T) {
	dev := openDevice(t, true)
	type split struct {
		name  string
		ub    int
		sizes []int // chunk lengths fed in turn, the last repeated; nil: whole
	}
	splits := []split{
		{"whole", 0, nil},
		{"ubatch5", 5, nil},
		{"ragged", 0, []int{3, 1, 7, 2, 1, 4, 9, 2}},
		{"ragged-ubatch3", 3, []int{8, 1, 2, 5}},
		{"pairs", 0, []int{2}},
	}
	for _, tc := range append(modFixtures, fixtureCase{"dense-rand", mod.RoutingRouter}) {
		base := "../../testdata/mod/" + tc.model
		m := openModel(t, base+".gguf")
		seqs := fixtureTokens(t, base+".fixture.json")
		tokens := seqs["generate-"+tc.routing.String()]
		if len(tokens) == 0 { // the dense fixture has no generate case
			for i := 0; i < 40; i++ {
				tokens = append(tokens, int32(1+7*i%(m.Config.NVocab-1)))
			}
		}
		require.NotEmpty(t, tokens, tc.model)
		prompt, decode := tokens[:len(tokens)-3], tokens[len(tokens)-3:]
		for _, pc := range deviceProfiles(dev) {
			var sawNone, sawAll bool
			for _, sp := range splits {
				t.Run(pc.name+"/"+tc.model+"/"+tc.routing.String()+"/"+sp.name, func(t *testing.T) {
					run, err := New(dev, m, tc.routing, Options{UBatch: sp.ub, DeviceProfile: pc.prof})
					require.NoError(t, err)
					defer run.Close()
					cpu := runReference(t, m, tc.routing, run)
					cpuChunks, err := m.NewState(tc.routing) // the CPU fed the same chunks
					require.NoError(t, err)
					var chunks []string
					var worst float64 // of the bound
					feed := func(toks []int32) {
						before := append([]int(nil), cpu.Selected...)
						var want []float32
						var tol float64
						for _, tok := range toks { // the CPU token by token
							want, tol = cpu.Forward(t, []int32{tok}, false, tolF32)
						}
						chunked, err := cpuChunks.Forward(toks, false)
						require.NoError(t, err)
						require.Equal(t, want, chunked, "CPU logits after %d tokens, chunked", cpu.Pos())
						got, err := run.Feed(toks)
						require.NoError(t, err)
						require.Empty(t, closeErr(want, got, tol), "logits after %d tokens", cpu.Pos())
						worst = max(worst, maxAbsDiff(want, got)/tol)
						entries, err := run.CacheEntries()
						require.NoError(t, err)
						for l := range entries {
							if !m.Config.Routed[l] {
								assert.Equal(t, cpu.Pos(), entries[l], "dense layer %d entries", l)
								continue
							}
							require.Equal(t, cpu.Selected[l], entries[l], "layer %d entries after %d tokens", l, cpu.Pos())
							if len(toks) > 1 {
								switch cpu.Selected[l] - before[l] {
								case 0:
									sawNone = true
								case len(toks):
									sawAll = true
								}
							}
						}
						chunks = append(chunks, fmt.Sprint(len(toks)))
					}
					rest := prompt
					for i := 0; len(rest) > 0; i++ {
						n := len(rest)
						if sp.sizes != nil {
							n = min(n, sp.sizes[min(i, len(sp.sizes)-1)])
						}
						feed(rest[:n])
						rest = rest[n:]
					}
					cpu.assertCaches(t, run, tolF32)
					for _, tok := range decode { // the decode step after a prefill
						feed([]int32{tok})
					}
					t.Logf("%s cache; chunks %s; max |logit diff| %.2g of its bound", run.KVType(), strings.Join(chunks, " "), worst)
				})
			}
			if m.Config.IsMoD() {
				assert.True(t, sawNone, "%s: some chunk had a routed layer select none", tc.model)
				assert.True(t, sawAll, "%s: some chunk had a routed layer select all", tc.model)
			}
		}
	}
}

// TestPrefillProfiles: a batched prompt under every test profile (the
// GPU's, forced onto this device, with its F16 KV cache, and the device's
// own), with F32 and F16 caches, router and predictor routing, and the
// block matrices in Q8_0 and Q4_0 as well as the file's F32, against the
// CPU fed the same chunks: the logits after each chunk, each token's
// routing as Options.Trace reports it (score and decision), and the compact
// caches. Tolerances as TestPrefillSplits: tolLogits (the CPU runs the same
// quantized matrices: summation order only), and the halves' bound on top
// for an F16 cache and for the tensor-core matmul (reference_test.go), the
// router's and predictor's scores included (a routed layer's input has
// been through every attention and matmul before it).
func TestPrefillProfiles(t *testing.T) {
	dev := openDevice(t, true)
	chunks := []int{1, 9, 4, 17} // then the rest, whole
	profiles := testProfiles(t, dev)
	// The tensor-core matmul's tiling with its product emulated (lavapipe
	// has no cooperative matrices). Its default, hilo kernel keeps f32's
	// precision: the f32 bounds. With MODRUN_TENSOR_CORES=f16 every matmul
	// rounds its operands to f16 (2^-11 of each), which moves what follows
	// more than an F16 cache alone does: the bound is the reference's with
	// its matmuls' operands rounded too (reference_test.go), for logits,
	// router scores and caches, the routing decisions still equal.
	coop := *profiles["own"]
	coop.MatmulCoop, coop.MatmulCoopEmulate = true, true
	profiles["own-matmul-coop-emulated"] = &coop
	coopHalf := coop
	coopHalf.MatmulCoopHalf = true
	profiles["own-matmul-coop-f16-emulated"] = &coopHalf
	// The direct matmul (MODRUN_MATMUL_DIRECT=1) at every row count: the
	// planes passes and the product's tiles, its product emulated, within
	// the same bounds as the staged kernel's.
	direct := coop
	direct.MatmulDirect, direct.MatmulDirectMin = true, 0
	profiles["own-matmul-direct-emulated"] = &direct
	directHalf := coopHalf
	directHalf.MatmulDirect, directHalf.MatmulDirectMin = true, 0
	profiles["own-matmul-direct-f16-emulated"] = &directHalf
	// With the weights' planes made at load and kept
	// (MODRUN_MATMUL_DIRECT=resident).
	resident := direct
	resident.MatmulDirectResident = true
	profiles["own-matmul-direct-resident-emulated"] = &resident
	// And under the profile a GPU gets (F16 KV cache, fused norm and
	// attention, split attention), as an NVIDIA GPU runs it, its products
	// cut along K (these models' small grids always are on a GPU profile;
	// a slice of one step, so their 64 and 172 columns make 2 and 6
	// slices) and summed by splitk_reduce.
	gpuDirect := *profiles["gpu-shared"]
	gpuDirect.MatmulCoop, gpuDirect.MatmulCoopEmulate, gpuDirect.MatmulDirect, gpuDirect.MatmulDirectMin = true, true, true, 0
	gpuDirect.MatmulDirectSlice = 32
	profiles["gpu-shared-matmul-direct-emulated"] = &gpuDirect
	for name, prof := range profiles {
		for _, tc := range []struct {
			model   string
			routing mod.Routing
			quant   bool // q|k|v Q8_0, o and gate|up Q4_0
			kv      string
		}{
			{"mod-trained", mod.RoutingRouter, false, "f16"},
			{"mod-trained", mod.RoutingRouter, true, "f32"},
			{"mod-rand-sigmoid-pred", mod.RoutingPredictor, true, "f16"},
			{"mod-rand-sigmoid-pred", mod.RoutingPredictor, false, "f32"},
		} {
			t.Run(fmt.Sprintf("%s/%s/%s/quant=%v/%s", name, tc.model, tc.routing, tc.quant, tc.kv), func(t *testing.T) {
				base := "../../testdata/mod/" + tc.model
				m := openModel(t, base+".gguf")
				if tc.quant {
					for l := range m.Weights.Blocks {
						b := &m.Weights.Blocks[l]
						for _, mt := range []*mod.Mat{&b.Q, &b.K, &b.V} {
							requantize(t, mt, gguf.TypeQ8_0)
						}
						for _, mt := range []*mod.Mat{&b.O, &b.Gate, &b.Up} {
							requantize(t, mt, gguf.TypeQ4_0)
						}
					}
				}
				tokens := fixtureTokens(t, base+".fixture.json")["generate-"+tc.routing.String()]
				run, err := New(dev, m, tc.routing, Options{DeviceProfile: prof, KVType: tc.kv, Trace: true})
				require.NoError(t, err)
				defer run.Close()
				cpu := runReference(t, m, tc.routing, run)
				cpu.Trace = &mod.Trace{}
				var worst, ofBound float64
				for _, toks := range cutChunks(tokens, chunks) {
					n := len(toks)
					want, tol := cpu.Forward(t, toks, false, tolF32)
					got, err := run.Feed(toks)
					require.NoError(t, err)
					require.Empty(t, closeErr(want, got, tol), "logits after %d tokens", cpu.Pos())
					worst = max(worst, maxAbsDiff(want, got))
					ofBound = max(ofBound, maxAbsDiff(want, got)/tol)
					routes := run.Routes()
					require.Len(t, routes, n, "a route per token of the chunk")
					for j, lt := range cpu.Trace.Layers {
						scores := scoresOf(lt, tc.routing)
						scoreTol := tolLogits
						if cpu.half != nil {
							scoreTol = f16Bound(tolLogits, scores, scoresOf(cpu.half.Trace.Layers[j], tc.routing))
						}
						for row := range toks {
							pos := cpu.Pos() - n + row
							gr := routes[row][j]
							require.Equal(t, lt.Layer, gr.Layer)
							assert.Equal(t, slices.Contains(lt.Selected, pos), gr.Selected, "layer %d position %d selected", lt.Layer, pos)
							assert.InDelta(t, scores[row], gr.Score, scoreTol, "layer %d position %d score", lt.Layer, pos)
						}
					}
				}
				cpu.assertCaches(t, run, tolF32)
				t.Logf("%d tokens: max |logit diff| %.2g, %.2g of its bound", len(tokens), worst, ofBound)
			})
		}
	}
}

// cutChunks cuts tokens into chunks of the given lengths, then the rest
// whole (fewer where tokens run out).
func cutChunks(tokens []int32, lengths []int) [][]int32 {
	var out [][]int32
	for i := 0; len(tokens) > 0; i++ {
		n := len(tokens)
		if i < len(lengths) {
			n = min(n, lengths[i])
		}
		out = append(out, tokens[:n])
		tokens = tokens[n:]
	}
	return out
}

// TestPrefillAttentionGroups: when attention's partial results over a
// chunk would pass a binding's range, the chunk's rows go through attention
// in groups of 64 (attentionGroupRows); here a range that holds 64 rows'
// partials forces three groups on a 150-token prompt, and a
// routed layer's selected rows, whose groups past the GPU-side count are
// empty dispatches. The logits and caches equal the CPU's, as in
// TestPrefillSplits (the F16 cache's bound where the profile's cache is
// F16); under each of deviceProfiles.
func TestPrefillAttentionGroups(t *testing.T) {
	dev := openDevice(t, true)
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	c := m.Config
	base := fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-router"]
	var tokens []int32
	for len(tokens) < 150 {
		tokens = append(tokens, base...)
	}
	tokens = tokens[:150]
	defer func() { attentionRange = 0 }()
	for _, pc := range deviceProfiles(dev) {
		t.Run(pc.name, func(t *testing.T) {
			splits := uint64(shaders.AttentionSplits(uint32(c.ContextLen), pc.prof.AttentionSplitLen(uint32(c.HeadDim))))
			attentionRange = 64*4*uint64(c.NHead)*splits*uint64(c.HeadDim) + 4
			run, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: pc.prof})
			require.NoError(t, err)
			defer run.Close()
			require.Equal(t, uint32(64), run.attentionGroupRows(150, uint32(run.ctx)))
			cpu := runReference(t, m, mod.RoutingRouter, run)
			want, tol := cpu.Forward(t, tokens, false, tolF32)
			got, err := run.Feed(tokens)
			require.NoError(t, err)
			require.Empty(t, closeErr(want, got, tol))
			cpu.assertCaches(t, run, tolF32)
			t.Logf("%s cache: max |logit diff| %.2g, its bound %.2g", run.KVType(), maxAbsDiff(want, got), tol)
		})
	}
}

// TestPrefillRecordingsBounded: with maxRecordings 3, chunks of many
// lengths keep at most 3 recordings and only their lengths' dispatch-size
// tables; the least recently used goes first (a length used again stays),
// a dropped length is recorded again when it comes back, and the logits
// stay the CPU's throughout (the F16 cache's bound where the profile's
// cache is F16); under each of deviceProfiles.
func TestPrefillRecordingsBounded(t *testing.T) {
	defer func(n int) { maxRecordings = n }(maxRecordings)
	maxRecordings = 3
	dev := openDevice(t, true)
	base := "../../testdata/mod/mod-trained"
	m := openModel(t, base+".gguf")
	for _, pc := range deviceProfiles(dev) {
		t.Run(pc.name, func(t *testing.T) {
			run, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: pc.prof, PromptSteps: -1})
			require.NoError(t, err)
			defer run.Close()
			cpu := runReference(t, m, mod.RoutingRouter, run)
			lengths := []int{5, 3, 7, 5, 2, 5, 3, 6, 7}
			fresh := []bool{true, true, true, false, true, false, true, true, true} // 2 drops 3 (5 was used again), 3 drops 7, 6 drops 2, 7 drops 5
			pos := 0
			for i, n := range lengths {
				toks := make([]int32, n)
				for j := range toks {
					toks[j] = int32(1 + (7*(pos+j)+3)%(m.Config.NVocab-1))
				}
				pos += n
				before := dev.Stats().Recordings
				want, tol := cpu.Forward(t, toks, false, tolF32)
				got, err := run.Feed(toks)
				require.NoError(t, err)
				require.Empty(t, closeErr(want, got, tol), "logits after chunk %d (%d tokens)", i, n)
				assert.Equal(t, fresh[i], dev.Stats().Recordings > before, "chunk %d of %d tokens recorded", i, n)
				require.LessOrEqual(t, len(run.pf.recs), 3, "recordings kept after chunk %d", i)
				for k := range run.tables {
					if !k.step {
						assert.Contains(t, run.pf.recs, prefillKey{k.n, headLast}, "a table of %d rows without its recording", k.n)
					}
				}
			}
			var kept []int
			for k := range run.pf.recs {
				kept = append(kept, k.n)
			}
			slices.Sort(kept)
			assert.Equal(t, []int{3, 6, 7}, kept, "the three most recently used lengths")
		})
	}
}
