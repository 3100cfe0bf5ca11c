package vulkan

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/shaders"
)

// The self-check's decode attention cases: decode_attention (one pass)
// and decode_attention_split (flash-decoding's chunks, checked on their
// partial results), whose workgroup the profile shrinks to the device's
// shared memory (shaders.Profile.Fit), over a compact cache whose
// positions have gaps (a routed layer's) and two query rows that see
// different prefixes of it.

// attentionShape is the check's attention: 2 query rows, 4 heads over 2
// KV heads, 45 entries (more than a workgroup walks at once).
const (
	attnRows, attnHeads, attnKVHeads, attnEntries = 2, 4, 2, 45
	attnNoScore                                   = -1e30 // decode_attention.comp's NO_SCORE
)

// attnInput is the check's q, cache and positions, the cache as the
// kernel reads it (F16: halves, and the values the reference uses are the
// rounded ones).
type attnInput struct {
	hd               int
	q, k, v          []float32 // k and v as the kernel sees them
	kBytes, vBytes   []byte
	kPos, qPos       []uint32
	scale            float32
	kvd, qd, entries int
}

func newAttnInput(hd int, f16 bool) attnInput {
	rng := rand.New(rand.NewPCG(5, 25))
	in := attnInput{hd: hd, kvd: attnKVHeads * hd, qd: attnHeads * hd, entries: attnEntries,
		scale: float32(1 / math.Sqrt(float64(hd)))}
	in.q = randVec(rng, attnRows*in.qd, -2, 2)
	in.k, in.v = randVec(rng, attnEntries*in.kvd, -2, 2), randVec(rng, attnEntries*in.kvd, -1, 1)
	for e := range attnEntries {
		in.kPos = append(in.kPos, uint32(2*e+e/7)) // a routed layer's gaps
	}
	in.qPos = []uint32{in.kPos[17], in.kPos[attnEntries-1] + 3} // row 0 sees 18 entries, row 1 all
	in.kBytes, in.vBytes = f32Bytes(in.k), f32Bytes(in.v)
	if f16 {
		in.kBytes, in.vBytes = halves(in.k), halves(in.v)
	}
	return in
}

// halves rounds x to F16 in place and returns it packed two to a word.
func halves(x []float32) []byte {
	b := make([]byte, 2*len(x))
	for i, v := range x {
		h := gguf.F32ToF16(v)
		x[i] = gguf.F16ToF32(h)
		binary.LittleEndian.PutUint16(b[2*i:], h)
	}
	return b
}

// chunk is the reference of one (row, head) over entries [first, end):
// the max score m of the visible ones (attnNoScore when none), l = sum of
// exp(s - m), acc = sum of exp(s - m) v, and the bounds of each.
func (in attnInput) chunk(i, h, first, end int) (m, l float64, acc []float64, mBound, lBound float64, accBound []float64) {
	kvh := h / (attnHeads / attnKVHeads)
	qi := in.q[i*in.qd+h*in.hd : i*in.qd+(h+1)*in.hd]
	m = attnNoScore
	var scores, abs []float64
	var seen []int
	for e := first; e < end; e++ {
		if in.kPos[e] > in.qPos[i] {
			continue
		}
		s, a := dotAbs(qi, in.k[e*in.kvd+kvh*in.hd:e*in.kvd+(kvh+1)*in.hd])
		scores, abs, seen = append(scores, s*float64(in.scale)), append(abs, a*float64(in.scale)), append(seen, e)
		m = max(m, s*float64(in.scale))
	}
	acc, accBound = make([]float64, in.hd), make([]float64, in.hd)
	for j, e := range seen {
		p := math.Exp(scores[j] - m)
		l += p
		mBound = max(mBound, checkTol*abs[j])
		for d := range acc {
			vd := float64(in.v[e*in.kvd+kvh*in.hd+d])
			acc[d] += p * vd
			accBound[d] += p * math.Abs(vd)
		}
	}
	// A score off by its bound moves exp(s - m) by as much, relatively.
	rel := 2*mBound + checkTol
	for d := range accBound {
		accBound[d] = rel*accBound[d] + 1e-6
	}
	return m, l, acc, mBound + 1e-6, rel*l + 1e-6, accBound
}

func (in attnInput) bufs() []checkBuf {
	return []checkBuf{{data: f32Bytes(in.q)}, {data: in.kBytes}, {data: in.vBytes},
		{data: u32Bytes(in.kPos)}, {data: u32Bytes(in.qPos)}, {data: u32Bytes([]uint32{0, attnEntries})}}
}

// decodeAttentionCase: out = softmax(scale q.k) v per row and head over
// the entries each row sees (layer 1's count of the counts buffer).
func decodeAttentionCase(v shaders.Variant, spec []uint32) (checkCase, error) {
	kv, err := shaders.ParseKV(v.Type)
	if err != nil {
		return checkCase{}, err
	}
	split := v.Op == shaders.OpDecodeAttentionSplit
	in := newAttnInput(min(40, int(spec[1])&^1), kv == shaders.KVF16)
	push := shaders.DecodeAttentionPush{N: attnRows, Layer: 1, NHead: attnHeads, NKVHead: attnKVHeads,
		HeadDim: uint32(in.hd), Scale: in.scale}
	if !split {
		want, bound := make([]float32, attnRows*in.qd), make([]float64, attnRows*in.qd)
		for i := range attnRows {
			for h := range attnHeads {
				_, l, acc, _, lb, ab := in.chunk(i, h, 0, attnEntries)
				for d := range acc {
					o := i*in.qd + h*in.hd + d
					want[o] = float32(acc[d] / l)
					bound[o] = ab[d]/l + math.Abs(acc[d]/l)*lb/l
				}
			}
		}
		bufs := append(in.bufs(), checkBuf{data: make([]byte, 4*len(want)), want: want, bound: bound})
		return checkCase{op: checkOp(v), push: push, groups: shaders.AttentionGroups(attnRows, attnHeads), bufs: bufs}, nil
	}
	splits := int(spec[2])
	per := (attnEntries + splits - 1) / splits
	stride := 2 + in.hd
	n := attnRows * attnHeads * splits * stride
	want, bound := make([]float32, n), make([]float64, n)
	for i := range attnRows {
		for h := range attnHeads {
			for s := range splits {
				first := min(s*per, attnEntries)
				m, l, acc, mb, lb, ab := in.chunk(i, h, first, min(first+per, attnEntries))
				o := ((i*attnHeads+h)*splits + s) * stride
				want[o], bound[o] = float32(m), mb+checkTol*math.Abs(m)
				want[o+1], bound[o+1] = float32(l), lb
				for d := range acc {
					want[o+2+d], bound[o+2+d] = float32(acc[d]), ab[d]
				}
			}
		}
	}
	bufs := append(in.bufs(), checkBuf{data: make([]byte, 4*n), want: want, bound: bound})
	return checkCase{op: checkOp(v), push: push,
		groups: shaders.DecodeAttentionSplitGroups(attnRows, attnHeads, uint32(splits)), bufs: bufs}, nil
}

// attentionLanesCase: attention_split's ATTN_LANES variants (a prefill's
// attention, lanes a query row summing their partial scores by subgroup
// shuffles) and attention_coop (its products on tensor cores, over an F16
// cache: the check's halves) on the check's rows, heads and cache, in 2
// key tiles (row 0 sees none of the second), checked on their partial
// results: each
// (row, head, tile)'s max m, sum l and unnormalised output, against chunk's
// reference and bounds. The head dimension is the spec's (the kernel's
// exactly).
func attentionLanesCase(v shaders.Variant, spec []uint32) (checkCase, error) {
	kv, err := shaders.ParseKV(v.Type)
	if err != nil {
		return checkCase{}, err
	}
	const splits, splitLen = 2, (attnEntries + 1) / 2
	in := newAttnInput(int(spec[1]), kv == shaders.KVF16)
	push := shaders.AttentionSplitPush{N: attnRows, Entries: attnEntries, NHead: attnHeads, NKVHead: attnKVHeads,
		HeadDim: uint32(in.hd), Scale: in.scale, Layer: 1, Splits: splits, SplitLen: splitLen, Sorted: 1}
	rows := attnRows * attnHeads * splits
	wantO, boundO := make([]float32, rows*in.hd), make([]float64, rows*in.hd)
	wantML, boundML := make([]float32, 2*rows), make([]float64, 2*rows)
	for i := range attnRows {
		for h := range attnHeads {
			for s := range splits {
				first := s * splitLen
				m, l, acc, mb, lb, ab := in.chunk(i, h, first, min(first+splitLen, attnEntries))
				o := (i*attnHeads+h)*splits + s
				wantML[2*o], boundML[2*o] = float32(m), mb+checkTol*math.Abs(m)
				wantML[2*o+1], boundML[2*o+1] = float32(l), lb
				for d := range acc {
					wantO[o*in.hd+d], boundO[o*in.hd+d] = float32(acc[d]), ab[d]
				}
			}
		}
	}
	bufs := append(in.bufs(),
		checkBuf{data: make([]byte, 4*len(wantO)), want: wantO, bound: boundO},
		checkBuf{data: make([]byte, 4*len(wantML)), want: wantML, bound: boundML})
	return checkCase{op: checkOp(v), push: push, groups: shaders.AttentionSplitGroupsOf(v.Name, spec, attnRows, attnHeads, splits), bufs: bufs}, nil
}
