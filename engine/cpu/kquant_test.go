package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/mod/quant"
	"github.com/modrun/modrun/mod/synth"
)

// kTypes are the K-quants dotted natively.
var kTypes = []gguf.TensorType{gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K}

// kRows quantizes rows×cols random weights to type t with gguf (real
// blocks: scales, mins and quants as llama.cpp's quantizer spreads them)
// and returns the blocks and gguf's dequantization of them.
func kRows(t *testing.T, g *rand.Rand, typ gguf.TensorType, rows, cols int) ([]byte, []float32) {
	t.Helper()
	w := randF32(g, rows*cols)
	for i := range w {
		w[i] *= float32(1 + i/cols%3) // rows of different magnitudes
	}
	raw, err := gguf.Quantize(typ, w)
	require.NoError(t, err)
	deq := make([]float32, rows*cols)
	require.NoError(t, gguf.Dequantize(typ, raw, deq))
	return raw, deq
}

// kWant is the reference for a K-quant product: gguf's dequantized row
// dotted in float64 with the activations' Q8_K values (q·d), and the sum
// of the terms' magnitudes that the float32 rounding is relative to.
func kWant(w []float32, q []int8, d []float32) (want, scale float64) {
	for i, v := range w {
		p := float64(v) * float64(q[i]) * float64(d[i/kLen])
		want += p
		scale += math.Abs(p)
	}
	return want, scale
}

// The K-quant dot products, on every path, equal gguf's dequantization
// dotted with the Q8_K activations, over 1, 3 and 5 blocks: the integer
// sums are exact, so only float32 rounding of a few products per block
// remains (relative 1e-6 of Σ|terms|; a wrong quant, scale or min moves a
// product by far more).
func TestKDot(t *testing.T) {
	g := rand.New(rand.NewPCG(21, 22))
	kernelPaths(t, func(t *testing.T) {
		for _, typ := range kTypes {
			for _, nk := range []int{1, 3, 5} {
				cols := nk * kLen
				raw, deq := kRows(t, g, typ, 1, cols)
				x := randF32(g, cols)
				x[7] = 40 // one large activation: its block's others quantize coarsely
				q, d, bs := make([]int8, cols), make([]float32, nk), make([]int16, cols/16)
				quantizeK(q, d, bs, x)
				want, scale := kWant(deq, q, d)
				got := dotK(typ, raw, q, d, bs)
				assert.InDelta(t, want, float64(got), 1e-6*scale, "%s %d blocks", typ, nk)
			}
		}
	})
}

// quantizeK, on every path, rounds each element to the nearest step of
// its block's max|x|/127 (both paths give the same bytes), its sums are
// those of its quants, and a block holding a NaN gets a NaN scale.
func TestQuantizeK(t *testing.T) {
	g := rand.New(rand.NewPCG(23, 24))
	kernelPaths(t, func(t *testing.T) {
		x := randF32(g, 3*kLen)
		clear(x[kLen : 2*kLen])
		q, d, bs := make([]int8, len(x)), make([]float32, 3), make([]int16, len(x)/16)
		quantizeK(q, d, bs, x)
		qGo, dGo, bsGo := make([]int8, len(x)), make([]float32, 3), make([]int16, len(x)/16)
		quantizeKGo(qGo, dGo, bsGo, x)
		assert.Equal(t, qGo, q)
		assert.Equal(t, dGo, d)
		var amax float32
		for _, v := range x[:kLen] {
			amax = max(amax, v, -v)
		}
		require.InDelta(t, amax/127, d[0], 1e-9)
		assert.Zero(t, d[1])
		for i, v := range x {
			assert.InDelta(t, v, float32(q[i])*d[i/kLen], float64(d[i/kLen])/2+1e-7, "element %d", i)
		}
		for gi := range bs {
			var s int16
			for _, v := range q[16*gi : 16*gi+16] {
				s += int16(v)
			}
			require.Equal(t, s, bs[gi], "group %d", gi)
		}
		x[2*kLen+3] = float32(math.NaN())
		quantizeK(q, d, bs, x)
		assert.True(t, math.IsNaN(float64(d[2])), "a NaN block's scale is NaN")
		assert.False(t, math.IsNaN(float64(d[0])), "the block before it is finite")
	})
}

// matmul of K-quant matrices, on every path: kTileMin tokens or more with
// VNNI take the tile kernel on rows packed four at a time (kTileRun), the
// rest dotK. Every element equals the reference of TestKDot, for token
// counts below and around kTileMin and the four-token groups, past a
// tokenTile and past kTileTokens (a second packing), and row counts that
// leave a remainder of the four-row groups.
func TestMatmulK(t *testing.T) {
	g := rand.New(rand.NewPCG(25, 26))
	r := &Runner{pool: newPool(2)}
	kernelPaths(t, func(t *testing.T) {
		for _, typ := range kTypes {
			rows, cols := 2*rowGrain+6, 3*kLen
			raw, deq := kRows(t, g, typ, rows, cols)
			w := &matrix{name: typ.String(), kind: kindK, ktype: typ, rows: rows, cols: cols, raw: raw}
			for _, n := range []int{1, 3, 4, 7, kTileMin, kTileMin + 3, tokenTile + 6, kTileTokens(cols) + 6} {
				x := &acts{}
				x.set(randF32(g, n*cols), n, cols)
				out := make([]float32, n*rows)
				r.matmul(out, x, w)
				nk := cols / kLen
				for s := range n {
					for i := range rows {
						want, scale := kWant(deq[i*cols:(i+1)*cols], x.kq[s*cols:(s+1)*cols], x.kd[s*nk:(s+1)*nk])
						require.InDelta(t, want, float64(out[s*rows+i]), 1e-6*scale, fmt.Sprintf("%s %d tokens row %d token %d", typ, n, i, s))
					}
				}
			}
		}
	})
}

// The prompt's tile kernel, on every path (the Go twin where there is no
// VNNI), for every K-quant type, over 1, 3 and 5 super-blocks and two
// groups of four tokens, Q2_K's, Q3_K's and Q4_K's also narrow (KNARROW):
// each of its row-token products of rows packed by kPack and tokens
// rearranged by prepareTile, written at its token's stride, equals the
// reference of TestKDot.
func TestKTile(t *testing.T) {
	var b ktBlock
	require.Equal(t, []uintptr{ktQ, ktSc, ktMin, ktD, ktDm, ktSB},
		[]uintptr{unsafe.Offsetof(b.q), unsafe.Offsetof(b.sc), unsafe.Offsetof(b.min), unsafe.Offsetof(b.d), unsafe.Offsetof(b.dm), unsafe.Sizeof(b)},
		"the kernel's offsets are ktBlock's")
	g := rand.New(rand.NewPCG(31, 32))
	kernelPaths(t, func(t *testing.T) {
		for _, typ := range kTypes {
			for _, nk := range []int{1, 3, 5} {
				cols := nk * kLen
				raw, deq := kRows(t, g, typ, 4, cols)
				w := &matrix{name: typ.String(), kind: kindK, ktype: typ, rows: 4, cols: cols, raw: raw}
				f := randF32(g, 8*cols)
				f[cols+9] = -50 // one large activation in token 1
				x := &acts{}
				x.set(f, 8, cols)
				x.quantizeK(newPool(1), true)
				buf := make([]byte, nk*ktSB)
				kPack(w, 0, buf)
				for _, narrow := range []bool{false, kNarrow(typ)} {
					const ostride = 6 // rows of out: a stride other than the tile's
					out := make([]float32, 8*ostride)
					kTileRun(buf, x.kqT, cols, x.ktab, nk, 2, narrow, out, ostride)
					for r := range 4 {
						for s := range 8 {
							want, scale := kWant(deq[r*cols:(r+1)*cols], x.kq[s*cols:(s+1)*cols], x.kd[s*nk:(s+1)*nk])
							assert.InDelta(t, want, float64(out[s*ostride+r]), 1e-6*scale, "%s %d blocks narrow %v row %d token %d", typ, nk, narrow, r, s)
						}
					}
				}
			}
		}
	})
}

// A 2048×2048 matrix's product with one token (decode) and with 128 (a
// prompt), per K-quant type and Q8_0 for comparison; bytes/s counts the
// weight bytes.
func BenchmarkMatmulK(b *testing.B) {
	benchMatmul(b, 27, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ6_K, gguf.TypeQ5_K)
}

// kShape is a synthetic shape whose widths are whole K-quant blocks (tiny's
// 128 are not, so there the K-quants are requantized), with GQA and MoD.
var kShape = synth.Shape{Name: "kshape", NEmbd: 256, NLayer: 4, NHead: 4, NKVHead: 2, NFF: 512, NVocab: 512, ContextLen: 128}

// K-quant matrices stay in the file's bytes (the matrix holds the file's
// own slice: resident weights are the file's size), and models of those
// types and of llama.cpp's Q4_K_M, Q5_K_M, Q2_K and Q3_K_M mixes give the
// reference's greedy tokens and its logits within QuantizedRelTol, on
// every kernel path, batched prompts (the tile kernel) and decode alike.
func TestKMatrix(t *testing.T) {
	for _, typ := range kTypes {
		raw, _ := kRows(t, rand.New(rand.NewPCG(29, 30)), typ, 3, 512)
		m, err := mod.NewMat("w", typ, []uint64{512, 3}, raw)
		require.NoError(t, err)
		w, err := newMatrix(&m)
		require.NoError(t, err)
		assert.Equal(t, kindK, w.kind, typ.String())
		_, packed := m.Data()
		assert.Same(t, &packed[0], &w.raw[0], "%s: the file's bytes, not a copy", typ)
	}
	var models []namedModel
	for _, scheme := range []string{"q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m", "q2_k", "q3_k_m"} {
		s, err := quant.Parse(scheme)
		require.NoError(t, err)
		for _, capacity := range []float32{0, 0.25} {
			m, err := synth.Build(kShape, synth.Options{Scheme: s, Seed: 7, Capacity: capacity})
			require.NoError(t, err)
			t.Cleanup(func() { m.Close() })
			models = append(models, namedModel{fmt.Sprintf("%s capacity %g", scheme, capacity), m})
		}
	}
	lockstepModels(t, models, kindK)
}

// namedModel is a synthetic model and the name its checks print.
type namedModel struct {
	name string
	m    *synth.Model
}

// lockstepModels checks each model on every kernel path: its matrices
// take the kernels of kind want (block 0's up projection stands for
// them), and the runner gives the reference's greedy tokens and its logits
// within QuantizedRelTol (lockstep, 12 steps after prompt).
func lockstepModels(t *testing.T, models []namedModel, want kind) {
	t.Helper()
	kernelPaths(t, func(t *testing.T) {
		for _, m := range models {
			run, err := New(m.m.Model, mod.RoutingRouter, Options{})
			require.NoError(t, err)
			require.Equal(t, want, run.w.blocks[0].up.kind, m.name)
			ref, err := m.m.NewState(mod.RoutingRouter)
			require.NoError(t, err)
			worst := lockstep(t, run, ref, prompt, 12)
			t.Logf("%s: max |Δlogit| / max |logit| = %.2g", m.name, worst)
			assert.LessOrEqual(t, worst, QuantizedRelTol, m.name)
		}
	})
}

// WeightBytes: a Q4_K_M model's matrices take its file's bytes (less the
// header and the norms, which are not matrices: within 5%), and so do
// Q2_K, Q4_1, Q5_0 and Q5_1 models' (klow, legacy.go), where requantizing
// them to Q8_0 took about twice (a Q4_1 model's 1.74) to three times
// (Q2_K's 2.69).
func TestWeightBytes(t *testing.T) {
	for _, c := range []struct {
		scheme   string
		min, max float64 // WeightBytes / the file's tensor bytes
	}{{"q4_k_m", 0.95, 1.0}, {"q4_1", 0.95, 1.0}, {"q5_0", 0.95, 1.0}, {"q5_1", 0.95, 1.0}, {"q2_k", 0.95, 1.0}} {
		s, err := quant.Parse(c.scheme)
		require.NoError(t, err)
		m, err := synth.Build(kShape, synth.Options{Scheme: s, Seed: 7})
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		file := int64(len(m.Data)) // the GGUF: its tensors, and a header of a few kB
		run, err := New(m.Model, mod.RoutingRouter, Options{})
		require.NoError(t, err)
		ratio := float64(run.WeightBytes()) / float64(file)
		t.Logf("%s: weights %d bytes, file %d: %.3f", c.scheme, run.WeightBytes(), file, ratio)
		assert.GreaterOrEqual(t, ratio, c.min, c.scheme)
		assert.LessOrEqual(t, ratio, c.max, c.scheme)
	}
}

// halfBits is f16Table's value for every half (the NaNs' bits too).
func TestHalfBits(t *testing.T) {
	for h := range 1 << 16 {
		b := []byte{byte(h), byte(h >> 8)}
		require.Equal(t, math.Float32bits(f16Table[h]), math.Float32bits(halfBits(b)), "half %#04x", h)
	}
}
