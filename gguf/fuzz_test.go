package gguf

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

// FuzzRead feeds arbitrary bytes to the parser. It must never panic, and a
// file it accepts must be one the writer accepts too: writing what was read and
// reading it back must reach a fixed point (bytes equal after one rewrite).
func FuzzRead(f *testing.F) {
	for _, c := range malformedCases() {
		f.Add(c.data)
	}
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			return
		}
		for _, ti := range file.Tensors {
			b, err := file.TensorData(ti.Name)
			if err != nil || uint64(len(b)) != ti.Size {
				t.Fatalf("tensor %s: %d bytes, %v", ti.Name, len(b), err)
			}
			if ti.Elements() <= 1<<16 {
				// Types we cannot dequantize give an error; none may panic.
				_ = Dequantize(ti.Type, b, make([]float32, ti.Elements()))
			}
		}
		if file.Alignment*uint64(len(file.Tensors)+1) > 1<<22 {
			return // a rewrite would pad to megabytes; the fuzzer's time is better spent elsewhere
		}
		once := rewrite(t, file)
		again, err := Parse(once)
		if err != nil {
			t.Fatalf("the writer wrote a file the reader refuses: %v", err)
		}
		if twice := rewrite(t, again); !bytes.Equal(once, twice) {
			t.Fatalf("rewriting is not stable: %d bytes, then %d", len(once), len(twice))
		}
	})
}

// rewrite writes every entry and tensor of file with the Writer.
func rewrite(t *testing.T, file *File) []byte {
	w := NewWriter()
	for _, kv := range file.KVs {
		if err := w.SetKV(kv.Key, kv.Value); err != nil {
			t.Fatalf("the reader accepted what the writer refuses: %v", err)
		}
	}
	for _, ti := range file.Tensors {
		b, _ := file.TensorData(ti.Name)
		if err := w.AddTensor(ti.Name, ti.Type, ti.Dims, b); err != nil {
			t.Fatalf("the reader accepted what the writer refuses: %v", err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fuzzSeeds are small valid files: every value type, every tensor type, a
// custom alignment.
func fuzzSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	add := func(w *Writer) {
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, buf.Bytes())
	}
	w := NewWriter()
	for _, kv := range everyValue() {
		if err := w.SetKV(kv.Key, kv.Value); err != nil {
			tb.Fatal(err)
		}
	}
	add(w)
	w = NewWriter()
	must := func(err error) {
		if err != nil {
			tb.Fatal(err)
		}
	}
	must(w.SetKV("general.architecture", Scalar("llama")))
	must(w.SetKV(KeyAlignment, Scalar(uint32(16))))
	vals := make([]float32, 64)
	for i := range vals {
		vals[i] = float32(i) - 20
	}
	for _, typ := range []TensorType{TypeF32, TypeF16, TypeBF16, TypeQ8_0, TypeQ4_0, TypeQ4_1, TypeQ5_0, TypeQ5_1} {
		must(w.AddFloat32("t."+typ.String(), typ, []uint64{32, 2}, vals))
	}
	add(w)
	// One block of each K-quant, its bytes a counting pattern (every bit
	// pattern decodes to some value, so any bytes make a valid block).
	w = NewWriter()
	for _, typ := range []TensorType{TypeQ2_K, TypeQ3_K, TypeQ4_K, TypeQ5_K, TypeQ6_K} {
		blk := make([]byte, typ.BlockBytes())
		for i := range blk {
			blk[i] = byte(i * 37)
		}
		must(w.AddTensor("t."+typ.String(), typ, []uint64{256}, blk))
	}
	add(w)
	return seeds
}

// FuzzQuantize: any float32 values (NaN, infinities, subnormals included)
// quantize to every supported type and decode again without a panic.
func FuzzQuantize(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x7f, 0, 0, 0xc0, 0x7f, 1, 0, 0, 0, 0, 0, 0x80, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		x := make([]float32, 256)
		for i := 0; i < len(x) && 4*i+4 <= len(data); i++ {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		for _, typ := range SupportedTypes {
			b, err := Quantize(typ, x)
			if err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			if err := Dequantize(typ, b, make([]float32, len(x))); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
		}
	})
}
