package convert

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/quant"
)

// The committed inputs and expected outputs, written by
// scripts/gen_mod_fixtures.sh (train/fixtures.py).
const testdata = "../../testdata/convert"

func td(name string) string { return filepath.Join(testdata, name) }

type expected struct {
	Format  string `json:"format"`
	Tensors map[string]struct {
		Dims []uint64 `json:"dims"`
		F32  string   `json:"f32"`
	} `json:"tensors"`
}

func loadExpected(t *testing.T, name string) expected {
	t.Helper()
	raw, err := os.ReadFile(td(name))
	require.NoError(t, err)
	var e expected
	require.NoError(t, json.Unmarshal(raw, &e))
	require.Equal(t, "modrun-convert-expected/1", e.Format)
	require.NotEmpty(t, e.Tensors)
	return e
}

func decodeF32(t *testing.T, s string) []float32 {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	require.NoError(t, err)
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// convertFile runs the whole conversion into a temporary GGUF and opens it.
func convertFile(t *testing.T, ckpt, config string, typ string) *gguf.File {
	t.Helper()
	scheme, err := quant.Parse(typ)
	require.NoError(t, err)
	ck, err := LoadCheckpoint(td(ckpt))
	require.NoError(t, err)
	cfg, err := LoadConfig(td(config))
	require.NoError(t, err)
	vocab, err := gguf.Open(td("vocab512.gguf"))
	require.NoError(t, err)
	defer vocab.Close()
	w, err := Convert(ck, cfg, vocab, Options{Scheme: scheme, Name: "test"})
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "out.gguf")
	require.NoError(t, w.WriteFile(out))
	f, err := gguf.Open(out)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// checkTensors compares every tensor of the GGUF with the expected values,
// bit for bit (F32 in, F32 out), and checks no tensor is extra.
func checkTensors(t *testing.T, f *gguf.File, e expected) {
	t.Helper()
	assert.Len(t, f.Tensors, len(e.Tensors), "tensor count")
	for name, want := range e.Tensors {
		info, ok := f.Tensor(name)
		if !assert.True(t, ok, "tensor %s missing", name) {
			continue
		}
		assert.Equal(t, gguf.TypeF32, info.Type, name)
		assert.Equal(t, want.Dims, info.Dims, name)
		got, err := f.TensorFloat32(name)
		require.NoError(t, err, name)
		assert.Equal(t, decodeF32(t, want.F32), got, name)
	}
}

func TestConvertMoDCheckpoint(t *testing.T) {
	f := convertFile(t, "tiny-mod.pt", "tiny-mod.config.json", "f32")
	checkTensors(t, f, loadExpected(t, "tiny-mod.expected.json"))

	assert.Equal(t, mod.ArchMoD, f.Architecture())
	_, hasOutput := f.Tensor(mod.TensorOutput)
	assert.False(t, hasOutput, "tied output: output.weight must be absent")
	u := func(key string) uint64 {
		v, err := f.Uint(mod.ArchKey(mod.ArchMoD, key))
		require.NoError(t, err, key)
		return v
	}
	assert.Equal(t, uint64(16), u(mod.KeyEmbeddingLen))
	assert.Equal(t, uint64(3), u(mod.KeyBlockCount))
	assert.Equal(t, uint64(24), u(mod.KeyFeedForwardLen))
	assert.Equal(t, uint64(4), u(mod.KeyHeadCount))
	assert.Equal(t, uint64(2), u(mod.KeyHeadCountKV))
	assert.Equal(t, uint64(4), u(mod.KeyRopeDimCount))
	assert.Equal(t, uint64(8), u(mod.KeyPredictorHidden))
	routed, err := f.Uint32s(mod.ArchKey(mod.ArchMoD, mod.KeyRoutedLayers))
	require.NoError(t, err)
	assert.Equal(t, []uint32{1, 2}, routed)
	c, err := f.Float(mod.ArchKey(mod.ArchMoD, mod.KeyCapacity))
	require.NoError(t, err)
	assert.Equal(t, float64(float32(0.125)), c)
	gate, err := f.String(mod.ArchKey(mod.ArchMoD, mod.KeyGate))
	require.NoError(t, err)
	assert.Equal(t, mod.GateSigmoid, gate)
	base, err := f.Float(mod.ArchKey(mod.ArchMoD, mod.KeyRopeFreqBase))
	require.NoError(t, err)
	assert.Equal(t, 10000.0, base)

	tokens, err := f.Strings("tokenizer.ggml.tokens")
	require.NoError(t, err)
	assert.Len(t, tokens, 512)
	model, err := f.String("tokenizer.ggml.model")
	require.NoError(t, err)
	assert.Equal(t, "llama", model)
}

func TestConvertDenseSafetensors(t *testing.T) {
	f := convertFile(t, "tiny-dense.safetensors", "tiny-dense.config.json", "f32")
	checkTensors(t, f, loadExpected(t, "tiny-dense.expected.json"))
	// A plain llama file: no MoD keys or tensors, llama.cpp's names only.
	assert.Equal(t, mod.ArchLlama, f.Architecture())
	assert.Empty(t, f.KeysWithPrefix("llama.mod."))
	_, hasOutput := f.Tensor(mod.TensorOutput)
	assert.True(t, hasOutput, "untied output")
	for _, key := range []string{mod.KeyContextLength, mod.KeyEmbeddingLen, mod.KeyBlockCount, mod.KeyFeedForwardLen,
		mod.KeyHeadCount, mod.KeyHeadCountKV, mod.KeyRMSEpsilon, mod.KeyRopeFreqBase, mod.KeyRopeDimCount} {
		assert.True(t, f.Has(mod.ArchKey(mod.ArchLlama, key)), key)
	}
}

// Quantized output: matrices F16 / Q8_0 within their rounding error, norms
// and MoD tensors F32 and exact; ffn_down's rows (24) are not whole Q8_0
// blocks, so it falls back to F16.
func TestConvertTypes(t *testing.T) {
	e := loadExpected(t, "tiny-mod.expected.json")
	for _, tc := range []struct {
		typ gguf.TensorType
		tol float64 // relative to the tensor's max |value|: F16 2^-11, Q8_0 half a step of 1/127
	}{{gguf.TypeF16, 1.0 / 2048}, {gguf.TypeQ8_0, 1.0 / 254}} {
		f := convertFile(t, "tiny-mod.pt", "tiny-mod.config.json", strings.ToLower(tc.typ.String()))
		for name, want := range e.Tensors {
			info, ok := f.Tensor(name)
			require.True(t, ok, name)
			w := decodeF32(t, want.F32)
			if len(info.Dims) == 1 || isMoD(name) {
				assert.Equal(t, gguf.TypeF32, info.Type, "%s stays F32", name)
			} else if tc.typ == gguf.TypeQ8_0 && info.Dims[0]%32 != 0 {
				assert.Equal(t, gguf.TypeF16, info.Type, "%s falls back to F16", name)
			} else {
				assert.Equal(t, tc.typ, info.Type, name)
			}
			got, err := f.TensorFloat32(name)
			require.NoError(t, err, name)
			var maxAbs, maxErr float64
			for i := range w {
				maxAbs = math.Max(maxAbs, math.Abs(float64(w[i])))
				maxErr = math.Max(maxErr, math.Abs(float64(w[i]-got[i])))
			}
			assert.LessOrEqual(t, maxErr, tc.tol*maxAbs*1.01, "%s %s", tc.typ, name)
		}
	}
}

func isMoD(name string) bool {
	for _, s := range []string{mod.TensorRouterWeight, mod.TensorRouterBias, mod.TensorPredUp, mod.TensorPredDown} {
		if len(name) > len(s) && name[len(name)-len(s):] == s {
			return true
		}
	}
	return false
}

func TestRefuseMetaMoDLayout(t *testing.T) {
	ck, err := LoadCheckpoint(td("meta-mod-llama2.pt"))
	require.NoError(t, err)
	err = CheckLayout(ck)
	require.ErrorIs(t, err, ErrMetaMoDLayout)
	msg := err.Error()
	for _, why := range []string{"router.weight", "only the MLP", "residual twice", "compact positions", "original position"} {
		assert.Contains(t, msg, why)
	}
	assert.Contains(t, msg, "meta-mod-llama2.pt")
}

func TestBadCheckpoints(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
	pt, err := os.ReadFile(td("tiny-mod.pt"))
	require.NoError(t, err)
	st, err := os.ReadFile(td("tiny-dense.safetensors"))
	require.NoError(t, err)
	hugeHeader := append([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, st[8:]...)
	badJSON := append([]byte{}, st...)
	copy(badJSON[8:], "not json")
	for _, tc := range []struct{ name, path string }{
		{"missing", filepath.Join(dir, "absent.pt")},
		{"directory", dir},
		{"empty", write("empty.pt", nil)},
		{"text", write("text.pt", []byte("hello, not a checkpoint\n"))},
		{"truncated zip", write("trunc.pt", pt[:len(pt)/2])},
		{"zip header only", write("head.pt", pt[:64])},
		{"safetensors too short", write("short.safetensors", []byte{1, 2, 3})},
		{"safetensors huge header", write("huge.safetensors", hugeHeader)},
		{"safetensors bad json", write("bad.safetensors", badJSON)},
		{"safetensors truncated data", write("cut.safetensors", st[:len(st)-100])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadCheckpoint(tc.path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.path)
		})
	}
}

// A checkpoint that disagrees with its config fails naming the tensor.
func TestCheckpointConfigMismatch(t *testing.T) {
	vocab, err := gguf.Open(td("vocab512.gguf"))
	require.NoError(t, err)
	defer vocab.Close()
	f32, err := quant.Parse("f32")
	require.NoError(t, err)
	load := func() (*Checkpoint, *Config) {
		ck, err := LoadCheckpoint(td("tiny-mod.pt"))
		require.NoError(t, err)
		cfg, err := LoadConfig(td("tiny-mod.config.json"))
		require.NoError(t, err)
		return ck, cfg
	}
	for _, tc := range []struct {
		name   string
		change func(*Checkpoint, *Config)
		want   string
	}{
		{"missing tensor", func(ck *Checkpoint, _ *Config) { delete(ck.Tensors, "layers.1.attention.wk.weight") },
			`"layers.1.attention.wk.weight" is missing`},
		{"wrong shape", func(ck *Checkpoint, _ *Config) { ck.Tensors["layers.2.feed_forward.w2.weight"].Shape = []int{24, 16} },
			`"layers.2.feed_forward.w2.weight" has shape [24 16]`},
		{"extra tensor", func(ck *Checkpoint, _ *Config) {
			ck.Tensors["layers.0.mod_router.weight"] = &Tensor{Shape: []int{16}, Data: make([]float32, 16)}
		}, `"layers.0.mod_router.weight" is not part of the model`},
		{"no bias in config", func(_ *Checkpoint, cfg *Config) { cfg.RouterBias = false }, `"layers.1.mod_router.bias" is not part`},
		{"untied config", func(_ *Checkpoint, cfg *Config) { cfg.TiedOutput = false }, `"output.weight" is missing`},
		{"vocab size", func(_ *Checkpoint, cfg *Config) { cfg.VocabSize = 500 }, "has 512 tokens"},
		{"routed layer 0", func(_ *Checkpoint, cfg *Config) { cfg.RoutedLayers = []int{0, 1} }, "block 0 is always dense"},
		{"bad gate", func(_ *Checkpoint, cfg *Config) { cfg.Gate = "tanh" }, `gate "tanh"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ck, cfg := load()
			tc.change(ck, cfg)
			_, err := Convert(ck, cfg, vocab, Options{Scheme: f32})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestBadConfig(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"notjson":  "{",
		"unknown":  `{"format": "modrun-train-config/1", "dim": 16, "colour": 3}`,
		"format":   `{"format": "other/1"}`,
		"zero dim": `{"format": "modrun-train-config/1", "dim": 0}`,
	} {
		p := filepath.Join(dir, name+".json")
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		_, err := LoadConfig(p)
		assert.Error(t, err, name)
		if err != nil {
			assert.Contains(t, err.Error(), p)
		}
	}
}

// A llama.cpp mix on this tiny model: no row (16 or 24 elements) is a whole
// number of 32 or 256, so every matrix falls back to F16, as llama-quantize
// would store it, and the file says it is a Q4_K_M file.
func TestConvertMixFallsBack(t *testing.T) {
	f := convertFile(t, "tiny-mod.pt", "tiny-mod.config.json", "q4_k_m")
	for _, info := range f.Tensors {
		want := gguf.TypeF16
		if len(info.Dims) == 1 || isMoD(info.Name) {
			want = gguf.TypeF32
		}
		assert.Equal(t, want, info.Type, info.Name)
	}
	ft, err := f.Uint(mod.KeyFileType)
	require.NoError(t, err)
	assert.Equal(t, uint64(15), ft, "llama_ftype MOSTLY_Q4_K_M")
	_, err = Convert(nil, nil, nil, Options{})
	assert.ErrorContains(t, err, "no output type")
}
