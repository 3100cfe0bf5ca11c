package vulkan

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomQ8_0 is rows x cols of Q8_0 blocks with random quants and a scale
// of 2^-12: values of about 0.018 standard deviation, as trained weights.
func randomQ8_0(t *testing.T, rng *rand.Rand, name string, rows, cols int) mod.Mat {
	t.Helper()
	data := make([]byte, rows*cols/32*34)
	rng.Read(data)
	for b := 0; b < len(data); b += 34 {
		binary.LittleEndian.PutUint16(data[b:], 0x0C00) // 2^-12
	}
	m, err := mod.NewMat(name, gguf.TypeQ8_0, []uint64{uint64(cols), uint64(rows)}, data)
	require.NoError(t, err)
	return m
}

// oneBlockModel is a dense model of one block whose output is tied to
// embd, its matrices made by mat and its norms all 1.
func oneBlockModel(t *testing.T, path string, c mod.Config, embd mod.Mat, mat func(name string, rows, cols int) mod.Mat) *mod.Model {
	t.Helper()
	qd, kvd := c.NHead*c.HeadDim, c.KVDim()
	w := &mod.Weights{TokenEmbd: embd, Output: embd, OutputNorm: onesF32(t, mod.TensorOutputNorm, c.NEmbd)}
	bt := func(name string) string { return mod.BlockTensor(0, name) }
	w.Blocks = []mod.Block{{
		AttnNorm: onesF32(t, bt(mod.TensorAttnNorm), c.NEmbd),
		Q:        mat(bt(mod.TensorAttnQ), qd, c.NEmbd),
		K:        mat(bt(mod.TensorAttnK), kvd, c.NEmbd),
		V:        mat(bt(mod.TensorAttnV), kvd, c.NEmbd),
		O:        mat(bt(mod.TensorAttnOutput), c.NEmbd, qd),
		FFNNorm:  onesF32(t, bt(mod.TensorFFNNorm), c.NEmbd),
		Gate:     mat(bt(mod.TensorFFNGate), c.NFF, c.NEmbd),
		Up:       mat(bt(mod.TensorFFNUp), c.NFF, c.NEmbd),
		Down:     mat(bt(mod.TensorFFNDown), c.NEmbd, c.NFF),
	}}
	return &mod.Model{Path: path, Config: c, Weights: w}
}

func onesF32(t *testing.T, name string, n int) mod.Mat {
	t.Helper()
	data := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(1))
	}
	m, err := mod.NewMat(name, gguf.TypeF32, []uint64{uint64(n)}, data)
	require.NoError(t, err)
	return m
}

// TestLargeTensorInPieces: a 7B-shape token embedding (32000 x 4096 Q8_0,
// 139 MB, tied to the output) is over lavapipe's 128 MiB binding range; the
// runner, with the device's own profile, uploads it in pieces and the
// decode step's logits agree with the CPU's. The rest of the model is one
// small block (nFF 256), so the test stays a few seconds. The context is
// 4096, so a batched prompt's attention partials for 512 rows (32 heads of
// 128 in lavapipe's tiles) would pass the binding range too: they are
// sized for a group of rows (attentionGroupRows). Tolerance: 1e-4
// of the largest logit plus tolLogits: the output row sums 4096 products
// of about 0.02 in another order than the CPU (measured 5.5e-5 at
// |logits| < 4.7: 1.2e-5 of the largest).
func TestLargeTensorInPieces(t *testing.T) {
	dev := openDevice(t, true)
	c := mod.Config{Arch: "llama", NVocab: 32000, NEmbd: 4096, NLayer: 1, NHead: 32, NKVHead: 8, HeadDim: 128, NFF: 256,
		ContextLen: 4096, RMSEps: 1e-5, RopeBase: 10000, Routed: []bool{false}}
	rng := rand.New(rand.NewSource(7))
	embd := randomQ8_0(t, rng, "token_embd.weight", c.NVocab, c.NEmbd)
	m := oneBlockModel(t, "7B-shape embedding", c, embd, func(name string, rows, cols int) mod.Mat {
		return randomQ8_0(t, rng, name, rows, cols)
	})

	run, err := New(dev, m, mod.RoutingRouter, Options{KVType: "f32"})
	require.NoError(t, err)
	defer run.Close()
	embdBytes := uint64(c.NVocab * c.NEmbd / 32 * 34)
	limit := DeviceProfile(dev.Info()).MaxStorageBufferRange
	if embdBytes > limit {
		assert.Greater(t, len(run.w.tokenEmbd.pieces), 1, "over the range: in pieces")
	}
	t.Logf("token_embd: %d bytes, binding range %d: %d pieces", embdBytes, limit, len(run.w.tokenEmbd.pieces))

	cpu, err := m.NewState(mod.RoutingRouter)
	require.NoError(t, err)
	tokens := []int32{1, 31999, 16000, 5}
	tol := tolerance{abs: tolLogits, rel: 1e-4}
	var want []float32
	for step, tok := range tokens {
		want, err = cpu.Forward([]int32{tok}, false)
		require.NoError(t, err)
		got, err := run.Feed([]int32{tok})
		require.NoError(t, err)
		require.Empty(t, closeErr(want, got, tol.of(want)), "step %d", step)
		t.Logf("step %d: max |logit diff| %.2g, max |logit| %.3g", step, maxAbsDiff(want, got), maxAbsDiff(want, make([]float32, len(want))))
	}

	// The same tokens as one batched prompt: the prefill's embed and
	// matmuls read the pieces too.
	run.Reset()
	got, err := run.Feed(tokens)
	require.NoError(t, err)
	require.Empty(t, closeErr(want, got, tol.of(want)), "batched prompt")
	// And as an eval window.
	e, err := NewEvaluator(dev, m, Options{})
	require.NoError(t, err)
	defer e.Close()
	all, err := e.Eval(tokens)
	require.NoError(t, err)
	last := all[(len(tokens)-1)*c.NVocab:]
	require.Empty(t, closeErr(want, last, tol.of(want)), "eval window")
	t.Logf("batched prompt: max |logit diff| %.2g; eval window: %.2g", maxAbsDiff(want, got), maxAbsDiff(want, last))
}
