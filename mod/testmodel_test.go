package mod

import (
	"math/rand"
	"path/filepath"
	"sort"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/stretchr/testify/require"
)

// testModel describes a small random model written to a GGUF file, with
// ragged sizes (nothing a power of two but the head dimension).
type testModel struct {
	nVocab, nEmbd, nLayer, nHead, nKVHead, nFF, ctx int
	routed                                          []uint32    // empty: dense ("llama")
	routedKV                                        *gguf.Value // written as routed_layers instead of routed, when set
	capacity                                        float32
	gate                                            string
	predHidden                                      int
	bias                                            bool
	routerScale                                     float32 // spread of router logits
	weightType                                      gguf.TensorType
	seed                                            int64
	// edit, when set, changes the writer's input before it is written, so a
	// test can break one thing.
	edit func(w *gguf.Writer, tensors map[string][]float32)
}

func defaultTestModel() testModel {
	return testModel{nVocab: 67, nEmbd: 48, nLayer: 4, nHead: 6, nKVHead: 2, nFF: 80, ctx: 96,
		routed: []uint32{1, 3}, capacity: 0.3, gate: GateSigmoid, predHidden: 24, bias: true,
		routerScale: 1, weightType: gguf.TypeF32, seed: 1}
}

// write writes the model to a temporary GGUF file and returns its path.
func (tm testModel) write(t *testing.T) string {
	t.Helper()
	// MoD tensors draw from their own generator, so a model with routers has
	// the same block weights as the same seed without them.
	rng, modRng := rand.New(rand.NewSource(tm.seed)), rand.New(rand.NewSource(tm.seed+1))
	draw := func(r *rand.Rand, n int, scale float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64()) * scale
		}
		return v
	}
	randn := func(n int, scale float32) []float32 { return draw(rng, n, scale) }
	modRandn := func(n int, scale float32) []float32 { return draw(modRng, n, scale) }
	ones := func(n int) []float32 {
		v := randn(n, 0.1)
		for i := range v {
			v[i] += 1
		}
		return v
	}
	arch := ArchLlama
	if len(tm.routed) > 0 {
		arch = ArchMoD
	}
	w := gguf.NewWriter()
	kv := func(k string, v gguf.Value) { require.NoError(t, w.SetKV(k, v)) }
	kv(KeyArchitecture, gguf.Scalar(arch))
	kv(ArchKey(arch, KeyContextLength), gguf.Scalar(uint32(tm.ctx)))
	kv(ArchKey(arch, KeyEmbeddingLen), gguf.Scalar(uint32(tm.nEmbd)))
	kv(ArchKey(arch, KeyBlockCount), gguf.Scalar(uint32(tm.nLayer)))
	kv(ArchKey(arch, KeyFeedForwardLen), gguf.Scalar(uint32(tm.nFF)))
	kv(ArchKey(arch, KeyHeadCount), gguf.Scalar(uint32(tm.nHead)))
	kv(ArchKey(arch, KeyHeadCountKV), gguf.Scalar(uint32(tm.nKVHead)))
	kv(ArchKey(arch, KeyRMSEpsilon), gguf.Scalar(float32(1e-5)))
	kv(ArchKey(arch, KeyVocabSize), gguf.Scalar(uint32(tm.nVocab)))
	if arch == ArchMoD {
		if tm.routedKV != nil {
			kv(ArchKey(arch, KeyRoutedLayers), *tm.routedKV)
		} else {
			kv(ArchKey(arch, KeyRoutedLayers), gguf.Array(tm.routed))
		}
		kv(ArchKey(arch, KeyCapacity), gguf.Scalar(tm.capacity))
		kv(ArchKey(arch, KeyGate), gguf.Scalar(tm.gate))
		kv(ArchKey(arch, KeyPredictorHidden), gguf.Scalar(uint32(tm.predHidden)))
	}

	d, hd := tm.nEmbd, tm.nEmbd/tm.nHead
	kvd := tm.nKVHead * hd
	type tensor struct {
		name string
		dims []uint64
		v    []float32
		f32  bool // MoD tensors and norms stay F32
	}
	ts := []tensor{
		{TensorTokenEmbd, []uint64{uint64(d), uint64(tm.nVocab)}, randn(d*tm.nVocab, 1), false},
		{TensorOutputNorm, []uint64{uint64(d)}, ones(d), true},
		{TensorOutput, []uint64{uint64(d), uint64(tm.nVocab)}, randn(d*tm.nVocab, 0.2), false},
	}
	isRouted := map[int]bool{}
	for _, l := range tm.routed {
		isRouted[int(l)] = true
	}
	for l := 0; l < tm.nLayer; l++ {
		sd := 1 / float32(d)
		ts = append(ts,
			tensor{BlockTensor(l, TensorAttnNorm), []uint64{uint64(d)}, ones(d), true},
			tensor{BlockTensor(l, TensorAttnQ), []uint64{uint64(d), uint64(d)}, randn(d*d, 2*sd), false},
			tensor{BlockTensor(l, TensorAttnK), []uint64{uint64(d), uint64(kvd)}, randn(d*kvd, 2*sd), false},
			tensor{BlockTensor(l, TensorAttnV), []uint64{uint64(d), uint64(kvd)}, randn(d*kvd, 4*sd), false},
			tensor{BlockTensor(l, TensorAttnOutput), []uint64{uint64(d), uint64(d)}, randn(d*d, 4*sd), false},
			tensor{BlockTensor(l, TensorFFNNorm), []uint64{uint64(d)}, ones(d), true},
			tensor{BlockTensor(l, TensorFFNGate), []uint64{uint64(d), uint64(tm.nFF)}, randn(d*tm.nFF, 4*sd), false},
			tensor{BlockTensor(l, TensorFFNUp), []uint64{uint64(d), uint64(tm.nFF)}, randn(d*tm.nFF, 4*sd), false},
			tensor{BlockTensor(l, TensorFFNDown), []uint64{uint64(tm.nFF), uint64(d)}, randn(tm.nFF*d, 4*sd), false},
		)
		if !isRouted[l] {
			continue
		}
		// Token embeddings have |x| ~ sqrt(d): scale w so r spreads by routerScale.
		ts = append(ts, tensor{BlockTensor(l, TensorRouterWeight), []uint64{uint64(d)}, modRandn(d, tm.routerScale/float32(d)), true})
		if tm.bias {
			ts = append(ts, tensor{BlockTensor(l, TensorRouterBias), []uint64{1}, []float32{-0.2}, true})
		}
		if tm.predHidden > 0 {
			ts = append(ts,
				tensor{BlockTensor(l, TensorPredUp), []uint64{uint64(d), uint64(tm.predHidden)}, modRandn(d*tm.predHidden, 1/float32(d)), true},
				tensor{BlockTensor(l, TensorPredDown), []uint64{uint64(tm.predHidden)}, modRandn(tm.predHidden, 1), true})
		}
	}
	values := map[string][]float32{}
	for _, tn := range ts {
		values[tn.name] = tn.v
	}
	if tm.edit != nil {
		tm.edit(w, values)
	}
	for _, tn := range ts {
		v, ok := values[tn.name]
		if !ok {
			continue // the edit removed it
		}
		typ := tm.weightType
		if tn.f32 {
			typ = gguf.TypeF32
		}
		require.NoError(t, w.AddFloat32(tn.name, typ, tn.dims, v))
		delete(values, tn.name)
	}
	added := make([]string, 0, len(values)) // tensors the edit added: vectors, F32
	for name := range values {
		added = append(added, name)
	}
	sort.Strings(added)
	for _, name := range added {
		require.NoError(t, w.AddFloat32(name, gguf.TypeF32, []uint64{uint64(len(values[name]))}, values[name]))
	}
	path := filepath.Join(t.TempDir(), "model.gguf")
	require.NoError(t, w.WriteFile(path))
	return path
}

func (tm testModel) open(t *testing.T) *Model {
	t.Helper()
	m, err := Open(tm.write(t))
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

func randomTokens(n, nVocab int, seed int64) []int32 {
	rng := rand.New(rand.NewSource(seed))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.Intn(nVocab))
	}
	return out
}
