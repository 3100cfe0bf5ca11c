package vulkan

// Tests of the decode step's variants against the CPU reference: quantized
// weights, stacked matrices under each profile, the F16 cache, split
// attention, matrices bound in pieces, the dispatches a step records, and
// Feed's errors.

import (
	"fmt"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
				f16, q8, q4 := gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_0
				weightMix{q: f16, k: q8, v: q4, o: q8, gate: q4, up: q8, down: f16, embd: embd}.requantize(t, m.Weights)
				tokens := fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-router"]
				checkAgainstCPUWith(t, dev, m, mod.RoutingRouter, tokens, Options{DeviceProfile: prof, KVType: "f32"})
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
				checkAgainstCPUWith(t, dev, m, mod.RoutingPredictor, tokens, Options{DeviceProfile: prof, KVType: "f32"})
			})
		}
	}
}

// TestKVCacheF16 runs the MoD fixtures with an F16 KV cache (the GPU
// default) against the CPU reference, whose cache is F32, under every test
// profile, within the F16 cache's bound (reference_test.go: tolLogits plus
// twice the reference's own response to rounding its cache to halves, on
// the same tokens). A routing decision may flip where |r| is that close
// to 0, which these fixtures do not come near (the F16 reference routes as
// the F32 one: checked).
func TestKVCacheF16(t *testing.T) {
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
				checkAgainstCPUWith(t, dev, m, tc.routing, tokens, Options{DeviceProfile: prof, KVType: "f16"})
			})
		}
	}
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	_, err := New(dev, m, mod.RoutingRouter, Options{KVType: "q8"})
	assert.ErrorContains(t, err, `KV cache type "q8"`)
	run, err := New(dev, m, mod.RoutingRouter, Options{})
	require.NoError(t, err)
	defer run.Close()
	assert.Equal(t, DeviceProfile(dev.Info()).KV.String(), run.KVType(), "the profile's default")
}

// TestSplitAttention runs the MoD fixtures with decode attention split
// across workgroups (flash-decoding) into the most chunks, 16 (a chunk per 4
// entries of the capacity, capped): the 37 tokens make chunks of 1 to 3
// entries, and the routed layers' shorter caches leave some empty; in
// dense and routed (indirectly dispatched) blocks, under each GPU profile
// forced onto this device, with both cache types, fused into one dispatch
// (the merge by the last workgroup) by decode_attend_keys (the GPU
// profile's) and by decode_attend (its fallback), and not fused (decode_kv,
// the split pass and the combine pass). Tolerance as without the
// split (tolF32), and the F16 cache's bound for F16 (reference_test.go):
// the chunks are one more level of the same online-softmax merge.
func TestSplitAttention(t *testing.T) {
	dev := openDevice(t, true)
	for name, prof := range testProfiles(t, dev) {
		if prof.AttentionChunk == 0 {
			continue // a CPU profile never splits
		}
		for _, fuse := range []string{"keys", "attend", "apart"} {
			split := *prof
			split.AttentionChunk, split.FuseAttention, split.AttendKeys = 4, fuse != "apart", fuse == "keys"
			for _, kv := range []string{"f32", "f16"} {
				t.Run(fmt.Sprintf("%s/fused-%s/%s", name, fuse, kv), func(t *testing.T) {
					m := openModel(t, "../../testdata/mod/mod-trained.gguf")
					run, err := New(dev, m, mod.RoutingRouter, Options{DeviceProfile: &split})
					require.NoError(t, err)
					require.Greater(t, run.attnSplits, uint32(1), "context %d", run.ctx)
					t.Logf("context %d: %d chunks", run.ctx, run.attnSplits)
					run.Close()
					tokens := fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-router"]
					checkAgainstCPUWith(t, dev, m, mod.RoutingRouter, tokens, Options{DeviceProfile: &split, KVType: kv})
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
				checkAgainstCPUWith(t, dev, m, mod.RoutingRouter, tokens, Options{DeviceProfile: &small, KVType: "f32"})
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
				sc := run.StepCounts()
				assert.Equal(t, got, sc.Dispatches)
				assert.Equal(t, run.step.Stats().Barriers, sc.Barriers)
				require.Len(t, sc.BlockDispatches, m.Config.NLayer)
				require.Len(t, sc.BlockBarriers, m.Config.NLayer)
				blockBarriers := 0
				for l := range sc.BlockDispatches {
					assert.Equal(t, perBlock, sc.BlockDispatches[l], "block %d", l)
					blockBarriers += sc.BlockBarriers[l]
				}
				t.Logf("%s, fused attention %t: %d barriers = %v per block + %d", name, p.FuseAttention, sc.Barriers, sc.BlockBarriers, sc.Barriers-blockBarriers)
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
