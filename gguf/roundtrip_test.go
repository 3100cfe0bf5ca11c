package gguf

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// everyValue holds one entry of each value type, arrays of each, an empty
// array, and nested arrays.
func everyValue() []KV {
	return []KV{
		{"t.u8", Scalar(uint8(200))},
		{"t.i8", Scalar(int8(-100))},
		{"t.u16", Scalar(uint16(60000))},
		{"t.i16", Scalar(int16(-30000))},
		{"t.u32", Scalar(uint32(4000000000))},
		{"t.i32", Scalar(int32(-2000000000))},
		{"t.f32", Scalar(float32(-1.5e-7))},
		{"t.bool", Scalar(true)},
		{"t.string", Scalar("héllo ▁wörld")},
		{"t.empty_string", Scalar("")},
		{"t.u64", Scalar(uint64(math.MaxUint64))},
		{"t.i64", Scalar(int64(math.MinInt64))},
		{"t.f64", Scalar(math.Pi)},
		{"a.u8", Array([]uint8{0, 1, 255})},
		{"a.i8", Array([]int8{-128, 0, 127})},
		{"a.u16", Array([]uint16{1, 65535})},
		{"a.i16", Array([]int16{-32768, 32767})},
		{"a.u32", Array([]uint32{7, 8, 9})},
		{"a.i32", Array([]int32{-1, 2, -3})},
		{"a.f32", Array([]float32{0.5, float32(math.Inf(-1)), -0})},
		{"a.bool", Array([]bool{true, false, true})},
		{"a.string", Array([]string{"<s>", "", "▁the", "\x00bytes"})},
		{"a.u64", Array([]uint64{1 << 63})},
		{"a.i64", Array([]int64{-1 << 62})},
		{"a.f64", Array([]float64{1e300, -1e-300})},
		{"a.empty", Array([]uint32{})},
		{"a.nested", Arrays(Array([]string{"x", "y"}), Array([]int32{1}), Arrays(Array([]bool{false})))},
	}
}

func writeBytes(t *testing.T, w *Writer) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	require.NoError(t, err)
	require.Equal(t, int64(buf.Len()), n)
	return buf.Bytes()
}

func TestRoundTripEveryValueType(t *testing.T) {
	w := NewWriter()
	for _, kv := range everyValue() {
		require.NoError(t, w.SetKV(kv.Key, kv.Value), kv.Key)
	}
	f, err := Parse(writeBytes(t, w))
	require.NoError(t, err)
	assert.Equal(t, uint32(3), f.Version)
	require.Len(t, f.KVs, len(everyValue()))
	for i, want := range everyValue() {
		got := f.KVs[i]
		assert.Equal(t, want.Key, got.Key, "keys keep the order they were added in")
		assert.Equal(t, want.Value.Type(), got.Value.Type(), want.Key)
		assert.Equal(t, want.Value.Interface(), got.Value.Interface(), want.Key)
	}
	// The typed accessors.
	s, err := f.String("t.string")
	require.NoError(t, err)
	assert.Equal(t, "héllo ▁wörld", s)
	u, err := f.Uint("t.u16")
	require.NoError(t, err)
	assert.Equal(t, uint64(60000), u)
	_, err = f.Uint("t.i8")
	assert.ErrorContains(t, err, "negative")
	_, err = f.Strings("a.u32")
	assert.ErrorContains(t, err, `"a.u32" has type array of u32, want array of string`)
	_, err = f.String("no.such.key")
	assert.ErrorIs(t, err, ErrKeyNotFound)
}

func TestRoundTripEveryTensorType(t *testing.T) {
	// Ragged shapes: rows of 32 (one block) to 96, odd row counts.
	values := make([]float32, 96*5)
	for i := range values {
		values[i] = float32(math.Sin(float64(i)*0.37)) * float32(1+i%7)
	}
	cases := []struct {
		typ  TensorType
		dims []uint64
		tol  float32 // max abs error of quantize+dequantize, relative to the block's max |x| (up to 7 here)
	}{
		{TypeF32, []uint64{96, 5}, 0},
		{TypeF16, []uint64{96, 5}, 7 * 1.0 / 2048},               // 11-bit significand
		{TypeBF16, []uint64{96, 5}, 7 * 1.0 / 256},               // 8-bit significand
		{TypeQ8_0, []uint64{32, 3, 5}, 7 * (0.5/127 + 1.0/2048)}, // half a step, plus d rounded to f16 times |q| <= 127
		{TypeQ4_0, []uint64{96, 1, 5}, 7 * (1.0/8 + 1.0/2048)},   // the opposite extreme clamps to 7/8 of max: max/8, plus d rounded to f16
	}
	w := NewWriter()
	for _, c := range cases {
		require.NoError(t, w.AddFloat32("w."+c.typ.String(), c.typ, c.dims, values))
	}
	raw := writeBytes(t, w)
	f, err := Parse(raw)
	require.NoError(t, err)
	require.Len(t, f.Tensors, len(cases))
	for i, c := range cases {
		ti := f.Tensors[i]
		assert.Equal(t, c.typ, ti.Type)
		assert.Equal(t, c.dims, ti.Dims)
		assert.Zero(t, ti.Offset%DefaultAlignment, "tensor %s is aligned", ti.Name)
		want, err := Quantize(c.typ, values)
		require.NoError(t, err)
		got, err := f.TensorData(ti.Name)
		require.NoError(t, err)
		assert.Equal(t, want, got, "%s bytes survive the round trip", ti.Name)
		deq, err := f.TensorFloat32(ti.Name)
		require.NoError(t, err)
		var maxErr float32
		for j := range values {
			maxErr = max(maxErr, float32(math.Abs(float64(deq[j]-values[j]))))
		}
		assert.LessOrEqual(t, maxErr, c.tol, "%s max abs error", c.typ)
	}
}

func TestWriterIsDeterministicAndAligned(t *testing.T) {
	build := func() []byte {
		w := NewWriter()
		require.NoError(t, w.SetKV("general.architecture", Scalar("llama")))
		require.NoError(t, w.SetKV(KeyAlignment, Scalar(uint32(64))))
		require.NoError(t, w.AddFloat32("a", TypeF32, []uint64{3}, []float32{1, 2, 3}))
		require.NoError(t, w.AddFloat32("b", TypeF32, []uint64{5}, []float32{1, 2, 3, 4, 5}))
		return writeBytes(t, w)
	}
	first := build()
	assert.Equal(t, first, build())
	f, err := Parse(first)
	require.NoError(t, err)
	assert.Equal(t, uint64(64), f.Alignment)
	assert.Zero(t, f.DataOffset%64)
	for _, ti := range f.Tensors {
		assert.Zero(t, ti.Offset%64, ti.Name)
	}
	b, err := f.TensorFloat32("b")
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2, 3, 4, 5}, b)
}

func TestWriterRefusesInconsistentInput(t *testing.T) {
	w := NewWriter()
	require.NoError(t, w.SetKV("k", Scalar(uint32(1))))
	assert.ErrorContains(t, w.SetKV("k", Scalar(uint32(2))), `duplicate key "k"`)
	assert.ErrorContains(t, w.SetKV("", Scalar(uint32(2))), "empty")
	assert.ErrorContains(t, w.SetKV("z", Value{}), "invalid value")
	assert.ErrorContains(t, w.SetKV("n", Arrays(Scalar(uint8(1)))), "element 0 of an array of arrays is a u8")
	assert.ErrorContains(t, w.SetKV(KeyAlignment, Scalar(uint32(48))), "power of two")
	assert.ErrorContains(t, w.SetKV(KeyAlignment, Scalar(uint64(64))), "u32")

	require.NoError(t, w.AddTensor("t", TypeF32, []uint64{2}, make([]byte, 8)))
	assert.ErrorContains(t, w.AddTensor("t", TypeF32, []uint64{2}, make([]byte, 8)), `duplicate tensor "t"`)
	assert.ErrorContains(t, w.AddTensor("u", TypeF32, []uint64{2, 3}, make([]byte, 8)), "needs 24 bytes, got 8")
	assert.ErrorContains(t, w.AddTensor("q", TypeQ8_0, []uint64{33}, make([]byte, 34)), "not a multiple of the Q8_0 block size 32")
	assert.ErrorContains(t, w.AddTensor("z", TypeF32, []uint64{0}, nil), "dimension 0 is 0")
	assert.ErrorContains(t, w.AddTensor("d", TypeF32, []uint64{1, 1, 1, 1, 1}, make([]byte, 4)), "5 dimensions")
	assert.ErrorContains(t, w.AddTensor("x", TensorType(77), []uint64{1}, make([]byte, 4)), "unknown tensor type 77")
	long := string(bytes.Repeat([]byte("n"), MaxTensorName+1))
	assert.ErrorContains(t, w.AddTensor(long, TypeF32, []uint64{1}, make([]byte, 4)), "longer than 64 bytes")
}

func TestWriteFileLeavesNoPartialFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.gguf")
	w := NewWriter()
	require.NoError(t, w.SetKV("general.architecture", Scalar("llama")))
	require.NoError(t, w.AddFloat32("x", TypeF16, []uint64{4}, []float32{1, 2, 3, 4}))
	require.NoError(t, w.WriteFile(path))
	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()
	x, err := f.TensorFloat32("x")
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2, 3, 4}, x)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file is left behind")
	assert.Error(t, w.WriteFile(filepath.Join(dir, "missing-dir", "m.gguf")))
}

// Bytes and WriteTo give the same file, whether a tensor's data was given or
// made by a fill function; a fill's error names its tensor.
func TestWriterBytesAndTensorFunc(t *testing.T) {
	build := func() *Writer {
		w := NewWriter()
		require.NoError(t, w.SetKV("general.architecture", Scalar("llama")))
		require.NoError(t, w.AddFloat32("a", TypeF32, []uint64{3}, []float32{1, 2, 3}))
		for _, name := range []string{"b", "c", "d"} {
			require.NoError(t, w.AddTensorFunc(name, TypeF16, []uint64{32, 5}, func(dst []byte) error {
				assert.Len(t, dst, 32*5*2)
				for i := range dst {
					dst[i] = byte(i*7) + name[0]
				}
				return nil
			}))
		}
		return w
	}
	streamed := writeBytes(t, build())
	laid, err := build().Bytes()
	require.NoError(t, err)
	assert.Equal(t, streamed, laid)
	f, err := Parse(laid)
	require.NoError(t, err)
	d, err := f.TensorData("d")
	require.NoError(t, err)
	assert.Equal(t, byte(7)+'d', d[1])

	w := NewWriter()
	require.NoError(t, w.AddTensorFunc("bad", TypeF32, []uint64{4}, func([]byte) error { return errors.New("no entropy") }))
	_, err = w.Bytes()
	assert.ErrorContains(t, err, `tensor "bad": no entropy`)
	assert.ErrorContains(t, w.AddTensorFunc("x", TypeQ8_0, []uint64{31}, nil), "block size")
}
