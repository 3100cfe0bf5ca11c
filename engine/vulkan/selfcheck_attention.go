package vulkan

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
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
	// kRel and vRel (nil: none) are, for each entry, how far its k and v
	// elements may be off what the reference holds, relative to them: the
	// token's own entry of a fused decode attention, which the kernel turns
	// (RoPE) and rounds (F16) itself.
	kRel, vRel []float64
}

func newAttnInput(hd int, f16 bool) attnInput { return newAttnInputSeed(hd, f16, 25) }

// newAttnInputSeed is newAttnInput's shape with other numbers.
func newAttnInputSeed(hd int, f16 bool, seed uint64) attnInput {
	rng := rand.New(rand.NewPCG(5, seed))
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
	rel := func(r []float64, e int) float64 {
		if r == nil {
			return 0
		}
		return r[e]
	}
	for e := first; e < end; e++ {
		if in.kPos[e] > in.qPos[i] {
			continue
		}
		s, a := dotAbs(qi, in.k[e*in.kvd+kvh*in.hd:e*in.kvd+(kvh+1)*in.hd])
		scores, abs, seen = append(scores, s*float64(in.scale)), append(abs, a*float64(in.scale)*(checkTol+rel(in.kRel, e))), append(seen, e)
		m = max(m, s*float64(in.scale))
	}
	acc, accBound = make([]float64, in.hd), make([]float64, in.hd)
	vBound := make([]float64, in.hd) // the values' own error, apart from the scores'
	for j, e := range seen {
		p := math.Exp(scores[j] - m)
		l += p
		mBound = max(mBound, abs[j])
		for d := range acc {
			vd := float64(in.v[e*in.kvd+kvh*in.hd+d])
			acc[d] += p * vd
			accBound[d] += p * math.Abs(vd)
			vBound[d] += p * math.Abs(vd) * rel(in.vRel, e)
		}
	}
	// A score off by its bound moves exp(s - m) by as much, relatively.
	r := 2*mBound + checkTol
	for d := range accBound {
		accBound[d] = r*accBound[d] + vBound[d] + 1e-6
	}
	return m, l, acc, mBound + 1e-6, r*l + 1e-6, accBound
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

// The fused attentions' cases: each hands its key tiles' partial results
// to the last workgroup of a head (or row-head) through an atomic count,
// the split-K hand-off that a device's memory model must carry (coherent
// buffers, a buffer barrier before the atomic): on a device where it does
// not, the merge reads stale tiles, the check fails, and the profile stops
// fusing attention (shaders.Profile.Fallback).

// selfRelF32 is how far a fused decode attention's own turn of the
// token's k may be from mod.RoPE's, relative to the pair's size: float32's
// sin and cos of an angle in [-pi, pi) (rope.glsl; a GPU's may be off by
// about 1e-6) and the two products of the turn.
const selfRelF32 = 1e-5

// decodeAttendCase: decode_attend and decode_attend_keys (a decode step's
// whole attention in one dispatch: RoPE, the cache append, the chunks and
// their merge by each head's last workgroup) for one token after the
// check's 45 entries, the last 4 of them at positions past the token's
// (masked), its q, k and v at unaligned offsets of qkv. Checked: the
// output against the CPU's attention over the old entries and the token's
// own (turned by mod.RoPE; with an F16 cache rounded to halves, the
// kernel's own rounding allowed a step of a half); the layer's count
// advanced (its neighbours untouched); the token's position appended; the
// hand-off's counters left at zero; with an F32 cache, the entries, old
// and appended. The head dimension is 40 under decode_attend's MAX_HD, or
// decode_attend_keys's exactly.
func decodeAttendCase(v shaders.Variant, spec []uint32) (checkCase, error) {
	kv, err := shaders.ParseKV(v.Type)
	if err != nil {
		return checkCase{}, err
	}
	f16 := kv == shaders.KVF16
	hd := int(spec[1])
	if v.Source == "decode_attend.comp" {
		hd = min(40, hd) &^ 1
	}
	splits := spec[2]
	in := newAttnInput(hd, f16)
	old := in.entries
	pos := in.kPos[old-5] + 1 // the last 4 entries lie past it
	qd, kvd := in.qd, in.kvd
	kOff, vOff := qd+3, qd+3+kvd+1
	rng := rand.New(rand.NewPCG(7, 31))
	qkv := randVec(rng, vOff+kvd, -2, 2)
	freqs := mod.RopeFrequencies(mod.Config{HeadDim: hd, RopeBase: 10000}, nil)
	q := slices.Clone(qkv[:qd])
	mod.RoPE(q, int32(pos), freqs)
	kNew, vNew := slices.Clone(qkv[kOff:kOff+kvd]), slices.Clone(qkv[vOff:vOff+kvd])
	mod.RoPE(kNew, int32(pos), freqs)
	selfK, selfV := selfRelF32, 0.0
	if f16 {
		halves(kNew)
		halves(vNew)
		selfK, selfV = selfRelF32+1.0/1024, 1.0/1024 // a half's step: the kernel rounds its own turn
	}
	ref := attnInput{hd: hd, q: q, k: append(slices.Clone(in.k), kNew...), v: append(slices.Clone(in.v), vNew...),
		kPos: append(slices.Clone(in.kPos), pos), qPos: []uint32{pos}, scale: in.scale, kvd: kvd, qd: qd, entries: old + 1,
		kRel: make([]float64, old+1), vRel: make([]float64, old+1)}
	ref.kRel[old], ref.vRel[old] = selfK, selfV
	want, bound := make([]float32, qd), make([]float64, qd)
	for h := range attnHeads {
		_, l, acc, _, lb, ab := ref.chunk(0, h, 0, old+1)
		for d := range acc {
			o := h*hd + d
			want[o] = float32(acc[d] / l)
			bound[o] = ab[d]/l + math.Abs(acc[d]/l)*lb/l
		}
	}
	const layer, spare = 1, 2 // entries past the token's
	maxEntries := old + 1 + spare
	pad := make([]byte, (maxEntries-old)*kvd*int(kv.ElementBytes()))
	kBuf := checkBuf{data: append(slices.Clone(in.kBytes), pad...)}
	vBuf := checkBuf{data: append(slices.Clone(in.vBytes), pad...)}
	if !f16 { // the cache's entries: the old ones as they were, the token's appended, the spare ones untouched
		kBuf.want = append(slices.Clone(ref.k), make([]float32, spare*kvd)...)
		vBuf.want = append(slices.Clone(ref.v), make([]float32, spare*kvd)...)
		kBuf.bound, vBuf.bound = make([]float64, len(kBuf.want)), make([]float64, len(vBuf.want))
		for j := range kBuf.want {
			kBuf.bound[j], vBuf.bound[j] = 1e-30, 1e-30
			if j/kvd == old { // the token's: a turn's error scales with its pair's size
				pair := qkv[kOff+(j-old*kvd)&^1:]
				kBuf.bound[j] = selfRelF32*(math.Abs(float64(pair[0]))+math.Abs(float64(pair[1]))) + 1e-6
			}
		}
	}
	kPos := append(slices.Clone(in.kPos), make([]uint32, 1+spare)...)
	wantPos := slices.Clone(kPos)
	wantPos[old] = pos
	done := make([]uint32, shaders.DecodeAttendDoneWords(attnHeads))
	bufs := []checkBuf{
		{data: f32Bytes(qkv)},
		{data: u32Bytes([]uint32{pos})},
		{data: u32Bytes(shaders.RopeFreqs(freqs))},
		kBuf, vBuf,
		{data: u32Bytes(kPos), wantU32: wantPos},
		{data: u32Bytes([]uint32{77, uint32(old), 88}), wantU32: []uint32{77, uint32(old) + 1, 88}},
		{data: make([]byte, 4*attnHeads*int(splits)*(2+hd))},
		{data: u32Bytes(done), wantU32: done},
		{data: make([]byte, 4*qd), want: want, bound: bound},
	}
	push := shaders.DecodeAttendPush{HeadDim: uint32(hd), NHead: attnHeads, NKVHead: attnKVHeads, KOff: uint32(kOff), VOff: uint32(vOff),
		Layer: layer, MaxEntries: uint32(maxEntries), Scale: in.scale}
	return checkCase{op: checkOp(v), push: push, groups: shaders.DecodeAttendGroups(attnHeads, splits), bufs: bufs}, nil
}

// pagedAttendCase: paged_attend (a batched step's attention: each row over
// its own block table of pages, in key tiles, the last tile of each
// row-head merging) on 4 rows of which the step runs 3 (the fourth's
// output must stay as it was), each with its own keys and values in pages
// scattered over the pool, a table of 2 layers' pages a block (the
// check's is the second), and sees entries 0 to 17, 44 and 0 of its own:
// tiles of 16 entries, the first row's third one empty. Checked: the
// output against the CPU's attention over each row's entries, and the
// tiles' counters left at zero. The head dimension is the spec's (the
// kernel's exactly).
//
// paged_attend_own (paged_qkv's RoPE and KV write in the same dispatch)
// takes each row's raw q|k|v at odd offsets of its own stride and turns it
// at a RoPE position other than its entry; each row's own entry (its
// last) is its turned k and v, whose slot in the pool holds values far
// off (1e3) until the kernel writes it, so that a workgroup reading the
// slot instead of the turned k and v fails. Also checked with an F32
// pool: every word of the pool, the own entries of the rows run written
// (within the turn's rounding), the fourth row's and all the rest left.
func pagedAttendCase(v shaders.Variant, spec []uint32) (checkCase, error) {
	kv, err := shaders.ParseKV(v.Type)
	if err != nil {
		return checkCase{}, err
	}
	f16, own := kv == shaders.KVF16, shaders.IsAttendOwn(v)
	hd := int(spec[1])
	const n, run, bt, width, layer, splitLen = 4, 3, 8, 2, 1, 16
	ents := []uint32{17, attnEntries - 1, 0, 30}
	splits := (attnEntries + splitLen - 1) / splitLen
	blocks := (attnEntries + bt - 1) / bt
	rng := rand.New(rand.NewPCG(9, 41))
	nPages := n*blocks + 1 // one spare: the table's other layer's pages
	perm := rng.Perm(nPages)
	spare := uint32(perm[nPages-1])
	in := newAttnInputSeed(hd, f16, 100)
	qd, kvd := in.qd, in.kvd
	pool := [2][]float32{randVec(rng, nPages*bt*kvd, -2, 2), randVec(rng, nPages*bt*kvd, -1, 1)}
	var tables, toff []uint32
	qs := randVec(rng, n*qd, -2, 2)
	out := randVec(rng, n*qd, -1, 1) // the fourth row's must stay
	want, bound := slices.Clone(out), make([]float64, n*qd)
	for j := range bound {
		bound[j] = 1e-30
	}
	// paged_attend_own's rows: raw q|k|v, RoPE's positions, and the pool
	// as it must be after the dispatch.
	kOff, vOff := qd+1, qd+1+kvd+1
	stride := vOff + kvd + 1
	qkv, rpos := randVec(rng, n*stride, -2, 2), make([]uint32, n)
	freqs := mod.RopeFrequencies(mod.Config{HeadDim: hd, RopeBase: 10000}, nil)
	type ownEntry struct {
		at         int // its slot in the pool
		k, v, pair []float32
	}
	var owns []ownEntry // the rows run's, written by the kernel
	selfK, selfV := selfRelF32, 0.0
	if f16 {
		selfK, selfV = selfRelF32+1.0/1024, 1.0/1024 // a half's step: the kernel rounds its own turn
	}
	for i := range n {
		ri := newAttnInputSeed(hd, f16, uint64(200+i))
		ri.kPos, ri.qPos = make([]uint32, attnEntries), []uint32{ents[i]}
		for e := range ri.kPos {
			ri.kPos[e] = uint32(e)
		}
		var ownAt int                                // the own entry's slot in the pool
		toff = append(toff, uint32(len(tables)+3*i)) // gaps between the tables
		tables = append(tables, make([]uint32, 3*i)...)
		for b := range blocks {
			page := uint32(perm[i*blocks+b])
			tables = append(tables, spare, page) // layer 0's, then the check's
			for j := 0; j < bt && b*bt+j < attnEntries; j++ {
				e := b*bt + j
				at := (int(page)*bt + j) * kvd
				copy(pool[0][at:at+kvd], ri.k[e*kvd:(e+1)*kvd])
				copy(pool[1][at:at+kvd], ri.v[e*kvd:(e+1)*kvd])
				if e == int(ents[i]) {
					ownAt = at
				}
			}
		}
		if own {
			e, src := int(ents[i]), i*stride
			rpos[i] = 3*ents[i] + 5
			copy(qkv[src:src+qd], ri.q[:qd]) // raw; the reference's q is it turned
			mod.RoPE(ri.q[:qd], int32(rpos[i]), freqs)
			kNew, vNew := slices.Clone(qkv[src+kOff:src+kOff+kvd]), slices.Clone(qkv[src+vOff:src+vOff+kvd])
			mod.RoPE(kNew, int32(rpos[i]), freqs)
			if f16 {
				halves(kNew)
				halves(vNew)
			}
			copy(ri.k[e*kvd:], kNew)
			copy(ri.v[e*kvd:], vNew)
			ri.kRel, ri.vRel = make([]float64, attnEntries), make([]float64, attnEntries)
			ri.kRel[e], ri.vRel[e] = selfK, selfV
			for j := range kvd { // the slot until the kernel writes it: far off
				pool[0][ownAt+j], pool[1][ownAt+j] = 1e3, -1e3
			}
			if i < run {
				owns = append(owns, ownEntry{ownAt, kNew, vNew, qkv[src+kOff : src+kOff+kvd]})
			}
		}
		copy(qs[i*qd:(i+1)*qd], ri.q[:qd])
		if i >= run {
			continue
		}
		for h := range attnHeads {
			_, l, acc, _, lb, ab := ri.chunk(0, h, 0, attnEntries)
			for d := range acc {
				o := i*qd + h*hd + d
				want[o] = float32(acc[d] / l)
				bound[o] = ab[d]/l + math.Abs(acc[d]/l)*lb/l
			}
		}
	}
	kBytes, vBytes := f32Bytes(pool[0]), f32Bytes(pool[1])
	if f16 { // the rows' entries are halves already; the rest are rounded here
		kBytes, vBytes = halves(pool[0]), halves(pool[1])
	}
	done := make([]uint32, n*attnHeads)
	tiles := n * attnHeads * splits
	bufs := []checkBuf{
		{data: f32Bytes(qs)},
		{data: kBytes}, {data: vBytes},
		{data: u32Bytes([]uint32{run})},
		{data: u32Bytes(ents)},
		{data: u32Bytes(toff)},
		{data: u32Bytes(tables)},
		{data: make([]byte, 4*tiles*hd)},
		{data: make([]byte, 4*tiles*2)},
		{data: u32Bytes(done), wantU32: done},
		{data: f32Bytes(out), want: want, bound: bound},
	}
	push := shaders.PagedPush{N: n, KVDim: uint32(kvd), Width: width, Layer: layer, BlockTokens: bt, NHead: attnHeads, NKVHead: attnKVHeads,
		HeadDim: uint32(hd), Scale: in.scale, Splits: uint32(splits), SplitLen: splitLen}
	if own {
		bufs[0] = checkBuf{data: f32Bytes(qkv)}
		if !f16 { // the pool: the own entries of the rows run written, every other word as it was
			kWant, vWant := slices.Clone(pool[0]), slices.Clone(pool[1])
			kBound, vBound := make([]float64, len(kWant)), make([]float64, len(vWant))
			for j := range kBound {
				kBound[j], vBound[j] = 1e-30, 1e-30
			}
			for _, o := range owns {
				copy(kWant[o.at:], o.k)
				copy(vWant[o.at:], o.v)
				for j := range kvd { // a turn's error scales with its pair's size
					pair := o.pair[j&^1:]
					kBound[o.at+j] = selfRelF32*(math.Abs(float64(pair[0]))+math.Abs(float64(pair[1]))) + 1e-6
				}
			}
			bufs[1].want, bufs[1].bound = kWant, kBound
			bufs[2].want, bufs[2].bound = vWant, vBound
		}
		bufs = append(bufs, checkBuf{data: u32Bytes(rpos)}, checkBuf{data: u32Bytes(shaders.RopeFreqs(freqs))})
		push.Stride, push.KOff, push.VOff = uint32(stride), uint32(kOff), uint32(vOff)
	}
	return checkCase{op: checkOp(v), push: push, groups: shaders.PagedAttentionGroups(n, attnHeads, uint32(splits)), bufs: bufs}, nil
}
