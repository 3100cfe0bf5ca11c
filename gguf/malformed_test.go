package gguf

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modrun/modrun/internal/shared"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// raw writes GGUF bytes by hand, so a test can say exactly what a header claims.
type raw struct{ bytes.Buffer }

func (r *raw) u32(v uint32) *raw { binary.Write(&r.Buffer, binary.LittleEndian, v); return r }
func (r *raw) u64(v uint64) *raw { binary.Write(&r.Buffer, binary.LittleEndian, v); return r }
func (r *raw) str(s string) *raw { r.u64(uint64(len(s))); r.WriteString(s); return r }
func header(nTensors, nKV uint64) *raw {
	r := &raw{}
	return r.u32(Magic).u32(3).u64(nTensors).u64(nKV)
}

type malformedCase struct {
	name string
	data []byte
	want string // in the error message
}

// malformedCases are hand-built headers, each wrong in one way. FuzzRead uses
// them as seeds too.
func malformedCases() []malformedCase {
	return []malformedCase{
		{"empty", nil, "file ends: need 4 bytes, 0 left"},
		{"bad magic", []byte("GGML\x03\x00\x00\x00"), `bad magic "GGML"`},
		{"version 1", (&raw{}).u32(Magic).u32(1).Bytes(), "version 1 is not supported"},
		{"version 4", (&raw{}).u32(Magic).u32(4).Bytes(), "version 4 is not supported"},
		{"big-endian", (&raw{}).u32(Magic).u32(3 << 24).Bytes(), "big-endian GGUF (version 3 byte-swapped)"},
		{"2^40 tensors", header(1<<40, 0).Bytes(), "tensor count 1099511627776 exceeds the limit"},
		{"tensors beyond the file", header(1000, 0).Bytes(), "tensor count 1000 cannot fit in the 8 bytes left"},
		{"2^50-byte string", header(0, 1).str("k").u32(uint32(TypeString)).u64(1 << 50).Bytes(), `key "k": string length 1125899906842624 exceeds the limit`},
		{"string past the end", header(0, 1).str("k").u32(uint32(TypeString)).u64(100).Bytes(), `key "k": file ends: need 100 bytes, 0 left`},
		{"2^40-element array", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint32)).u64(1 << 40).Bytes(), `key "k": array element count 1099511627776 exceeds the limit`},
		{"array beyond the file", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint32)).u64(1000).Bytes(), "array element count 1000 cannot fit in the 0 bytes left"},
		{"unknown value type", header(0, 1).str("k").u32(13).Bytes(), `key "k": unknown value type 13`},
		{"array of unknown type", header(0, 1).str("k").u32(uint32(TypeArray)).u32(99).u64(0).Bytes(), "array of unknown value type 99"},
		{"bool 2", append(header(0, 1).str("k").u32(uint32(TypeBool)).Bytes(), 2), "bool value 2 is neither 0 nor 1"},
		{"empty key", header(0, 1).str("").u32(uint32(TypeUint8)).Bytes(), "key \"\" is empty"},
		{"duplicate key", header(0, 2).str("k").u32(uint32(TypeUint32)).u32(1).str("k").u32(uint32(TypeUint32)).u32(1).Bytes(), `duplicate key "k"`},
		{"alignment not a power of two", header(0, 1).str(KeyAlignment).u32(uint32(TypeUint32)).u32(48).Bytes(), "general.alignment = 48 is not a power of two"},
		{"alignment of the wrong type", header(0, 1).str(KeyAlignment).u32(uint32(TypeUint64)).u64(32).Bytes(), "general.alignment has type u64, want u32"},
		{"five dimensions", append(header(1, 0).str("w").u32(5).Bytes(), make([]byte, 64)...), `tensor "w": 5 dimensions, want 1 to 4`},
		{"zero dimension", header(1, 0).str("w").u32(1).u64(0).u32(0).u64(0).Bytes(), `tensor "w": dimension 0 is 0`},
		{"unknown tensor type", header(1, 0).str("w").u32(1).u64(4).u32(77).u64(0).Bytes(), `tensor "w": unknown tensor type 77`},
		{"ragged quant block", header(1, 0).str("w").u32(1).u64(33).u32(uint32(TypeQ8_0)).u64(0).Bytes(), `tensor "w": first dimension 33 is not a multiple of the Q8_0 block size 32`},
		{"element count overflow", header(1, 0).str("w").u32(4).u64(1 << 20).u64(1 << 20).u64(1 << 20).u64(1 << 20).u32(0).u64(0).Bytes(), "more than 2^52 elements"},
		{"misaligned offset", header(1, 0).str("w").u32(1).u64(4).u32(0).u64(3).Bytes(), `tensor "w": data offset 3 is not a multiple of the alignment 32`},
		{"name too long", header(1, 0).str(strings.Repeat("n", 65)).Bytes(), "string length 65 exceeds the limit 64"},
		{"duplicate tensor", header(2, 0).str("w").u32(1).u64(4).u32(0).u64(0).str("w").u32(1).u64(4).u32(0).u64(32).Bytes(), `duplicate tensor name "w"`},
		{"data past the end", header(1, 0).str("w").u32(1).u64(4).u32(0).u64(0).Bytes(), "file ends before its tensor data"},
	}
}

func TestMalformedHeaders(t *testing.T) {
	for _, c := range malformedCases() {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.data)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrMalformed)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestTensorPlacement(t *testing.T) {
	// Two tensors of 16 bytes; header padded to 32, then 64 bytes of data.
	build := func(off0, off1 uint64, dataBytes int) []byte {
		r := header(2, 0).str("a").u32(1).u64(4).u32(0).u64(off0).str("b").u32(1).u64(4).u32(0).u64(off1)
		for r.Len()%32 != 0 {
			r.WriteByte(0)
		}
		r.Write(make([]byte, dataBytes))
		return r.Bytes()
	}
	_, err := Parse(build(0, 32, 48))
	require.NoError(t, err, "well placed")
	_, err = Parse(build(0, 0, 64))
	assert.ErrorContains(t, err, `tensor "b" (data offset 0) overlaps tensor "a"`)
	_, err = Parse(build(0, 32, 40))
	assert.ErrorContains(t, err, `tensor "b": 16 bytes at data offset 32 lie past the end of the file`)
	_, err = Parse(build(0, 1<<63, 64))
	assert.ErrorContains(t, err, "lie past the end of the file", "a huge offset does not overflow")
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(filepath.Join(dir, "absent.gguf"))
	assert.ErrorContains(t, err, "absent.gguf")
	_, err = Open(dir)
	assert.ErrorContains(t, err, "not a regular file")
	empty := filepath.Join(dir, "empty.gguf")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	_, err = Open(empty)
	assert.ErrorContains(t, err, "empty.gguf: 0 bytes is too short for a GGUF header")
}

func TestStories260K(t *testing.T) {
	path := shared.Path(t, "models/stories260K.gguf")
	before := fileHash(t, path)
	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()

	assert.Equal(t, "llama", f.Architecture())
	require.Len(t, f.Tensors, 48)
	shapes := map[string][]uint64{
		"token_embd.weight": {64, 512}, "output.weight": {64, 512}, "output_norm.weight": {64},
		"blk.0.attn_q.weight": {64, 64}, "blk.0.attn_k.weight": {64, 32}, "blk.0.attn_v.weight": {64, 32},
		"blk.4.ffn_gate.weight": {64, 172}, "blk.4.ffn_down.weight": {172, 64}, "blk.4.ffn_norm.weight": {64},
	}
	for name, dims := range shapes {
		ti, ok := f.Tensor(name)
		require.True(t, ok, name)
		assert.Equal(t, dims, ti.Dims, name)
	}
	for _, ti := range f.Tensors {
		assert.Equal(t, TypeF32, ti.Type, ti.Name)
	}
	n, err := f.Uint("llama.block_count")
	require.NoError(t, err)
	assert.Equal(t, uint64(5), n)
	tokens, err := f.Strings("tokenizer.ggml.tokens")
	require.NoError(t, err)
	assert.Len(t, tokens, 512)
	// The tied classifier is stored twice in this file, bit for bit.
	emb, err := f.TensorData("token_embd.weight")
	require.NoError(t, err)
	out, err := f.TensorData("output.weight")
	require.NoError(t, err)
	assert.Equal(t, emb, out)
	require.NoError(t, f.Close())
	assert.Equal(t, before, fileHash(t, path), "reading never modifies the file")
}

// TestStories260KTruncatedAndFlipped cuts the real file at 50 offsets and
// flips each header byte: every cut is an error that says where it failed,
// and nothing panics.
func TestStories260KTruncatedAndFlipped(t *testing.T) {
	data, err := os.ReadFile(shared.Path(t, "models/stories260K.gguf"))
	require.NoError(t, err)
	full, err := Parse(data)
	require.NoError(t, err)
	headerEnd := int(full.DataOffset)

	// 40 cuts spread through the header (where the structure is), 10 through the data.
	var cuts []int
	for i := 0; i < 40; i++ {
		cuts = append(cuts, i*headerEnd/40)
	}
	for i := 0; i < 10; i++ {
		cuts = append(cuts, headerEnd+1+i*(len(data)-headerEnd-2)/9)
	}
	for _, n := range cuts {
		_, err := Parse(data[:n])
		require.Error(t, err, "cut at %d", n)
		assert.ErrorIs(t, err, ErrMalformed)
		msg := err.Error()
		if n < headerEnd-32 { // within the header proper: the message gives the byte offset
			assert.Contains(t, msg, "at byte", "cut at %d: %s", n, msg)
		} else {
			assert.True(t, strings.Contains(msg, "tensor") || strings.Contains(msg, "file ends"), "cut at %d: %s", n, msg)
		}
	}

	flipped := make([]byte, len(data))
	var failures int
	for i := 0; i < headerEnd; i++ {
		copy(flipped, data)
		flipped[i] ^= 0xff
		f, err := Parse(flipped)
		if err != nil {
			failures++
			assert.Contains(t, err.Error(), "gguf: <memory>", "flip at %d: %v", i, err)
			continue
		}
		// A flip in a value's payload (a score, a token's text) can leave a
		// valid file; it must still serve every tensor without panicking.
		for _, ti := range f.Tensors {
			b, err := f.TensorData(ti.Name)
			assert.NoError(t, err, "flip at %d: tensor %s", i, ti.Name)
			assert.Len(t, b, int(ti.Size))
		}
	}
	assert.Greater(t, failures, 1000, "most flips of structural bytes are caught")
}

func fileHash(t *testing.T, path string) [32]byte {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return sha256.Sum256(b)
}
