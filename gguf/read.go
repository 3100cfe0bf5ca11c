package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"unicode/utf8"
)

// Hard limits on what a header may claim. Each is far above what a real model
// file needs and far below what would let a hostile header exhaust memory;
// counts are also checked against the bytes left in the file.
const (
	MaxKeyLen       = 1<<16 - 1 // bytes in a key (the GGUF spec's limit)
	MaxTensorName   = 64        // bytes in a tensor name (GGML_MAX_NAME)
	MaxStringLen    = 1 << 26   // bytes in one string value (64 MiB)
	MaxArrayLen     = 1 << 28   // elements in one array
	MaxArrayDepth   = 8         // nesting of arrays of arrays
	MaxKVs          = 1 << 20   // metadata entries
	MaxTensors      = 1 << 20   // tensor infos
	MaxDims         = 4         // dimensions of a tensor (GGML_MAX_DIMS)
	maxElements     = 1 << 52   // elements in one tensor
	maxAlignment    = 1 << 20   // general.alignment
	minVersion      = 2         // v1 used 32-bit counts and is long gone
	maxVersion      = 3
	minTensorInfoSz = 8 + 4 + 8 + 4 + 8 // empty name, 1 dim, type, offset
)

// ErrMalformed is wrapped by every error about the content of a file.
var ErrMalformed = errors.New("malformed GGUF")

// ErrKeyNotFound is wrapped by the metadata accessors when a key is absent.
var ErrKeyNotFound = errors.New("key not found")

// Open maps the file at path read-only and parses its header. The returned
// File serves tensor data from the mapping until Close.
func Open(path string) (*File, error) {
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	f, err := parse(data, path)
	if err != nil {
		unmap()
		return nil, err
	}
	f.unmap = unmap
	return f, nil
}

// Parse reads a GGUF file held in memory. The File refers to data, which the
// caller must neither modify nor free while using it.
func Parse(data []byte) (*File, error) {
	return parse(data, "<memory>")
}

// decoder is a bounded little-endian cursor over the file's bytes.
type decoder struct {
	path string
	buf  []byte
	off  int
	what string // the item being read, for error messages ("key \"x\"", "tensor 3")
}

func (d *decoder) errorf(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if d.what != "" {
		msg = d.what + ": " + msg
	}
	return fmt.Errorf("gguf: %s: at byte %d: %s: %w", d.path, d.off, msg, ErrMalformed)
}

func (d *decoder) left() int { return len(d.buf) - d.off }

func (d *decoder) take(n int) ([]byte, error) {
	if n < 0 || n > d.left() {
		return nil, d.errorf("file ends: need %d bytes, %d left", n, d.left())
	}
	b := d.buf[d.off : d.off+n]
	d.off += n
	return b, nil
}

func (d *decoder) u32() (uint32, error) {
	b, err := d.take(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (d *decoder) u64() (uint64, error) {
	b, err := d.take(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// count reads a u64 element count and checks it against limit and against the
// bytes left, given that each element takes at least minSize bytes.
func (d *decoder) count(noun string, limit uint64, minSize int) (int, error) {
	at := d.off
	n, err := d.u64()
	if err != nil {
		return 0, err
	}
	if n > limit {
		d.off = at
		return 0, d.errorf("%s count %d exceeds the limit %d", noun, n, limit)
	}
	if left := d.left(); minSize > 0 && n > uint64(left/minSize) {
		d.off = at
		return 0, d.errorf("%s count %d cannot fit in the %d bytes left", noun, n, left)
	}
	return int(n), nil
}

func (d *decoder) str(limit int) (string, error) {
	at := d.off
	n, err := d.u64()
	if err != nil {
		return "", err
	}
	if n > uint64(limit) {
		d.off = at
		return "", d.errorf("string length %d exceeds the limit %d", n, limit)
	}
	b, err := d.take(int(n))
	if err != nil {
		d.off = at
		return "", err
	}
	return string(b), nil
}

func parse(data []byte, path string) (*File, error) {
	d := &decoder{path: path, buf: data, what: "header"}
	magic, err := d.u32()
	if err != nil {
		return nil, err
	}
	if magic != Magic {
		d.off = 0
		return nil, d.errorf("bad magic %q, want \"GGUF\"", data[:4])
	}
	version, err := d.u32()
	if err != nil {
		return nil, err
	}
	if version > maxVersion && version&0xffff == 0 && version>>24 >= minVersion && version>>24 <= maxVersion {
		d.off -= 4
		return nil, d.errorf("big-endian GGUF (version %d byte-swapped) is not supported", version>>24)
	}
	if version < minVersion || version > maxVersion {
		d.off -= 4
		return nil, d.errorf("version %d is not supported (want %d to %d)", version, minVersion, maxVersion)
	}
	nTensors, err := d.count("tensor", MaxTensors, minTensorInfoSz)
	if err != nil {
		return nil, err
	}
	nKV, err := d.count("metadata", MaxKVs, 8+4) // key length + type
	if err != nil {
		return nil, err
	}
	f := &File{Path: path, Version: version, Alignment: DefaultAlignment, data: data,
		kvIndex: make(map[string]int, nKV), tensorIndex: make(map[string]int, nTensors)}
	if err := f.readKVs(d, nKV); err != nil {
		return nil, err
	}
	if err := f.readTensorInfos(d, nTensors); err != nil {
		return nil, err
	}
	if err := f.placeData(d); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *File) readKVs(d *decoder, n int) error {
	f.KVs = make([]KV, 0, n)
	for i := 0; i < n; i++ {
		d.what = fmt.Sprintf("metadata entry %d", i)
		key, err := d.str(MaxKeyLen)
		if err != nil {
			return err
		}
		if key == "" || !utf8.ValidString(key) {
			return d.errorf("key %q is empty or not UTF-8", key)
		}
		if _, dup := f.kvIndex[key]; dup {
			return d.errorf("duplicate key %q", key)
		}
		d.what = fmt.Sprintf("key %q", key)
		typ, err := d.u32()
		if err != nil {
			return err
		}
		v, err := d.value(ValueType(typ), 0)
		if err != nil {
			return err
		}
		f.kvIndex[key] = len(f.KVs)
		f.KVs = append(f.KVs, KV{Key: key, Value: v})
	}
	d.what = ""
	return f.readAlignment(d)
}

func (f *File) readAlignment(d *decoder) error {
	v, ok := f.Lookup(KeyAlignment)
	if !ok {
		return nil
	}
	a, ok := v.x.(uint32)
	if !ok {
		return d.errorf("%s has type %s, want u32", KeyAlignment, v.describeType())
	}
	if a == 0 || a&(a-1) != 0 || a > maxAlignment {
		return d.errorf("%s = %d is not a power of two up to %d", KeyAlignment, a, maxAlignment)
	}
	f.Alignment = uint64(a)
	return nil
}

// value reads one value of type t; depth counts enclosing arrays.
func (d *decoder) value(t ValueType, depth int) (Value, error) {
	if !t.valid() {
		d.off -= 4
		return Value{}, d.errorf("unknown value type %d", uint32(t))
	}
	if t == TypeArray {
		return d.array(depth)
	}
	if t == TypeString {
		s, err := d.str(MaxStringLen)
		return Value{typ: t, x: s}, err
	}
	b, err := d.take(t.size())
	if err != nil {
		return Value{}, err
	}
	if t == TypeBool && b[0] > 1 {
		d.off--
		return Value{}, d.errorf("bool value %d is neither 0 nor 1", b[0])
	}
	return Value{typ: t, x: scalarFrom(t, b)}, nil
}

func scalarFrom(t ValueType, b []byte) any {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return b[0]
	case TypeInt8:
		return int8(b[0])
	case TypeUint16:
		return le.Uint16(b)
	case TypeInt16:
		return int16(le.Uint16(b))
	case TypeUint32:
		return le.Uint32(b)
	case TypeInt32:
		return int32(le.Uint32(b))
	case TypeFloat32:
		return math.Float32frombits(le.Uint32(b))
	case TypeBool:
		return b[0] == 1
	case TypeUint64:
		return le.Uint64(b)
	case TypeInt64:
		return int64(le.Uint64(b))
	case TypeFloat64:
		return math.Float64frombits(le.Uint64(b))
	}
	panic("gguf: scalarFrom called with " + t.String()) // callers pass fixed-size types only
}

func (d *decoder) array(depth int) (Value, error) {
	if depth >= MaxArrayDepth {
		return Value{}, d.errorf("arrays nested deeper than %d", MaxArrayDepth)
	}
	et, err := d.u32()
	if err != nil {
		return Value{}, err
	}
	elem := ValueType(et)
	if !elem.valid() {
		d.off -= 4
		return Value{}, d.errorf("array of unknown value type %d", et)
	}
	n, err := d.count("array element", MaxArrayLen, elem.minSize())
	if err != nil {
		return Value{}, err
	}
	v := Value{typ: TypeArray, elem: elem}
	switch elem {
	case TypeString:
		a := make([]string, n)
		for i := range a {
			if a[i], err = d.str(MaxStringLen); err != nil {
				return Value{}, err
			}
		}
		v.x = a
	case TypeArray:
		a := make([]Value, n)
		for i := range a {
			if a[i], err = d.value(TypeArray, depth+1); err != nil {
				return Value{}, err
			}
		}
		v.x = a
	default:
		b, _ := d.take(n * elem.size()) // count() guaranteed the bytes are there
		if elem == TypeBool {
			for i, c := range b {
				if c > 1 {
					return Value{}, d.errorf("bool element %d is %d, neither 0 nor 1", i, c)
				}
			}
		}
		v.x = scalarSlice(elem, b, n)
	}
	return v, nil
}

// scalarSlice decodes n little-endian values of fixed-size type t into a typed slice.
func scalarSlice(t ValueType, b []byte, n int) any {
	sz := t.size()
	switch t {
	case TypeUint8:
		return append([]uint8(nil), b...)
	case TypeInt8:
		return fill(make([]int8, n), b, sz, func(c []byte) int8 { return int8(c[0]) })
	case TypeUint16:
		return fill(make([]uint16, n), b, sz, binary.LittleEndian.Uint16)
	case TypeInt16:
		return fill(make([]int16, n), b, sz, func(c []byte) int16 { return int16(binary.LittleEndian.Uint16(c)) })
	case TypeUint32:
		return fill(make([]uint32, n), b, sz, binary.LittleEndian.Uint32)
	case TypeInt32:
		return fill(make([]int32, n), b, sz, func(c []byte) int32 { return int32(binary.LittleEndian.Uint32(c)) })
	case TypeFloat32:
		return fill(make([]float32, n), b, sz, func(c []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(c)) })
	case TypeBool:
		return fill(make([]bool, n), b, sz, func(c []byte) bool { return c[0] == 1 })
	case TypeUint64:
		return fill(make([]uint64, n), b, sz, binary.LittleEndian.Uint64)
	case TypeInt64:
		return fill(make([]int64, n), b, sz, func(c []byte) int64 { return int64(binary.LittleEndian.Uint64(c)) })
	case TypeFloat64:
		return fill(make([]float64, n), b, sz, func(c []byte) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(c)) })
	}
	panic("gguf: scalarSlice called with " + t.String()) // callers pass fixed-size types only
}

func fill[T any](dst []T, b []byte, size int, conv func([]byte) T) []T {
	for i := range dst {
		dst[i] = conv(b[i*size:])
	}
	return dst
}

func (f *File) readTensorInfos(d *decoder, n int) error {
	f.Tensors = make([]TensorInfo, 0, n)
	for i := 0; i < n; i++ {
		d.what = fmt.Sprintf("tensor info %d", i)
		name, err := d.str(MaxTensorName)
		if err != nil {
			return err
		}
		if name == "" || !utf8.ValidString(name) {
			return d.errorf("tensor name %q is empty or not UTF-8", name)
		}
		if _, dup := f.tensorIndex[name]; dup {
			return d.errorf("duplicate tensor name %q", name)
		}
		d.what = fmt.Sprintf("tensor %q", name)
		ti, err := d.tensorInfo(name)
		if err != nil {
			return err
		}
		if ti.Offset%f.Alignment != 0 {
			return d.errorf("data offset %d is not a multiple of the alignment %d", ti.Offset, f.Alignment)
		}
		f.tensorIndex[name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, ti)
	}
	d.what = ""
	return nil
}

func (d *decoder) tensorInfo(name string) (TensorInfo, error) {
	nDims, err := d.u32()
	if err != nil {
		return TensorInfo{}, err
	}
	if nDims == 0 || nDims > MaxDims {
		d.off -= 4
		return TensorInfo{}, d.errorf("%d dimensions, want 1 to %d", nDims, MaxDims)
	}
	dims := make([]uint64, nDims)
	for j := range dims {
		if dims[j], err = d.u64(); err != nil {
			return TensorInfo{}, err
		}
	}
	typ, err := d.u32()
	if err != nil {
		return TensorInfo{}, err
	}
	size, err := TensorBytes(TensorType(typ), dims)
	if err != nil {
		d.off -= 4
		return TensorInfo{}, d.errorf("%v", err)
	}
	offset, err := d.u64()
	if err != nil {
		return TensorInfo{}, err
	}
	return TensorInfo{Name: name, Type: TensorType(typ), Dims: dims, Offset: offset, Size: size}, nil
}

// placeData finds the start of the tensor data (the header's end, aligned) and
// checks that every tensor lies inside the file and that no two overlap.
func (f *File) placeData(d *decoder) error {
	start := (uint64(d.off) + f.Alignment - 1) / f.Alignment * f.Alignment
	size := uint64(len(f.data))
	if len(f.Tensors) == 0 {
		f.DataOffset = int64(min(start, size))
		return nil
	}
	if start > size {
		return d.errorf("file ends before its tensor data (which starts at byte %d)", start)
	}
	f.DataOffset = int64(start)
	byOffset := make([]int, len(f.Tensors))
	for i := range byOffset {
		byOffset[i] = i
	}
	sort.Slice(byOffset, func(a, b int) bool { return f.Tensors[byOffset[a]].Offset < f.Tensors[byOffset[b]].Offset })
	var end uint64 // end of the previous tensor, relative to the data section
	for k, i := range byOffset {
		t := f.Tensors[i]
		if t.Offset > size-start || t.Size > size-start-t.Offset {
			return fmt.Errorf("gguf: %s: tensor %q: %d bytes at data offset %d lie past the end of the file (%d bytes): %w",
				f.Path, t.Name, t.Size, t.Offset, size, ErrMalformed)
		}
		if k > 0 && t.Offset < end {
			prev := f.Tensors[byOffset[k-1]].Name
			return fmt.Errorf("gguf: %s: tensor %q (data offset %d) overlaps tensor %q: %w", f.Path, t.Name, t.Offset, prev, ErrMalformed)
		}
		end = t.Offset + t.Size
	}
	return nil
}

// mapFile reads a whole file into a read-only byte slice: a memory mapping
// where the platform has one.
func mapFile(path string) ([]byte, func() error, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s: not a regular file", path)
	}
	if st.Size() < 8 {
		return nil, nil, fmt.Errorf("%s: %d bytes is too short for a GGUF header: %w", path, st.Size(), ErrMalformed)
	}
	if int64(int(st.Size())) != st.Size() {
		return nil, nil, fmt.Errorf("%s: %d bytes does not fit in memory", path, st.Size())
	}
	return mmap(fh, int(st.Size()))
}
