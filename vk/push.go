package vk

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
)

// PackPush packs a push-constant struct for Dispatch. The struct mirrors a
// GLSL push_constant block whose members are all 4-byte scalars (uint, int,
// float), so the std430 layout is the fields in order, 4 bytes each,
// little-endian. Any other field type is an error: a vec3 or a 64-bit value
// would not land where the shader reads it.
func PackPush(v any) ([]byte, error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Struct {
		return nil, fmt.Errorf("vk: push constants: %T is not a struct", v)
	}
	out := make([]byte, 4*rv.NumField())
	for i := 0; i < rv.NumField(); i++ {
		f := rv.Field(i)
		var u uint32
		switch f.Kind() {
		case reflect.Uint32:
			u = uint32(f.Uint())
		case reflect.Int32:
			u = uint32(int32(f.Int()))
		case reflect.Float32:
			u = math.Float32bits(float32(f.Float()))
		default:
			return nil, fmt.Errorf("vk: push constants: %s.%s is %s, want uint32, int32 or float32",
				rv.Type().Name(), rv.Type().Field(i).Name, f.Type())
		}
		binary.LittleEndian.PutUint32(out[4*i:], u)
	}
	return out, nil
}

// MustPackPush is PackPush for structs known to be valid (a test checks
// every push struct): it panics on an invalid one.
func MustPackPush(v any) []byte {
	b, err := PackPush(v)
	if err != nil {
		panic(err)
	}
	return b
}
