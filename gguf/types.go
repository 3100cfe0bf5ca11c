// Package gguf reads and writes GGUF files (versions 2 and 3), the container
// format of llama.cpp: key-value metadata, tensor infos, then aligned tensor
// data. The reader maps the file into memory and serves tensor bytes from the
// mapping; it never copies the file to the heap and never writes to it.
//
// Format reference: ggml's docs/gguf.md. Every count and length in a header is
// checked against hard limits and against the bytes that remain before anything
// is allocated, so a hostile header cannot make the reader allocate or loop
// beyond the size of the file.
package gguf

import "fmt"

// Magic opens every GGUF file: the bytes "GGUF", read as a little-endian uint32.
const Magic = 0x46554747

// DefaultAlignment is the tensor data alignment when general.alignment is absent.
const DefaultAlignment = 32

// KeyAlignment is the one metadata key the container itself interprets.
const KeyAlignment = "general.alignment"

// ValueType is the type tag of a metadata value, as stored in the file.
type ValueType uint32

const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("ValueType(%d)", uint32(t))
}

func (t ValueType) valid() bool { return t <= TypeFloat64 }

// size is the encoded size of a fixed-size value, or 0 for strings and arrays.
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// minSize is the fewest bytes one encoded value of type t can take: a string is
// at least its 8-byte length, an array at least its 4-byte type and 8-byte count.
func (t ValueType) minSize() int {
	switch t {
	case TypeString:
		return 8
	case TypeArray:
		return 12
	}
	return t.size()
}

// TensorType is ggml's type of a tensor's elements (enum ggml_type).
type TensorType uint32

const (
	TypeF32  TensorType = 0
	TypeF16  TensorType = 1
	TypeQ4_0 TensorType = 2
	TypeQ4_1 TensorType = 3
	TypeQ5_0 TensorType = 6
	TypeQ5_1 TensorType = 7
	TypeQ8_0 TensorType = 8
	TypeQ2_K TensorType = 10
	TypeQ3_K TensorType = 11
	TypeQ4_K TensorType = 12
	TypeQ5_K TensorType = 13
	TypeQ6_K TensorType = 14
	TypeBF16 TensorType = 30
)

// typeTraits describes the storage of one ggml type: elements per block and
// bytes per block. Types we cannot dequantize are still listed, so that files
// using them can be inspected.
type typeTraits struct {
	name       string
	blockSize  int // elements per block
	blockBytes int // bytes per block
}

var tensorTypes = map[TensorType]typeTraits{
	0:  {"F32", 1, 4},
	1:  {"F16", 1, 2},
	2:  {"Q4_0", 32, 18},
	3:  {"Q4_1", 32, 20},
	6:  {"Q5_0", 32, 22},
	7:  {"Q5_1", 32, 24},
	8:  {"Q8_0", 32, 34},
	9:  {"Q8_1", 32, 36},
	10: {"Q2_K", 256, 84},
	11: {"Q3_K", 256, 110},
	12: {"Q4_K", 256, 144},
	13: {"Q5_K", 256, 176},
	14: {"Q6_K", 256, 210},
	15: {"Q8_K", 256, 292},
	16: {"IQ2_XXS", 256, 66},
	17: {"IQ2_XS", 256, 74},
	18: {"IQ3_XXS", 256, 98},
	19: {"IQ1_S", 256, 50},
	20: {"IQ4_NL", 32, 18},
	21: {"IQ3_S", 256, 110},
	22: {"IQ2_S", 256, 82},
	23: {"IQ4_XS", 256, 136},
	24: {"I8", 1, 1},
	25: {"I16", 1, 2},
	26: {"I32", 1, 4},
	27: {"I64", 1, 8},
	28: {"F64", 1, 8},
	29: {"IQ1_M", 256, 56},
	30: {"BF16", 1, 2},
	34: {"TQ1_0", 256, 54},
	35: {"TQ2_0", 256, 66},
	39: {"MXFP4", 32, 17},
}

// Known reports whether t is a ggml type this package knows the layout of.
func (t TensorType) Known() bool { _, ok := tensorTypes[t]; return ok }

func (t TensorType) String() string {
	if tr, ok := tensorTypes[t]; ok {
		return tr.name
	}
	return fmt.Sprintf("TensorType(%d)", uint32(t))
}

// BlockSize is the number of elements in one block (1 for plain types).
func (t TensorType) BlockSize() int { return tensorTypes[t].blockSize }

// BlockBytes is the number of bytes one block takes.
func (t TensorType) BlockBytes() int { return tensorTypes[t].blockBytes }

// ParseTensorType returns the type with the given name ("F32", "Q8_0", ...).
func ParseTensorType(name string) (TensorType, error) {
	for t, tr := range tensorTypes {
		if tr.name == name {
			return t, nil
		}
	}
	return 0, fmt.Errorf("gguf: unknown tensor type name %q", name)
}

// TensorBytes is the storage size of a tensor of type t and shape dims
// (ggml order: dims[0] varies fastest). It fails when the type is unknown,
// dims[0] is not a whole number of blocks, or the size overflows.
func TensorBytes(t TensorType, dims []uint64) (uint64, error) {
	tr, ok := tensorTypes[t]
	if !ok {
		return 0, fmt.Errorf("unknown tensor type %d", uint32(t))
	}
	if len(dims) == 0 || len(dims) > MaxDims {
		return 0, fmt.Errorf("%d dimensions, want 1 to %d", len(dims), MaxDims)
	}
	if dims[0]%uint64(tr.blockSize) != 0 {
		return 0, fmt.Errorf("first dimension %d is not a multiple of the %s block size %d", dims[0], tr.name, tr.blockSize)
	}
	n := uint64(1)
	for i, d := range dims {
		if d == 0 {
			return 0, fmt.Errorf("dimension %d is 0", i)
		}
		if n > maxElements/d {
			return 0, fmt.Errorf("shape %v has more than 2^52 elements", dims)
		}
		n *= d
	}
	return n / uint64(tr.blockSize) * uint64(tr.blockBytes), nil
}
