package mod

import (
	"math"
	"sort"
)

// The primitives of the forward pass. They are exported because they are
// the oracle that every GPU kernel is checked against.

// TopKIndices returns the k indices with the largest scores, ties to the
// lower index, in ascending index order.
func TopKIndices(scores []float32, k int) []int {
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return scores[idx[a]] > scores[idx[b]] })
	sel := idx[:k]
	sort.Ints(sel)
	return sel
}

// Selects is causal routing's rule (DESIGN.md §3): a token goes through iff
// its score is > 0. It is decided on the float's bits, as the GPU's kernels
// do (shaders/include/selects.glsl), so that a device which flushes
// denormals to zero (NVIDIA does, in arithmetic and comparisons) still
// selects a positive denormal: selected iff the sign bit is clear and the
// bits are neither +0 nor a NaN, i.e. the bits are in [1, 0x7f800000] (+Inf
// included). So -0, +0 and every NaN never select: a NaN score is a broken
// model, and it must not silently run a block. This is exactly IEEE's v > 0.
// Nor may a broken score pass as a silent skip: PoisonRows turns its row NaN.
func Selects(score float32) bool {
	b := math.Float32bits(score)
	return b != 0 && b <= 0x7f800000
}

// Poisons says whether a causal routing score is not finite (a NaN or an
// infinity: a broken router or predictor, or an overflow before it). Such a
// token's residual row becomes NaN at the decision (PoisonRows), selected
// (+Inf) or not, so that the broken score reaches the logits as
// ErrNonFinite instead of skipping the block silently; Selects stays as it
// is. Decided on the bits, as Selects: the exponent all ones.
func Poisons(score float32) bool {
	return math.Float32bits(score)&0x7f800000 == 0x7f800000
}

// PoisonRows sets row i of x ([n][d]) to NaN for each score i that
// Poisons: the skip path of causal routing (DESIGN.md §3), done by every
// backend before the selected rows are gathered.
func PoisonRows(x, scores []float32, d int) {
	nan := float32(math.NaN())
	for i, v := range scores {
		if Poisons(v) {
			for e := range x[i*d : (i+1)*d] {
				x[i*d+e] = nan
			}
		}
	}
}

func positive(scores []float32) []int {
	var sel []int
	for i, v := range scores {
		if Selects(v) {
			sel = append(sel, i)
		}
	}
	return sel
}

// Gate is g(r), the multiplier of a routed block's output: sigmoid or identity.
func Gate(kind string, r float32) float32 {
	if kind == GateIdentity {
		return r
	}
	return 1 / (1 + float32(math.Exp(float64(-r))))
}

// Attend is causal softmax attention for n query rows whose keys and
// values are the last n of the cache's entries: row i attends to entries
// [0, base+i]. The cache is in position order, so this is the causal mask by
// original position, for a compact cache too. GQA: query head h reads kv
// head h / (nHead/nKVHead).
//
//	out, q [n][nHead*headDim]; k, v [base+n][nKVHead*headDim]
func Attend(out, q, k, v []float32, base, n, nHead, nKVHead, hd int) {
	qd, kvd := nHead*hd, nKVHead*hd
	group := nHead / nKVHead
	scale := float32(1 / math.Sqrt(float64(hd)))
	parallelFor(n*nHead, n*nHead*(base+n)*hd, func(lo, hi int) {
		scores := make([]float32, base+n)
		for job := lo; job < hi; job++ {
			i, h := job/nHead, job%nHead
			kvh := h / group
			qi := q[i*qd+h*hd : i*qd+(h+1)*hd]
			m := base + i + 1 // entries visible to row i
			// Index the cache directly: heads are short (often 8-16), so
			// a sub-slice and a call per entry would cost more than the math.
			for e, off := 0, kvh*hd; e < m; e, off = e+1, off+kvd {
				ke := k[off : off+hd]
				var dot float32
				for j, qv := range qi {
					dot += qv * ke[j]
				}
				scores[e] = dot * scale
			}
			Softmax(scores[:m])
			oi := out[i*qd+h*hd : i*qd+(h+1)*hd]
			clear(oi)
			for e, off := 0, kvh*hd; e < m; e, off = e+1, off+kvd {
				ve, p := v[off:off+hd], scores[e]
				for j := range oi {
					oi[j] += p * ve[j]
				}
			}
		}
	})
}

// RMSNorm: out = x / sqrt(mean(x²) + eps) * w.
func RMSNorm(out, x, w []float32, eps float32) {
	var ss float32
	for _, v := range x {
		ss += v * v
	}
	inv := float32(1 / math.Sqrt(float64(ss/float32(len(x))+eps)))
	for i, v := range x {
		out[i] = v * inv * w[i]
	}
}

// Softmax replaces x by softmax(x), subtracting the max first.
func Softmax(x []float32) {
	mx := x[0]
	for _, v := range x[1:] {
		mx = max(mx, v)
	}
	var sum float32
	for i, v := range x {
		x[i] = float32(math.Exp(float64(v - mx)))
		sum += x[i]
	}
	for i := range x {
		x[i] /= sum
	}
}

// SiLU is x·sigmoid(x), the activation of SwiGLU and of the predictor.
func SiLU(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

func add(x, y []float32) {
	for i := range x {
		x[i] += y[i]
	}
}
