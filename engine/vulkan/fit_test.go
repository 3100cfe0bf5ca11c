package vulkan

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/synth"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shellModel writes a dense model of shape s with Q4_0 matrices whose
// bytes are all zero, as a sparse file (the zeros are holes: a 7B model
// costs a few MiB of disk and seconds to write), and opens it. Only the
// sizes matter to what it tests: the weights are never run.
func shellModel(t *testing.T, s synth.Shape) *mod.Model {
	t.Helper()
	w := gguf.NewWriter()
	ak := func(k string) string { return mod.ArchKey(mod.ArchLlama, k) }
	tokens := make([]string, s.NVocab)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("t%d", i)
	}
	for _, kv := range []struct {
		k string
		v gguf.Value
	}{
		{mod.KeyArchitecture, gguf.Scalar(mod.ArchLlama)},
		{ak(mod.KeyContextLength), gguf.Scalar(uint32(s.ContextLen))},
		{ak(mod.KeyEmbeddingLen), gguf.Scalar(uint32(s.NEmbd))},
		{ak(mod.KeyBlockCount), gguf.Scalar(uint32(s.NLayer))},
		{ak(mod.KeyFeedForwardLen), gguf.Scalar(uint32(s.NFF))},
		{ak(mod.KeyHeadCount), gguf.Scalar(uint32(s.NHead))},
		{ak(mod.KeyHeadCountKV), gguf.Scalar(uint32(s.NKVHead))},
		{ak(mod.KeyRMSEpsilon), gguf.Scalar(float32(1e-5))},
		{"tokenizer.ggml.model", gguf.Scalar("llama")},
		{"tokenizer.ggml.tokens", gguf.Array(tokens)},
	} {
		require.NoError(t, w.SetKV(kv.k, kv.v))
	}
	zero := func([]byte) error { return nil }
	d, kvd := uint64(s.NEmbd), uint64(s.NKVHead*s.NEmbd/s.NHead)
	add := func(name string, typ gguf.TensorType, dims ...uint64) {
		require.NoError(t, w.AddTensorFunc(name, typ, dims, zero))
	}
	add(mod.TensorTokenEmbd, gguf.TypeQ4_0, d, uint64(s.NVocab))
	for l := range s.NLayer {
		bt := func(n string) string { return mod.BlockTensor(l, n) }
		add(bt(mod.TensorAttnNorm), gguf.TypeF32, d)
		add(bt(mod.TensorAttnQ), gguf.TypeQ4_0, d, d)
		add(bt(mod.TensorAttnK), gguf.TypeQ4_0, d, kvd)
		add(bt(mod.TensorAttnV), gguf.TypeQ4_0, d, kvd)
		add(bt(mod.TensorAttnOutput), gguf.TypeQ4_0, d, d)
		add(bt(mod.TensorFFNNorm), gguf.TypeF32, d)
		add(bt(mod.TensorFFNGate), gguf.TypeQ4_0, d, uint64(s.NFF))
		add(bt(mod.TensorFFNUp), gguf.TypeQ4_0, d, uint64(s.NFF))
		add(bt(mod.TensorFFNDown), gguf.TypeQ4_0, uint64(s.NFF), d)
	}
	add(mod.TensorOutputNorm, gguf.TypeF32, d)
	path := filepath.Join(t.TempDir(), s.Name+".gguf")
	f, err := os.Create(path)
	require.NoError(t, err)
	n, err := w.WriteTo(sparse{f})
	require.NoError(t, err)
	require.NoError(t, f.Truncate(n)) // the trailing holes
	require.NoError(t, f.Close())
	m, err := mod.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// sparse writes a file, seeking over each all-zero MiB instead of writing it.
type sparse struct{ f *os.File }

func (s sparse) Write(p []byte) (int, error) {
	for done := 0; done < len(p); {
		n := min(len(p)-done, len(zeros))
		var err error
		if bytes.Equal(p[done:done+n], zeros[:n]) {
			_, err = s.f.Seek(int64(n), io.SeekCurrent)
		} else {
			_, err = s.f.Write(p[done : done+n])
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return len(p), nil
}

var zeros = make([]byte, 1<<20)

// TestModelTooBigForTheDevice: a 7B model (Q4_0: 3.5 GiB) on a device of
// less memory (lavapipe's 2 GiB heap) is one clear error, found before any
// allocation; so is a context too long for the KV caches, with the longest
// that fits. Nothing stays allocated.
func TestModelTooBigForTheDevice(t *testing.T) {
	dev := openDevice(t, false)
	heap := dev.Info().DeviceLocalBytes
	start := time.Now()
	big := shellModel(t, synth.Shapes[3])
	t.Logf("%s: a %s sparse file in %s", synth.Shapes[3].Name, vk.Bytes(uint64(big.File.Size())), time.Since(start))
	if uint64(big.File.Size()) < heap {
		t.Skipf("the device's %s holds a 7B model", vk.Bytes(heap))
	}
	before := vk.LiveObjects()
	_, err := New(dev, big, mod.RoutingRouter, Options{ContextLen: 512, KVType: "f32"})
	var noRoom *NoRoomError
	require.ErrorAs(t, err, &noRoom)
	assert.Zero(t, noRoom.MaxCtx)
	assert.ErrorContains(t, err, "does not fit in the "+vk.Bytes(heap)+" of GPU memory of "+dev.Info().Name+": it needs 3.")
	assert.ErrorContains(t, err, "GiB of weights and 512.1 MiB of KV cache (512 tokens, f32)")
	assert.ErrorContains(t, err, "a smaller or more quantized model would fit")
	_, err = NewEvaluator(dev, big, Options{})
	require.ErrorAs(t, err, &noRoom)
	assert.Equal(t, before, vk.LiveObjects())

	// 230 MiB of weights fit; 32768 tokens of F32 caches (4 GiB) do not.
	long := shellModel(t, synth.Shape{Name: "long", NEmbd: 2048, NLayer: 8, NHead: 32, NKVHead: 32, NFF: 5632, NVocab: 512, ContextLen: 32768})
	_, err = New(dev, long, mod.RoutingRouter, Options{KVType: "f32"})
	require.ErrorAs(t, err, &noRoom)
	assert.Equal(t, 32768, noRoom.Ctx)
	require.Positive(t, noRoom.MaxCtx)
	assert.ErrorContains(t, err, "of KV cache (32768 tokens, f32): a context of ")
	perToken := uint64(8 * (2*4*2048 + 4))
	assert.LessOrEqual(t, noRoom.Weights+uint64(noRoom.MaxCtx)*perToken, heap, "the context it offers fits")
	assert.Greater(t, noRoom.Weights+uint64(noRoom.MaxCtx+1)*perToken+heap/fitReserve, heap, "and is the longest")
	assert.Equal(t, before, vk.LiveObjects())
}

// TestFailedAllocationLeaksNothing: an allocation that fails at any point
// of New (weights, caches, the prompt's buffers) is an *vk.OutOfMemoryError
// naming what did not fit, and every buffer made before it is freed.
func TestFailedAllocationLeaksNothing(t *testing.T) {
	dev := openDevice(t, false)
	m, err := mod.Open("../../testdata/mod/mod-trained.gguf")
	require.NoError(t, err)
	defer m.Close()
	run, err := New(dev, m, mod.RoutingRouter, Options{})
	require.NoError(t, err)
	need := vk.LiveObjects().Bytes
	run.Close()
	before := vk.LiveObjects()
	for _, frac := range []float64{0.01, 0.3, 0.6, 0.9, 0.99} {
		dev.MemoryLimit = uint64(frac * float64(need))
		_, err := New(dev, m, mod.RoutingRouter, Options{})
		var oom *vk.OutOfMemoryError
		require.True(t, errors.As(err, &oom), "limit %.0f%% of %d bytes: %v", 100*frac, need, err)
		assert.ErrorContains(t, err, "did not fit (Device.MemoryLimit is ")
		assert.Equal(t, before, vk.LiveObjects(), "limit %.0f%%: nothing left after %v", 100*frac, err)
	}
	dev.MemoryLimit = 0
}
