package gguf

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unicode/utf8"
)

// Writer builds a GGUF v3 file. It checks each entry as it is added and writes
// metadata and tensors in the order they were added, so the same calls always
// give the same bytes.
type Writer struct {
	kvs       []KV
	tensors   []writerTensor
	keys      map[string]bool
	names     map[string]bool
	alignment uint64
}

type writerTensor struct {
	info TensorInfo
	data []byte
	fill func(dst []byte) error // AddTensorFunc: makes the data at write time
}

// NewWriter returns an empty Writer.
func NewWriter() *Writer {
	return &Writer{keys: map[string]bool{}, names: map[string]bool{}, alignment: DefaultAlignment}
}

// SetKV adds a metadata entry. A duplicate key, an invalid value, or a
// general.alignment that is not a u32 power of two is an error.
func (w *Writer) SetKV(key string, v Value) error {
	if key == "" || len(key) > MaxKeyLen || !utf8.ValidString(key) {
		return fmt.Errorf("gguf: writer: key %q: empty, longer than %d bytes, or not UTF-8", key, MaxKeyLen)
	}
	if w.keys[key] {
		return fmt.Errorf("gguf: writer: duplicate key %q", key)
	}
	if err := checkValue(v, 0); err != nil {
		return fmt.Errorf("gguf: writer: key %q: %w", key, err)
	}
	if key == KeyAlignment {
		a, ok := v.x.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 || a > maxAlignment {
			return fmt.Errorf("gguf: writer: %s must be a u32 power of two up to %d", KeyAlignment, maxAlignment)
		}
		w.alignment = uint64(a)
	}
	w.keys[key] = true
	w.kvs = append(w.kvs, KV{Key: key, Value: v})
	return nil
}

func checkValue(v Value, depth int) error {
	if !v.Valid() {
		return fmt.Errorf("invalid value (use gguf.Scalar, gguf.Array or gguf.Arrays)")
	}
	if v.typ != TypeArray {
		if s, ok := v.x.(string); ok && len(s) > MaxStringLen {
			return fmt.Errorf("string of %d bytes exceeds the limit %d", len(s), MaxStringLen)
		}
		return nil
	}
	if depth+1 >= MaxArrayDepth {
		return fmt.Errorf("arrays nested deeper than %d", MaxArrayDepth)
	}
	if v.Len() > MaxArrayLen {
		return fmt.Errorf("array of %d elements exceeds the limit %d", v.Len(), MaxArrayLen)
	}
	switch a := v.x.(type) {
	case []Value:
		for i, e := range a {
			if e.typ != TypeArray {
				return fmt.Errorf("element %d of an array of arrays is a %s", i, e.typ)
			}
			if err := checkValue(e, depth+1); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
		}
	case []string:
		for i, s := range a {
			if len(s) > MaxStringLen {
				return fmt.Errorf("element %d: string of %d bytes exceeds the limit %d", i, len(s), MaxStringLen)
			}
		}
	}
	return nil
}

// AddTensor adds a tensor of type t and shape dims (ggml order, dims[0]
// contiguous) whose bytes are data. The data is referenced, not copied, until
// the file is written.
func (w *Writer) AddTensor(name string, t TensorType, dims []uint64, data []byte) error {
	info, err := w.newTensor(name, t, dims)
	if err != nil {
		return err
	}
	if uint64(len(data)) != info.Size {
		return fmt.Errorf("gguf: writer: tensor %q: %s %v needs %d bytes, got %d", name, t, dims, info.Size, len(data))
	}
	w.names[name] = true
	w.tensors = append(w.tensors, writerTensor{info: info, data: data})
	return nil
}

// AddTensorFunc adds a tensor whose bytes fill makes when the file is
// written, into a zeroed slice of exactly the tensor's size. A model too
// large to hold twice in memory (random weights of a 7B shape) is then made
// in place: Bytes lets fill write straight into the file's buffer. fill may
// run on another goroutine, concurrently with other tensors' fills.
func (w *Writer) AddTensorFunc(name string, t TensorType, dims []uint64, fill func(dst []byte) error) error {
	info, err := w.newTensor(name, t, dims)
	if err != nil {
		return err
	}
	w.names[name] = true
	w.tensors = append(w.tensors, writerTensor{info: info, fill: fill})
	return nil
}

// newTensor checks a tensor's name, type and shape and sizes it.
func (w *Writer) newTensor(name string, t TensorType, dims []uint64) (TensorInfo, error) {
	if name == "" || len(name) > MaxTensorName || !utf8.ValidString(name) {
		return TensorInfo{}, fmt.Errorf("gguf: writer: tensor name %q: empty, longer than %d bytes, or not UTF-8", name, MaxTensorName)
	}
	if w.names[name] {
		return TensorInfo{}, fmt.Errorf("gguf: writer: duplicate tensor %q", name)
	}
	if len(w.tensors) >= MaxTensors {
		return TensorInfo{}, fmt.Errorf("gguf: writer: tensor %q: more than %d tensors", name, MaxTensors)
	}
	size, err := TensorBytes(t, dims)
	if err != nil {
		return TensorInfo{}, fmt.Errorf("gguf: writer: tensor %q: %w", name, err)
	}
	return TensorInfo{Name: name, Type: t, Dims: append([]uint64(nil), dims...), Size: size}, nil
}

// AddFloat32 quantizes values to type t and adds them as a tensor.
func (w *Writer) AddFloat32(name string, t TensorType, dims []uint64, values []float32) error {
	data, err := Quantize(t, values)
	if err != nil {
		return fmt.Errorf("gguf: writer: tensor %q: %w", name, err)
	}
	return w.AddTensor(name, t, dims, data)
}

// WriteTo writes the file: header, metadata, tensor infos, then the tensor
// data, each tensor at a multiple of the alignment.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	e := &encoder{w: bufio.NewWriterSize(out, 1<<20)}
	w.header(e)
	for _, t := range w.tensors {
		data := t.data
		if t.fill != nil {
			data = make([]byte, t.info.Size)
			if err := t.fill(data); err != nil {
				return e.n, fmt.Errorf("gguf: writer: tensor %q: %w", t.info.Name, err)
			}
		}
		e.bytes(data)
		e.pad(w.alignment)
	}
	if e.err == nil {
		e.err = e.w.Flush()
	}
	return e.n, e.err
}

// Bytes lays the whole file out in one slice, the same bytes WriteTo
// writes. Tensors go straight into their place, the fills of AddTensorFunc
// running in parallel (one per CPU), so the file is made without a second
// copy of its data.
func (w *Writer) Bytes() ([]byte, error) {
	var head bytes.Buffer
	e := &encoder{w: bufio.NewWriter(&head)}
	w.header(e)
	if e.err == nil {
		e.err = e.w.Flush()
	}
	if e.err != nil {
		return nil, e.err
	}
	offsets := make([]uint64, len(w.tensors))
	size := uint64(head.Len())
	for i, t := range w.tensors {
		offsets[i] = size
		size = alignUp(size+t.info.Size, w.alignment)
	}
	out := make([]byte, size)
	copy(out, head.Bytes())
	errs := make([]error, len(w.tensors))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, t := range w.tensors {
		dst := out[offsets[i] : offsets[i]+t.info.Size]
		if t.fill == nil {
			copy(dst, t.data)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := t.fill(dst); err != nil {
				errs[i] = fmt.Errorf("gguf: writer: tensor %q: %w", t.info.Name, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// DataBytes is the size of the tensor data the file will hold, padding
// included: nearly all of the file, known before any tensor is made.
func (w *Writer) DataBytes() uint64 {
	var n uint64
	for _, t := range w.tensors {
		n = alignUp(n+t.info.Size, w.alignment)
	}
	return n
}

// header writes everything before the tensor data: the magic, the
// metadata and the tensor infos, padded to the alignment.
func (w *Writer) header(e *encoder) {
	e.u32(Magic)
	e.u32(maxVersion)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.typ))
		e.value(kv.Value)
	}
	var offset uint64
	for _, t := range w.tensors {
		e.str(t.info.Name)
		e.u32(uint32(len(t.info.Dims)))
		for _, d := range t.info.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.info.Type))
		e.u64(offset)
		offset = alignUp(offset+t.info.Size, w.alignment)
	}
	e.pad(w.alignment)
}

// WriteFile writes the file to path through a temporary file in the same
// folder, so a failed write never leaves a partial file at path.
func (w *Writer) WriteFile(path string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("gguf: writer: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := w.WriteTo(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("gguf: writer: %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil { // CreateTemp makes 0600; a model file is for everyone to read
		tmp.Close()
		return fmt.Errorf("gguf: writer: %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("gguf: writer: %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("gguf: writer: %w", err)
	}
	return nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// encoder writes little-endian values and remembers the first error and the
// number of bytes written.
type encoder struct {
	w   *bufio.Writer
	n   int64
	err error
	buf [8]byte
}

func (e *encoder) bytes(b []byte) {
	if e.err != nil {
		return
	}
	var n int
	n, e.err = e.w.Write(b)
	e.n += int64(n)
}

func (e *encoder) u32(v uint32) { binary.LittleEndian.PutUint32(e.buf[:], v); e.bytes(e.buf[:4]) }
func (e *encoder) u64(v uint64) { binary.LittleEndian.PutUint64(e.buf[:], v); e.bytes(e.buf[:8]) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.bytes([]byte(s)) }

func (e *encoder) pad(a uint64) {
	if n := alignUp(uint64(e.n), a) - uint64(e.n); n > 0 {
		e.bytes(make([]byte, n))
	}
}

func (e *encoder) value(v Value) {
	switch x := v.x.(type) {
	case string:
		e.str(x)
	case []Value:
		e.u32(uint32(TypeArray))
		e.u64(uint64(len(x)))
		for _, a := range x {
			e.value(a)
		}
	default:
		if v.typ == TypeArray {
			e.u32(uint32(v.elem))
			e.u64(uint64(v.Len()))
		}
		e.scalars(v.x)
	}
}

// scalars writes a scalar or a typed slice of scalars.
func (e *encoder) scalars(x any) {
	switch a := x.(type) {
	case uint8:
		e.bytes([]byte{a})
	case int8:
		e.bytes([]byte{byte(a)})
	case bool:
		e.bytes([]byte{boolByte(a)})
	case uint16:
		binary.LittleEndian.PutUint16(e.buf[:], a)
		e.bytes(e.buf[:2])
	case int16:
		e.scalars(uint16(a))
	case uint32:
		e.u32(a)
	case int32:
		e.u32(uint32(a))
	case float32:
		e.u32(math.Float32bits(a))
	case uint64:
		e.u64(a)
	case int64:
		e.u64(uint64(a))
	case float64:
		e.u64(math.Float64bits(a))
	case []uint8:
		e.bytes(a)
	case []string:
		for _, s := range a {
			e.str(s)
		}
	default:
		each(x, e.scalars)
	}
}

// each calls fn on every element of a typed slice of scalars.
func each(x any, fn func(any)) {
	switch a := x.(type) {
	case []int8:
		eachOf(a, fn)
	case []bool:
		eachOf(a, fn)
	case []uint16:
		eachOf(a, fn)
	case []int16:
		eachOf(a, fn)
	case []uint32:
		eachOf(a, fn)
	case []int32:
		eachOf(a, fn)
	case []float32:
		eachOf(a, fn)
	case []uint64:
		eachOf(a, fn)
	case []int64:
		eachOf(a, fn)
	case []float64:
		eachOf(a, fn)
	default:
		panic(fmt.Sprintf("gguf: writer: unexpected value %T", x)) // checkValue admits no other type
	}
}

func eachOf[T any](a []T, fn func(any)) {
	for _, v := range a {
		fn(v)
	}
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
