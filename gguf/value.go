package gguf

import (
	"fmt"
	"math"
)

// Value is one metadata value: a scalar, a string, or an array. Arrays hold a
// typed Go slice ([]uint32, []string, ...), or []Value for arrays of arrays.
// The zero Value is invalid; make values with Scalar, Array or Arrays.
type Value struct {
	typ  ValueType
	elem ValueType // element type, for arrays
	x    any
}

// KV is one metadata entry, in file order.
type KV struct {
	Key   string
	Value Value
}

// Scalar makes a single value: an integer, float, bool or string.
func Scalar[T uint8 | int8 | uint16 | int16 | uint32 | int32 | float32 | bool | string | uint64 | int64 | float64](v T) Value {
	return Value{typ: typeOfScalar(v), x: v}
}

// Array makes an array of scalars or strings.
func Array[T uint8 | int8 | uint16 | int16 | uint32 | int32 | float32 | bool | string | uint64 | int64 | float64](v []T) Value {
	var zero T
	return Value{typ: TypeArray, elem: typeOfScalar(zero), x: v}
}

// Arrays makes an array whose elements are themselves arrays. Each element
// must be an array value; the writer refuses anything else.
func Arrays(v ...Value) Value {
	return Value{typ: TypeArray, elem: TypeArray, x: v}
}

func typeOfScalar(v any) ValueType {
	switch v.(type) {
	case uint8:
		return TypeUint8
	case int8:
		return TypeInt8
	case uint16:
		return TypeUint16
	case int16:
		return TypeInt16
	case uint32:
		return TypeUint32
	case int32:
		return TypeInt32
	case float32:
		return TypeFloat32
	case bool:
		return TypeBool
	case string:
		return TypeString
	case uint64:
		return TypeUint64
	case int64:
		return TypeInt64
	case float64:
		return TypeFloat64
	}
	panic(fmt.Sprintf("gguf: no value type for %T", v)) // unreachable: the type parameters above exclude it
}

// Type is the value's type tag.
func (v Value) Type() ValueType { return v.typ }

// ElemType is the element type of an array (meaningless for other values).
func (v Value) ElemType() ValueType { return v.elem }

// Interface returns the Go value: a scalar, a string, a typed slice, or []Value.
func (v Value) Interface() any { return v.x }

// Valid reports whether v was made by a constructor or read from a file.
func (v Value) Valid() bool { return v.x != nil && v.typ.valid() }

// Len is the number of elements of an array, and 0 for anything else.
func (v Value) Len() int {
	if v.typ != TypeArray {
		return 0
	}
	switch a := v.x.(type) {
	case []uint8:
		return len(a)
	case []int8:
		return len(a)
	case []uint16:
		return len(a)
	case []int16:
		return len(a)
	case []uint32:
		return len(a)
	case []int32:
		return len(a)
	case []float32:
		return len(a)
	case []bool:
		return len(a)
	case []string:
		return len(a)
	case []uint64:
		return len(a)
	case []int64:
		return len(a)
	case []float64:
		return len(a)
	case []Value:
		return len(a)
	}
	return 0
}

// Uint returns an integer value of any integer type as uint64, failing for
// negative values and non-integers.
func (v Value) Uint() (uint64, error) {
	switch x := v.x.(type) {
	case uint8:
		return uint64(x), nil
	case uint16:
		return uint64(x), nil
	case uint32:
		return uint64(x), nil
	case uint64:
		return x, nil
	case int8, int16, int32, int64:
		i, _ := v.Int()
		if i < 0 {
			return 0, fmt.Errorf("value %d is negative", i)
		}
		return uint64(i), nil
	}
	return 0, fmt.Errorf("value of type %s is not an integer", v.describeType())
}

// Int returns an integer value of any integer type as int64, failing for
// values above math.MaxInt64 and non-integers.
func (v Value) Int() (int64, error) {
	switch x := v.x.(type) {
	case int8:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint8, uint16, uint32, uint64:
		u, _ := v.Uint()
		if u > math.MaxInt64 {
			return 0, fmt.Errorf("value %d does not fit in int64", u)
		}
		return int64(u), nil
	}
	return 0, fmt.Errorf("value of type %s is not an integer", v.describeType())
}

// Float returns a float value (f32 or f64) as float64.
func (v Value) Float() (float64, error) {
	switch x := v.x.(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	}
	return 0, fmt.Errorf("value of type %s is not a float", v.describeType())
}

// describeType names the type, with the element type for arrays ("array of string").
func (v Value) describeType() string {
	if v.typ == TypeArray {
		return "array of " + v.elem.String()
	}
	return v.typ.String()
}
