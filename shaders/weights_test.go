package shaders

import (
	"encoding/binary"
	"math/rand"
	"testing"

	"github.com/modrun/modrun/gguf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// subblockValue decodes value e of a matrix of elems values in the sub-block
// layout of f, from the layout's description in RepackSubblock (not from the
// code that writes it), in float32 as ggml: (d*sc)*(q-zero) - dmin*m.
func subblockValue(f subblockFormat, b []byte, elems, e int) float32 {
	low, high, scales, _ := subblockPlanes(f, elems)
	g, i := e/32, e%32
	var q uint32
	if f.bits >= 4 {
		q = uint32(b[16*g+i%16]>>(4*(i/16))) & 15
	} else {
		q = uint32(b[8*g+i%8]>>(2*(i/8))) & 3
	}
	lowBits := 4
	if f.bits < 4 {
		lowBits = 2
	}
	hiWords := f.bits - lowBits
	// Words a group in the high plane, and the byte of the value's scale.
	hiStride, scale := hiWords, low+high+2*(e/f.sub)
	if f.bits == 3 && f.sub == 16 {
		// Q3_K: a group's high word, then its scale word.
		hiStride, scale = 2, low+4*(2*g+1)+2*(i/16)
	}
	for h := 0; h < hiWords; h++ {
		word := binary.LittleEndian.Uint32(b[low+4*(g*hiStride+h):])
		q |= (word >> (8*(i%4) + i/4) & 1) << (lowBits + h)
	}
	sc := int8(b[scale])
	m := b[scale+1]
	sup := binary.LittleEndian.Uint32(b[low+high+scales+4*(e/f.super):])
	d, dmin := gguf.F16ToF32(uint16(sup)), gguf.F16ToF32(uint16(sup>>16))
	dl, ml := d*float32(sc), dmin*float32(m)
	return float32(dl*float32(int(q)-f.zero)) - ml
}

// TestRepackSubblock: every sub-block type, repacked, decodes to exactly
// gguf.Dequantize's values (ggml's), on the host: the layout and its
// arithmetic are exact before any kernel reads them.
func TestRepackSubblock(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for _, wt := range WeightTypes {
		typ := ggmlType(t, wt.GGML)
		f, ok := subblockOf[wt.Name]
		if !ok {
			continue
		}
		rows, cols := 3, 2*typ.BlockSize()
		src := make([]float32, rows*cols)
		for i := range src {
			src[i] = float32(rng.NormFloat64()) * float32(1+i%7)
		}
		src[5] = 0
		g, err := gguf.Quantize(typ, src)
		require.NoError(t, err)
		want := make([]float32, len(src))
		require.NoError(t, gguf.Dequantize(typ, g, want))
		b, err := MatvecBytes(wt.Name, g, rows, cols)
		require.NoError(t, err, wt.GGML)
		low, high, scales, supers := subblockPlanes(f, len(src))
		require.Len(t, b, low+high+scales+supers, wt.GGML)
		perRow, err := RowBytes(wt.Name, cols)
		require.NoError(t, err)
		for n := 1; n <= rows; n++ {
			got, err := MatvecBytes(wt.Name, g[:n*len(g)/rows], n, cols)
			require.NoError(t, err)
			assert.LessOrEqual(t, len(got), n*perRow, "%s: %d rows within RowBytes", wt.GGML, n)
		}
		for e := range want {
			if got := subblockValue(f, b, len(src), e); got != want[e] {
				t.Errorf("%s value %d: %g, gguf.Dequantize %g", wt.GGML, e, got, want[e])
				break
			}
		}
	}
}

func ggmlType(t *testing.T, name string) gguf.TensorType {
	for _, typ := range gguf.SupportedTypes {
		if typ.String() == name {
			return typ
		}
	}
	t.Fatalf("gguf has no type %s", name)
	return 0
}

// TestWeightTypes: the table covers every type gguf decodes, its blocks
// agree with gguf's, and bad data is an error naming the type.
func TestWeightTypes(t *testing.T) {
	for _, typ := range gguf.SupportedTypes {
		wt, ok := WeightForGGML(typ.String())
		require.True(t, ok, "%s has no GPU weight type", typ)
		assert.Equal(t, typ.BlockSize(), wt.Block, typ.String())
		assert.Equal(t, typ.BlockBytes(), wt.BlockBytes, typ.String())
		for _, name := range []string{MatvecName(wt.Name, ReduceShared), MatmulName(wt.Name), EmbedName(wt.Name)} {
			_, err := Lookup(name)
			assert.NoError(t, err, typ.String())
		}
		if typ.BlockSize() > 1 {
			_, err := MatvecBytes(wt.Name, make([]byte, typ.BlockBytes()), 1, typ.BlockSize()/2)
			assert.ErrorContains(t, err, typ.String(), "a row that is not whole blocks")
		}
		_, err := MatvecBytes(wt.Name, make([]byte, typ.BlockBytes()-1), 1, typ.BlockSize())
		assert.ErrorContains(t, err, typ.String(), "short data")
	}
	_, err := MatvecBytes("q9_9", nil, 1, 1)
	assert.Error(t, err)
}

// DeviceMatrix is the one answer for a matrix: its kernels' type, a row's
// device size (RowBytes), its matmul and embed variants (which exist), and
// Bytes is MatvecBytes of its type; a type without kernels or a ragged row
// is refused, naming the type.
func TestDeviceMatrix(t *testing.T) {
	for _, wt := range WeightTypes {
		cols := 4 * 256
		mx, err := DeviceMatrix(wt.GGML, 3, cols)
		require.NoError(t, err, wt.GGML)
		assert.Equal(t, wt.Name, mx.Type.Name)
		rb, err := RowBytes(wt.Name, cols)
		require.NoError(t, err)
		assert.Equal(t, rb, mx.RowBytes, wt.GGML)
		assert.Equal(t, uint64(3*rb), mx.DeviceBytes())
		for _, name := range []string{mx.Matmul, mx.Embed} {
			_, err := Lookup(name)
			assert.NoError(t, err, "%s: %s", wt.GGML, name)
		}
		data := make([]byte, 3*cols/wt.Block*wt.BlockBytes)
		got, err := mx.Bytes(data, 3)
		require.NoError(t, err)
		want, err := MatvecBytes(wt.Name, data, 3, cols)
		require.NoError(t, err)
		assert.Equal(t, want, got, wt.GGML)
		assert.LessOrEqual(t, len(got), 3*mx.RowBytes, "%s: RowBytes bounds the layout", wt.GGML)
	}
	_, err := DeviceMatrix("IQ4_XS", 3, 256)
	assert.ErrorContains(t, err, "type IQ4_XS has no GPU kernel (F32, ")
	_, err = DeviceMatrix("Q4_K", 3, 300)
	assert.ErrorContains(t, err, "Q4_K with 300 columns, not a multiple of its block of 256")
}
