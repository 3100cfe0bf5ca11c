package gguf

import (
	"fmt"
	"strings"
)

// File is a parsed GGUF file. Tensor data is served from the file's memory
// mapping, so slices returned by TensorData are valid only until Close.
type File struct {
	Path       string
	Version    uint32
	Alignment  uint64       // of the tensor data section and of each tensor in it
	KVs        []KV         // metadata in file order
	Tensors    []TensorInfo // tensor infos in file order
	DataOffset int64        // byte offset of the tensor data section

	data        []byte // the whole file
	unmap       func() error
	kvIndex     map[string]int
	tensorIndex map[string]int
}

// TensorInfo describes one tensor. Dims are in ggml order: Dims[0] is the
// number of elements in a row (contiguous), Dims[1] the number of rows.
type TensorInfo struct {
	Name   string
	Type   TensorType
	Dims   []uint64
	Offset uint64 // relative to the data section
	Size   uint64 // bytes
}

// Elements is the number of elements in the tensor.
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Close releases the file's memory mapping. Tensor data slices must not be
// used afterwards.
func (f *File) Close() error {
	if f.unmap == nil {
		return nil
	}
	err := f.unmap()
	f.unmap, f.data = nil, nil
	if err != nil {
		return fmt.Errorf("gguf: %s: unmap: %w", f.Path, err)
	}
	return nil
}

// Size is the size of the file in bytes.
func (f *File) Size() int64 { return int64(len(f.data)) }

// Lookup returns the value of key.
func (f *File) Lookup(key string) (Value, bool) {
	i, ok := f.kvIndex[key]
	if !ok {
		return Value{}, false
	}
	return f.KVs[i].Value, true
}

// Has reports whether key is present.
func (f *File) Has(key string) bool { _, ok := f.kvIndex[key]; return ok }

// Architecture is general.architecture, or "" when absent.
func (f *File) Architecture() string {
	s, _ := f.String("general.architecture")
	return s
}

func (f *File) get(key string) (Value, error) {
	v, ok := f.Lookup(key)
	if !ok {
		return Value{}, fmt.Errorf("gguf: %s: %q: %w", f.Path, key, ErrKeyNotFound)
	}
	return v, nil
}

func (f *File) wrongType(key string, v Value, want string) error {
	return fmt.Errorf("gguf: %s: %q has type %s, want %s", f.Path, key, v.describeType(), want)
}

// String returns a string value.
func (f *File) String(key string) (string, error) {
	v, err := f.get(key)
	if err != nil {
		return "", err
	}
	s, ok := v.x.(string)
	if !ok {
		return "", f.wrongType(key, v, "string")
	}
	return s, nil
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, error) {
	v, err := f.get(key)
	if err != nil {
		return false, err
	}
	b, ok := v.x.(bool)
	if !ok {
		return false, f.wrongType(key, v, "bool")
	}
	return b, nil
}

// Uint returns an integer value of any integer type that is not negative.
func (f *File) Uint(key string) (uint64, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	u, err := v.Uint()
	if err != nil {
		return 0, fmt.Errorf("gguf: %s: %q: %w", f.Path, key, err)
	}
	return u, nil
}

// Float returns an f32 or f64 value as float64.
func (f *File) Float(key string) (float64, error) {
	v, err := f.get(key)
	if err != nil {
		return 0, err
	}
	x, err := v.Float()
	if err != nil {
		return 0, fmt.Errorf("gguf: %s: %q: %w", f.Path, key, err)
	}
	return x, nil
}

// Strings returns an array of strings.
func (f *File) Strings(key string) ([]string, error) { return arrayOf[string](f, key) }

// Float32s returns an array of f32.
func (f *File) Float32s(key string) ([]float32, error) { return arrayOf[float32](f, key) }

// Int32s returns an array of i32.
func (f *File) Int32s(key string) ([]int32, error) { return arrayOf[int32](f, key) }

// Uint32s returns an array of u32.
func (f *File) Uint32s(key string) ([]uint32, error) { return arrayOf[uint32](f, key) }

func arrayOf[T any](f *File, key string) ([]T, error) {
	v, err := f.get(key)
	if err != nil {
		return nil, err
	}
	a, ok := v.x.([]T)
	if !ok || v.typ != TypeArray {
		var zero T
		return nil, f.wrongType(key, v, "array of "+typeOfScalar(zero).String())
	}
	return a, nil
}

// Tensor returns the info of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.tensorIndex[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// TensorData returns the named tensor's bytes, a read-only view of the mapping.
func (f *File) TensorData(name string) ([]byte, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("gguf: %s: no tensor %q", f.Path, name)
	}
	if f.data == nil {
		return nil, fmt.Errorf("gguf: %s: tensor %q: file is closed", f.Path, name)
	}
	start := uint64(f.DataOffset) + t.Offset
	return f.data[start : start+t.Size : start+t.Size], nil
}

// TensorFloat32 dequantizes the named tensor into a new []float32.
func (f *File) TensorFloat32(name string) ([]float32, error) {
	b, err := f.TensorData(name)
	if err != nil {
		return nil, err
	}
	t, _ := f.Tensor(name)
	out := make([]float32, t.Elements())
	if err := Dequantize(t.Type, b, out); err != nil {
		return nil, fmt.Errorf("gguf: %s: tensor %q: %w", f.Path, name, err)
	}
	return out, nil
}

// KeysWithPrefix returns the metadata entries whose key starts with prefix, in file order.
func (f *File) KeysWithPrefix(prefix string) []KV {
	var out []KV
	for _, kv := range f.KVs {
		if strings.HasPrefix(kv.Key, prefix) {
			out = append(out, kv)
		}
	}
	return out
}
