package vulkan

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// The model's weights on the GPU, uploaded once, device-local, each matrix
// in its file type, in the device layout of shaders.WeightTypes (the
// quantized types repacked at upload), which the decode step's matvec, the
// batched graph's matmul and the embedding lookup all read. Weight types are
// the shaders table's rows, found by their ggml name: nothing here names
// one, so a new type touches shaders.WeightTypes (and its reader in the
// kernels), not the engine.

// weights are every tensor the step reads.
type weights struct {
	tokenEmbd  mat        // [nVocab][nEmbd]
	outputNorm *vk.Buffer // [nEmbd] f32
	output     mat        // [nVocab][nEmbd]; tokenEmbd's buffer when tied
	blocks     []block    // [nLayer]
	ropeFreq   *vk.Buffer // [headDim/2][2] u32: shaders.RopeFreqs of mod.RopeFrequencies, read by every rope site
}

// block is one transformer block's tensors.
type block struct {
	attnNorm, ffnNorm *vk.Buffer // [nEmbd] f32
	qkv               stack      // q [qDim], k [kvDim], v [kvDim] from the normed input
	o                 mat        // [nEmbd][qDim]
	gateUp            stack      // gate [nFF], up [nFF]
	down              mat        // [nEmbd][nFF]
	router            *router    // routed blocks only
}

// router is a routed block's router and, when trained, its predictor (F32).
type router struct {
	w, bias          *vk.Buffer // [nEmbd], [1] (bias: any buffer when absent)
	hasBias          bool
	predUp, predDown *vk.Buffer // [predHidden][nEmbd], [predHidden]; nil without an MLP predictor
	predHidden       uint32
	pred, predBias   *vk.Buffer // a linear predictor (mod.PredictorLinear): [nEmbd], [1]; nil otherwise
}

// mat is a weight matrix with the matvec kernel of its type.
type mat struct {
	name       string
	buf        *vk.Buffer     // [rows] rows in the type's device layout (shaders.MatvecBytes); pieces[0].buf
	mx         shaders.Matrix // its device layout: type, row size, matmul and embed variants
	typ        string         // mx.Type.Name, shaders.MatvecTypes: the kernel variants' suffix
	mv         *kernel
	rows, cols uint32
	// pieces are the matrix's row ranges, each in its own buffer: one, or
	// several when the matrix is over the device's maxStorageBufferRange
	// (lavapipe: 128 MiB, less than a 7B model's Q8_0 token_embd), so that
	// each binds whole.
	pieces []piece
}

// piece is rows [row0, row0+rows) of a matrix in a buffer of their own,
// laid out as a matrix of those rows.
type piece struct {
	buf        *vk.Buffer
	row0, rows uint32
}

// ops is y[yOff:] = W x for one token: a matvec per piece, each writing its
// rows' outputs.
func (m mat) ops(x, y *vk.Buffer, yOff uint64) []op {
	return m.fusedOps(m.mv, shaders.FuseNone, x, y, yOff, nil, 0)
}

// fusedOps is ops with matvec kernel k of fusion fuse (shaders.MatvecFusions):
// y[yOff:] += W x (FuseAdd), y[yOff:] = W rmsnorm(x, normw, eps)
// (FuseNorm), or, for a single-piece stack of gate and up of equal rows,
// y[yOff:] = silu(Wg xn) * (Wu xn) (FuseNormSwiGLU, m.rows/2 outputs).
func (m mat) fusedOps(k *kernel, fuse string, x, y *vk.Buffer, yOff uint64, normw *vk.Buffer, eps float32) []op {
	var ops []op
	for _, pc := range m.pieces {
		rows := pc.rows
		if fuse == shaders.FuseNormSwiGLU {
			rows /= 2
		}
		out := wr(y, yOff+4*uint64(pc.row0), 4*uint64(rows))
		if fuse == shaders.FuseAdd {
			out.Access = vk.ReadWrite
		}
		binds := []vk.Bind{rd(pc.buf, 0, 0), rd(x, 0, 4*uint64(m.cols)), out}
		if fuse == shaders.FuseNorm || fuse == shaders.FuseNormSwiGLU {
			binds = append(binds, rd(normw, 0, 4*uint64(m.cols)))
		}
		ops = append(ops, newOp(k, shaders.MatvecPush{Rows: rows, Cols: m.cols, N: 1, Eps: eps}, shaders.MatvecGroups(rows, k.spec), binds...))
	}
	return ops
}

// stack is matrices applied to one input whose outputs lie side by side in
// one buffer. When they share a type (and, if asked, each output starts on a
// binding-aligned offset) their rows are uploaded stacked and one matvec
// computes them all: one dispatch instead of several, the first cost on
// every device (DESIGN.md §6). Else each has its matvec, its output at an
// aligned offset.
type stack struct {
	mvs   []mat
	mvOff []uint64 // byte offset of each matvec's output
	part  []uint64 // byte offset of each matrix's output
	bytes uint64   // size of the output buffer
}

func (s stack) ops(x, y *vk.Buffer) []op {
	var ops []op
	for i, m := range s.mvs {
		ops = append(ops, m.ops(x, y, s.mvOff[i])...)
	}
	return ops
}

// uploadWeights uploads every tensor of w.
func (r *Runner) uploadWeights(w *mod.Weights, c mod.Config) error {
	var err error
	g := &r.w
	if g.tokenEmbd, err = r.uploadMat(&w.TokenEmbd); err != nil {
		return err
	}
	if w.Output.Name == w.TokenEmbd.Name {
		g.output = g.tokenEmbd // tied classifier: one copy
	} else if g.output, err = r.uploadMat(&w.Output); err != nil {
		return err
	}
	if g.outputNorm, err = r.uploadVec(&w.OutputNorm); err != nil {
		return err
	}
	if g.ropeFreq, err = r.upload("rope frequencies", u32Bytes(shaders.RopeFreqs(mod.RopeFrequencies(c, w.RopeFactors())))); err != nil {
		return err
	}
	g.blocks = make([]block, len(w.Blocks))
	for l := range w.Blocks {
		if err := r.uploadBlock(&g.blocks[l], &w.Blocks[l]); err != nil {
			return err
		}
	}
	return nil
}

func (r *Runner) uploadBlock(g *block, b *mod.Block) error {
	var err error
	if g.attnNorm, err = r.uploadVec(&b.AttnNorm); err != nil {
		return err
	}
	if g.ffnNorm, err = r.uploadVec(&b.FFNNorm); err != nil {
		return err
	}
	// decode_kv finds k and v by element offset, so q, k, v need not be
	// aligned; swiglu binds gate and up, so they must.
	if g.qkv, err = r.uploadStack(false, &b.Q, &b.K, &b.V); err != nil {
		return err
	}
	if g.gateUp, err = r.uploadStack(true, &b.Gate, &b.Up); err != nil {
		return err
	}
	if g.o, err = r.uploadMat(&b.O); err != nil {
		return err
	}
	if g.down, err = r.uploadMat(&b.Down); err != nil {
		return err
	}
	if b.Router == nil {
		return nil
	}
	rt := &router{hasBias: b.Router.Bias.Cols > 0}
	if rt.w, err = r.uploadVec(&b.Router.Weight); err != nil {
		return err
	}
	rt.bias = rt.w // bound but not read when there is no bias
	if rt.hasBias {
		if rt.bias, err = r.uploadVec(&b.Router.Bias); err != nil {
			return err
		}
	}
	if b.Router.PredUp != nil {
		rt.predHidden = uint32(b.Router.PredUp.Rows)
		if rt.predUp, err = r.uploadVec(b.Router.PredUp); err != nil {
			return err
		}
		if rt.predDown, err = r.uploadVec(b.Router.PredDown); err != nil {
			return err
		}
	}
	if b.Router.Pred != nil {
		if rt.pred, err = r.uploadVec(b.Router.Pred); err != nil {
			return err
		}
		if rt.predBias, err = r.uploadVec(b.Router.PredBias); err != nil {
			return err
		}
	}
	g.router = rt
	return nil
}

// matBytes is m's data in the file's layout (F32 for every type the
// loader decodes), and how the device holds it (shaders.DeviceMatrix).
func matBytes(m *mod.Mat) ([]byte, shaders.Matrix, error) {
	data, ggml := deviceInput(m)
	mx, err := shaders.DeviceMatrix(ggml, m.Rows, m.Cols)
	if err != nil {
		return nil, mx, fmt.Errorf("vulkan: tensor %q: %w", m.Name, err)
	}
	return data, mx, nil
}

// deviceInput is m's bytes as the upload takes them, and their ggml type:
// the file's, or F32 for a tensor the loader decoded.
func deviceInput(m *mod.Mat) ([]byte, string) {
	f, packed := m.Data()
	if f != nil {
		return f32Bytes(f), "F32"
	}
	return packed, m.Type.String()
}

func (r *Runner) uploadMat(m *mod.Mat) (mat, error) {
	data, mx, err := matBytes(m)
	if err != nil {
		return mat{}, err
	}
	return r.newMat(m.Name, mx, data)
}

// newMat uploads a matrix of the file's bytes data in its type's device
// layout (shaders.MatvecBytes: Q8_0 and Q4_0 split into quants and scales
// so that loads are 16-byte aligned, the other quantized types in the
// sub-block layout), which matmul and embed read too. A matrix over the
// device's maxStorageBufferRange is uploaded in pieces of whole rows
// (pieceRows), each a matrix of its own.
func (r *Runner) newMat(name string, mx shaders.Matrix, data []byte) (mat, error) {
	rows, cols := mx.Rows, mx.Cols
	mv, err := r.ks.matvec(mx.Type.Name, shaders.FuseNone, cols)
	if err != nil {
		return mat{}, err
	}
	m := mat{name: name, mx: mx, typ: mx.Type.Name, mv: mv, rows: uint32(rows), cols: uint32(cols)}
	rowBytes := len(data) / rows // in the file
	per, err := r.pieceRows(mx.RowBytes, rows)
	if err != nil {
		return mat{}, fmt.Errorf("vulkan: tensor %q: %w", name, err)
	}
	for row0 := 0; row0 < rows; row0 += per {
		n := min(per, rows-row0)
		part := data[row0*rowBytes : (row0+n)*rowBytes]
		if part, err = mx.Bytes(part, n); err != nil {
			return mat{}, fmt.Errorf("vulkan: tensor %q: %w", name, err)
		}
		pieceName := name
		if per < rows {
			pieceName = fmt.Sprintf("%s rows [%d, %d)", name, row0, row0+n)
		}
		buf, err := r.upload(pieceName, part)
		if err != nil {
			return mat{}, err
		}
		m.pieces = append(m.pieces, piece{buf: buf, row0: uint32(row0), rows: uint32(n)})
	}
	m.buf = m.pieces[0].buf
	return m, nil
}

// pieceRows is how many rows of rowBytes each (on the device:
// shaders.RowBytes) go in one piece of a matrix of rows: all of them when they fit in a binding (the profile's
// MaxStorageBufferRange), else the most that do, a multiple of the rows
// whose outputs fill minStorageBufferOffsetAlignment (each piece's matvec
// binds its slice of y at an aligned offset).
func (r *Runner) pieceRows(rowBytes, rows int) (int, error) {
	limit := r.ks.prof.MaxStorageBufferRange
	step := alignedStep(r.dev.Info().Limits.MinStorageBufferOffsetAlignment, 4) // y's f32 outputs
	per, ok := splitRows(limit, rows, uint64(rowBytes), step)
	if !ok {
		return 0, fmt.Errorf("%d rows of %d bytes: not %d of them fit in maxStorageBufferRange %d", rows, rowBytes, step, limit)
	}
	return per, nil
}

// embedOps are the embedding lookup of the n tokens in tok into out
// [n][cols]: a dispatch per piece of the table, each writing the rows of
// the tokens in its range.
func (m mat) embedOps(k *kernel, tok, out *vk.Buffer, n int) []op {
	var ops []op
	for _, pc := range m.pieces {
		ops = append(ops, newOp(k, shaders.EmbedPush{Cols: m.cols, N: uint32(n), RowBase: pc.row0, Rows: pc.rows}, shaders.Groups(uint32(n)),
			rd(pc.buf, 0, 0), rd(tok, 0, 4*uint64(n)), wr(out, 0, 4*uint64(n)*uint64(m.cols))))
	}
	return ops
}

// embedKernel is the embed variant that reads m's layout.
func (m mat) embedKernel() string { return m.mx.Embed }

// uploadStack uploads ms (same columns) as a stack.
func (r *Runner) uploadStack(aligned bool, ms ...*mod.Mat) (stack, error) {
	align := r.dev.Info().Limits.MinStorageBufferOffsetAlignment
	var s stack
	var datas [][]byte
	fuse := true
	var ggml0 string
	var off uint64
	for i, m := range ms {
		data, mx, err := matBytes(m)
		if err != nil {
			return s, err
		}
		if i == 0 {
			ggml0 = mx.Type.GGML
		}
		fuse = fuse && mx.Type.GGML == ggml0 && (!aligned || off%align == 0)
		datas = append(datas, data)
		s.part = append(s.part, off)
		off += 4 * uint64(m.Rows)
	}
	if fuse {
		var all []byte
		rows := 0
		for i, d := range datas {
			all = append(all, d...)
			rows += ms[i].Rows
		}
		mx, err := shaders.DeviceMatrix(ggml0, rows, ms[0].Cols)
		if err != nil {
			return s, fmt.Errorf("vulkan: tensor %q: %w", ms[0].Name+"+", err)
		}
		m, err := r.newMat(ms[0].Name+"+", mx, all)
		if err != nil {
			return s, err
		}
		s.mvs, s.mvOff, s.bytes = []mat{m}, []uint64{0}, off
		return s, nil
	}
	s.part, off = nil, 0
	for _, m := range ms {
		off = (off + align - 1) / align * align
		g, err := r.uploadMat(m)
		if err != nil {
			return s, err
		}
		s.mvs, s.mvOff, s.part = append(s.mvs, g), append(s.mvOff, off), append(s.part, off)
		off += 4 * uint64(m.Rows)
	}
	s.bytes = off
	return s, nil
}

// uploadVec uploads an F32 vector or small matrix (norms, routers: decoded
// at load).
func (r *Runner) uploadVec(m *mod.Mat) (*vk.Buffer, error) {
	f, _ := m.Data()
	if f == nil {
		return nil, fmt.Errorf("vulkan: tensor %q: want F32 data, it is %s", m.Name, m.Type)
	}
	return r.upload(m.Name, f32Bytes(f))
}

// upload makes a device-local buffer holding data.
func (r *Runner) upload(name string, data []byte) (*vk.Buffer, error) {
	if lim := r.ks.prof.MaxStorageBufferRange; lim > 0 && uint64(len(data)) > lim {
		return nil, fmt.Errorf("vulkan: tensor %q is %d bytes, over the device's maxStorageBufferRange %d: binding a tensor in pieces is not implemented yet",
			name, len(data), lim)
	}
	b, err := r.buffer(uint64(len(data)), vk.DeviceLocal)
	if err != nil {
		return nil, fmt.Errorf("vulkan: tensor %q: %w", name, err)
	}
	if err := b.Upload(data, 0); err != nil {
		return nil, fmt.Errorf("vulkan: tensor %q: %w", name, err)
	}
	return b, nil
}

// buffer makes a buffer that Close frees.
func (r *Runner) buffer(bytes uint64, kind vk.BufferKind) (*vk.Buffer, error) {
	b, err := r.dev.NewBuffer(bytes, kind)
	if err != nil {
		return nil, err
	}
	r.bufs = append(r.bufs, b)
	return b, nil
}

// freeBuffer frees a buffer that buffer made before Close.
func (r *Runner) freeBuffer(b *vk.Buffer) {
	if i := slices.Index(r.bufs, b); i >= 0 {
		r.bufs = slices.Delete(r.bufs, i, i+1)
	}
	b.Close()
}

// allocator makes the runner's buffers one after another (r.buffer),
// keeping the first error: after it buf returns nil, and err says what
// failed, so a run of allocations is checked once.
type allocator struct {
	r   *Runner
	err error
}

func (a *allocator) buf(size uint64, kind vk.BufferKind) *vk.Buffer {
	if a.err != nil {
		return nil
	}
	b, err := a.r.buffer(size, kind)
	a.err = err
	return b
}

func f32Bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func u32Bytes(x []uint32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}
