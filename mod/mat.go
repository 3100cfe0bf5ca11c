package mod

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/modrun/modrun/gguf"
)

// Mat is a weight tensor seen as Rows rows of Cols elements, kept in its file
// type: F32 is decoded once, the other types stay packed (a view of the file's
// mapping) and are decoded inside the dot product.
type Mat struct {
	Name       string
	Type       gguf.TensorType
	Rows, Cols int
	f32        []float32 // F32 only: [Rows*Cols]
	packed     []byte    // other types: Rows rows of rowBytes
	rowBytes   int
}

// NewMat wraps a tensor's bytes (type t, ggml dims [cols] or [cols, rows]) as
// a Mat: F32 matrices and all vectors are decoded, the others stay packed.
func NewMat(name string, t gguf.TensorType, dims []uint64, data []byte) (Mat, error) {
	m := Mat{Name: name, Type: t, Cols: int(dims[0]), Rows: 1}
	if len(dims) == 2 {
		m.Rows = int(dims[1])
	}
	if !t.Supported() {
		return m, fmt.Errorf("tensor %q: type %s is not supported (%s are)", name, t, gguf.SupportedTypeNames())
	}
	// Whole blocks and the bytes they take: Dot and Row rely on both.
	if want, err := gguf.TensorBytes(t, dims); err != nil {
		return m, fmt.Errorf("tensor %q: %w", name, err)
	} else if uint64(len(data)) != want {
		return m, fmt.Errorf("tensor %q: %d bytes, %s %v takes %d", name, len(data), t, dims, want)
	}
	if t != gguf.TypeF32 && m.Rows > 1 {
		m.packed, m.rowBytes = data, len(data)/m.Rows
		return m, nil
	}
	// F32 matrices and every vector (norms, routers: small) are decoded once.
	m.f32 = make([]float32, m.Rows*m.Cols)
	if err := gguf.Dequantize(t, data, m.f32); err != nil {
		return m, fmt.Errorf("tensor %q: %w", name, err)
	}
	return m, nil
}

// f16Table maps every half to its float32 value: a lookup beats bit fiddling
// in the inner loop.
var f16Table = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = gguf.F16ToF32(uint16(i))
	}
	return &t
}()

// Dot is row i of m dotted with x (len Cols), accumulated in float32 like
// the reference kernels it is checked against.
func (m *Mat) Dot(i int, x []float32) float32 {
	if m.f32 != nil {
		return DotF32(m.f32[i*m.Cols:(i+1)*m.Cols], x)
	}
	row := m.packed[i*m.rowBytes : (i+1)*m.rowBytes]
	var sum float32
	le := binary.LittleEndian
	switch m.Type {
	case gguf.TypeF16:
		for j := range x {
			sum += f16Table[le.Uint16(row[2*j:])] * x[j]
		}
	case gguf.TypeBF16:
		for j := range x {
			sum += math.Float32frombits(uint32(le.Uint16(row[2*j:]))<<16) * x[j]
		}
	case gguf.TypeQ8_0: // blocks of 32: f16 scale, 32 int8
		for b := 0; b < m.Cols/32; b++ {
			blk, xs := row[b*34:b*34+34], x[b*32:b*32+32]
			var s float32
			for j, q := range blk[2:] {
				s += float32(int8(q)) * xs[j]
			}
			sum += f16Table[le.Uint16(blk)] * s
		}
	case gguf.TypeQ4_0: // blocks of 32: f16 scale, 16 bytes of two nibbles
		for b := 0; b < m.Cols/32; b++ {
			blk, xs := row[b*18:b*18+18], x[b*32:b*32+32]
			var s float32
			for j, q := range blk[2:] {
				s += float32(int(q&0x0f)-8)*xs[j] + float32(int(q>>4)-8)*xs[j+16]
			}
			sum += f16Table[le.Uint16(blk)] * s
		}
	default: // the other quantized types: each block decoded by gguf, then dotted
		var buf [256]float32 // the largest block (K-quants: 256 elements)
		bs, bb := m.Type.BlockSize(), m.Type.BlockBytes()
		for b := 0; b < m.Cols/bs; b++ {
			m.decode(i, row[b*bb:(b+1)*bb], buf[:bs])
			sum += DotF32(buf[:bs], x[b*bs:(b+1)*bs])
		}
	}
	return sum
}

// decode dequantizes one block of row i. The type and length were checked at
// load, so gguf cannot fail here.
func (m *Mat) decode(i int, blk []byte, dst []float32) {
	if err := gguf.Dequantize(m.Type, blk, dst); err != nil {
		panic(fmt.Sprintf("mod: tensor %q row %d: %v", m.Name, i, err))
	}
}

// Row decodes row i into dst (len Cols).
func (m *Mat) Row(i int, dst []float32) {
	if m.f32 != nil {
		copy(dst, m.f32[i*m.Cols:(i+1)*m.Cols])
		return
	}
	m.decode(i, m.packed[i*m.rowBytes:(i+1)*m.rowBytes], dst)
}

// Vec returns a vector's values (norm weights, router vectors), decoded at load.
func (m *Mat) Vec() []float32 { return m.f32 }

// Data is the tensor as stored for the GPU to upload: the decoded float32
// values (F32 tensors and every vector), or else the packed rows in the
// file's type (F16, Q8_0, ...: Rows rows of ggml blocks). Exactly one is
// non-nil. Callers must not modify either.
func (m *Mat) Data() (f32 []float32, packed []byte) { return m.f32, m.packed }

// DotF32 is a·b summed in four lanes, then (s0+s1)+(s2+s3): the order the
// reference and the fast CPU runner's Go path share, so they agree bit for
// bit.
func DotF32(a, b []float32) float32 {
	var s0, s1, s2, s3 float32
	n := len(a) &^ 3
	for j := 0; j < n; j += 4 {
		s0 += a[j] * b[j]
		s1 += a[j+1] * b[j+1]
		s2 += a[j+2] * b[j+2]
		s3 += a[j+3] * b[j+3]
	}
	for j := n; j < len(a); j++ {
		s0 += a[j] * b[j]
	}
	return (s0 + s1) + (s2 + s3)
}

// MatMul computes out[s][i] = W.row(i) · x[s] for n tokens: x is [n][W.Cols],
// out is [n][W.Rows]. Each worker takes a range of rows and reuses each weight
// row for every token.
func MatMul(out, x []float32, w *Mat, n int) {
	parallelFor(w.Rows, w.Rows*w.Cols*n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			for s := 0; s < n; s++ {
				out[s*w.Rows+i] = w.Dot(i, x[s*w.Cols:(s+1)*w.Cols])
			}
		}
	})
}

// minParallelWork is the work (multiply-adds) below which starting
// goroutines costs more than it saves.
const minParallelWork = 1 << 15

// parallelFor calls fn on ranges that cover [0, n), one per CPU, when the
// work (an estimate of multiply-adds) is large enough; else fn(0, n).
func parallelFor(n, work int, fn func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 || work < minParallelWork {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += chunk {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			fn(lo, hi)
		}(lo, min(lo+chunk, n))
	}
	wg.Wait()
}
