package cpu

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
)

// kind is how a matrix is stored for the kernels.
type kind int

const (
	kindQ8   kind = iota // Q8_0: int8 quants, float32 scales; quantized activations
	kindQ4               // Q4_0: 16 nibble bytes per block, float32 scales; quantized activations
	kindF32              // float32 rows
	kindF16              // half rows
	kindRows             // BF16 and ragged rows: each row decoded by mod.Mat.Row, then dotted in float32
	kindK                // a K-quant in the file's blocks (kquant.go); Q8_K activations
	kindL                // Q4_1, Q5_0, Q5_1 in the file's blocks (legacy.go); quantized activations
)

// matrix is a weight matrix [rows][cols] repacked for the kernels: the
// quants of a row contiguous (aligned loads, no scale between blocks) and
// the scales decoded from F16 once, here, instead of in every dot.
type matrix struct {
	name       string
	kind       kind
	rows, cols int
	q8         []int8    // kindQ8: [rows*cols]
	q4         []byte    // kindQ4: [rows*cols/2]
	d          []float32 // kindQ8, kindQ4: [rows*cols/32] block scales
	f32        []float32 // kindF32: [rows*cols]
	f16        []uint16  // kindF16: [rows*cols]
	src        *mod.Mat  // kindRows: decoded a row at a time
	ktype      gguf.TensorType
	raw        []byte    // kindK, kindL: [rows][cols/256 or /32] blocks of ktype, the file's bytes
	i16        *q8i      // kindQ8 on a VNNI CPU: interleaved by 16 rows, q8 and d nil until q8Rows
	rowsOnce   sync.Once // q8Rows
}

// quantized says whether the matrix dots with quantized activations.
func (w *matrix) quantized() bool {
	return w.kind == kindQ8 || w.kind == kindQ4 || w.kind == kindK || w.kind == kindL
}

// newMatrix repacks a weight matrix of mod.
func newMatrix(m *mod.Mat) (*matrix, error) {
	w := &matrix{name: m.Name, rows: m.Rows, cols: m.Cols, kind: kindRows, src: m}
	f32, packed := m.Data()
	le := binary.LittleEndian
	switch {
	case f32 != nil:
		w.kind, w.f32 = kindF32, f32
	case m.Type == gguf.TypeF16:
		w.kind, w.f16 = kindF16, make([]uint16, m.Rows*m.Cols)
		for i := range w.f16 {
			w.f16[i] = le.Uint16(packed[2*i:])
		}
	case m.Type == gguf.TypeQ8_0 || m.Type == gguf.TypeQ4_0:
		if m.Cols%blockLen != 0 {
			return nil, fmt.Errorf("cpu: tensor %q: %d columns are not whole blocks of %d", m.Name, m.Cols, blockLen)
		}
		nb := m.Rows * m.Cols / blockLen
		w.d = make([]float32, nb)
		if m.Type == gguf.TypeQ8_0 { // a block: f16 scale, 32 int8
			w.kind, w.q8 = kindQ8, make([]int8, m.Rows*m.Cols)
			for b := range nb {
				blk := packed[b*34 : b*34+34]
				w.d[b] = f16Table[le.Uint16(blk)]
				for j, v := range blk[2:] {
					w.q8[b*blockLen+j] = int8(v)
				}
			}
		} else { // a block: f16 scale, 16 bytes of two nibbles
			w.kind, w.q4 = kindQ4, make([]byte, m.Rows*m.Cols/2)
			for b := range nb {
				blk := packed[b*18 : b*18+18]
				w.d[b] = f16Table[le.Uint16(blk)]
				copy(w.q4[b*16:], blk[2:])
			}
		}
	case kBlockBytes[m.Type] > 0 && m.Cols%kLen == 0:
		w.kind, w.ktype, w.raw = kindK, m.Type, packed
	case legacyTypes[m.Type].bytes > 0 && m.Cols%blockLen == 0:
		w.kind, w.ktype, w.raw = kindL, m.Type, packed
	}
	w.interleave()
	return w, nil
}

// weights are a model's matrices for the kernels; the vectors (norms,
// routers, predictors) are read from mod's Weights directly.
type weights struct {
	blocks []blockWeights
	output *matrix
}

type blockWeights struct {
	q, k, v, o     *matrix
	gate, up, down *matrix
	predUp         *matrix // routed blocks with a predictor
}

func loadWeights(m *mod.Model) (*weights, error) {
	w := &weights{blocks: make([]blockWeights, len(m.Weights.Blocks))}
	var err error
	mat := func(src *mod.Mat) *matrix {
		if err != nil {
			return nil
		}
		var out *matrix
		out, err = newMatrix(src)
		return out
	}
	// The tied classifier shares the embedding's matrix.
	w.output = mat(&m.Weights.Output)
	for l := range m.Weights.Blocks {
		b := &m.Weights.Blocks[l]
		w.blocks[l] = blockWeights{q: mat(&b.Q), k: mat(&b.K), v: mat(&b.V), o: mat(&b.O),
			gate: mat(&b.Gate), up: mat(&b.Up), down: mat(&b.Down)}
		if b.Router != nil && b.Router.PredUp != nil {
			w.blocks[l].predUp = mat(b.Router.PredUp)
		}
	}
	return w, err
}

// bytes is the memory the matrix's weights take for the kernels: the
// file's bytes for a K-quant kept in its blocks, the repacked arrays
// otherwise (an F32 matrix's decoded floats are mod's, counted once).
func (w *matrix) bytes() int64 {
	switch w.kind {
	case kindK, kindL:
		return int64(len(w.raw))
	case kindQ8:
		n := int64(len(w.q8) + 4*len(w.d))
		if w.i16 != nil {
			n += int64(len(w.i16.q) + 4*len(w.i16.d))
		}
		return n
	case kindQ4:
		return int64(len(w.q4) + 4*len(w.d))
	case kindF32:
		return int64(4 * len(w.f32))
	case kindF16:
		return int64(2 * len(w.f16))
	}
	_, packed := w.src.Data()
	return int64(len(packed))
}

// WeightBytes is the memory the runner's weight matrices take, the token
// embedding included (read a row at a time from the file's bytes): about
// the file's size, since every matrix keeps its file type (Q8_0 and Q4_0
// repacked with float32 scales, 6-11% more; the K-quants, Q4_1, Q5_0 and
// Q5_1 in the file's own blocks).
func (r *Runner) WeightBytes() int64 {
	seen := map[*matrix]bool{}
	var n int64
	add := func(m *matrix) {
		if m != nil && !seen[m] {
			seen[m] = true
			n += m.bytes()
		}
	}
	add(r.w.output)
	for _, b := range r.w.blocks {
		for _, m := range []*matrix{b.q, b.k, b.v, b.o, b.gate, b.up, b.down, b.predUp} {
			add(m)
		}
	}
	// A tied classifier kept in the file's bytes shares them with the embedding.
	f32, packed := r.m.Weights.TokenEmbd.Data()
	_, out := r.m.Weights.Output.Data()
	tied := len(packed) > 0 && len(out) > 0 && &packed[0] == &out[0]
	if k := r.w.output.kind; !tied || (k != kindK && k != kindL && k != kindRows) {
		n += int64(len(packed) + 4*len(f32))
	}
	return n
}
