package vulkan

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/drawref"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
)

// The self-check's cases: for each checked kernel family, a small input
// (ragged: more rows than a workgroup takes, a router row that no
// workgroup size divides) and the CPU's result for it, from mod's
// reference operations on the same (quantized) data.

// checkerFor is the case maker of variant v's op (v.Op); ok is false for
// a kernel the self-check does not cover (those whose variant does not
// depend on the device's subgroups or limits).
func checkerFor(v shaders.Variant) (mk func(v shaders.Variant, spec []uint32) (checkCase, error), ok bool) {
	if shaders.IsHandoff(v) {
		return handoffChecker(v)
	}
	if v.Name == "argmax_wide" {
		return argmaxWideCase, true
	}
	switch v.Op {
	case shaders.OpMatvec:
		return matvecCase, true
	case shaders.OpDotX:
		return dotXCase, true
	case shaders.OpRouterScore:
		return routerScoreCase, true
	case shaders.OpRouteDecode, shaders.OpRouteDecodePred:
		return routeDecodeCase, true
	case shaders.OpDecodeAttention, shaders.OpDecodeAttentionSplit:
		return decodeAttentionCase, true
	case shaders.OpDecodeAttend:
		return decodeAttendCase, true
	case shaders.OpPagedAttend:
		return pagedAttendCase, true
	case shaders.OpMatmulCoop, shaders.OpMatmulPipe:
		return matmulCase, true
	case shaders.OpAttentionLanes, shaders.OpAttentionCoop:
		return attentionLanesCase, true
	case shaders.OpMatmulDirect:
		return directCase, true
	}
	return nil, false
}

// checkOp names what a checked variant computes.
func checkOp(v shaders.Variant) string {
	switch v.Op {
	case shaders.OpMatvec:
		return "matvec " + v.Type + map[string]string{shaders.FuseNone: "", shaders.FuseAdd: " add", shaders.FuseNorm: " norm",
			shaders.FuseNormSwiGLU: " norm swiglu"}[v.Fusion]
	case shaders.OpDotX:
		if strings.HasSuffix(v.Name, "_norm") {
			return "x to 8 bits, normed"
		}
		return "x to 8 bits"
	case shaders.OpRouterScore:
		return "router score"
	case shaders.OpRouteDecode, shaders.OpRouteDecodePred:
		return "routing decision"
	case shaders.OpDecodeAttention:
		return "attention " + v.Type
	case shaders.OpDecodeAttentionSplit:
		return "attention split " + v.Type
	case shaders.OpDecodeAttend:
		if v.Source == "decode_attend_keys.comp" {
			return "attention fused " + v.Type + " keys"
		}
		return "attention fused " + v.Type
	case shaders.OpPagedAttend:
		if shaders.IsAttendOwn(v) {
			return "batched attention " + v.Type + " own entries"
		}
		return "batched attention " + v.Type
	case shaders.OpMatmulCoop:
		return "matmul " + v.Type + " tensor cores"
	case shaders.OpMatmulPipe:
		return "matmul " + v.Type + " pipelined"
	case shaders.OpAttentionLanes:
		return "prefill attention " + v.Type + " lanes"
	case shaders.OpAttentionCoop:
		return "prefill attention " + v.Type + " tensor cores"
	case "":
		if v.Name == "argmax_wide" {
			return "decode head: argmax and draw"
		}
	case shaders.OpMatmulDirect:
		if strings.Contains(v.Name, "_hilo") {
			return "matmul direct tensor cores"
		}
		return "matmul direct f16 tensor cores"
	}
	return v.Name
}

const (
	checkCols = 512 // a multiple of every weight type's block
	checkEps  = 1e-5
)

func randVec(rng *rand.Rand, n int, lo, hi float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = lo + (hi-lo)*rng.Float32()
	}
	return v
}

// dotAbs is a float64 dot product and the sum of its terms' magnitudes
// (what the bound of the GPU's sum is relative to).
func dotAbs(a, b []float32) (dot, abs float64) {
	for i := range a {
		t := float64(a[i]) * float64(b[i])
		dot += t
		abs += math.Abs(t)
	}
	return dot, abs
}

// quant8Err bounds how far w·x moves when x is quantized to 8 bits as
// matvec_dot quantizes it (blocks of xb, a step of max|x|/127, rounded to
// the nearest): half a step of each block times its weights' magnitudes,
// and 1% for the float32 arithmetic.
func quant8Err(w, x []float32, xb int) float64 {
	var e float64
	for b := 0; b+xb <= len(x); b += xb {
		var amax, wa float64
		for j := b; j < b+xb; j++ {
			amax, wa = max(amax, math.Abs(float64(x[j]))), wa+math.Abs(float64(w[j]))
		}
		e += amax / 254 * wa
	}
	return 1.01 * e
}

// matvecCase: y = W x with W in the variant's type, fused as the variant
// is, over 2 workgroups' rows and 3 more. matvec_dot (x quantized to 8
// bits) is held to the f32 bound plus the quantization's (quant8Err).
func matvecCase(v shaders.Variant, spec []uint32) (checkCase, error) {
	typ, fuse := v.Type, v.Fusion
	wt, err := shaders.Weight(typ)
	if err != nil {
		return checkCase{}, err
	}
	ggmlType, err := gguf.ParseTensorType(wt.GGML)
	if err != nil {
		return checkCase{}, err
	}
	perGroup := int(spec[0] / spec[1])
	if len(spec) > 3 && spec[3] > 1 {
		perGroup *= int(spec[3])
	}
	rows := 2*perGroup + 3
	wRows := rows
	if fuse == shaders.FuseNormSwiGLU {
		wRows = 2 * rows // gate, then up
	}
	rng := rand.New(rand.NewPCG(uint64(len(v.Name)), 25))
	ggml, err := gguf.Quantize(ggmlType, randVec(rng, wRows*checkCols, -1, 1))
	if err != nil {
		return checkCase{}, err
	}
	devBytes, err := shaders.MatvecBytes(typ, ggml, wRows, checkCols)
	if err != nil {
		return checkCase{}, err
	}
	m, err := mod.NewMat("self-check", ggmlType, []uint64{checkCols, uint64(wRows)}, ggml)
	if err != nil {
		return checkCase{}, err
	}
	// One vector, or where the spec takes NB > 1 a pass (a batched step's
	// kernel, Profile.MatvecBatch) NB + 1: a full pass and a ragged one.
	n := 1
	if len(spec) > 2 && spec[2] > 1 {
		n = int(spec[2]) + 1
	}
	x, normw := randVec(rng, n*checkCols, -1, 1), randVec(rng, checkCols, 0.5, 1.5)
	xn := x
	if fuse == shaders.FuseNorm || fuse == shaders.FuseNormSwiGLU {
		xn = make([]float32, n*checkCols)
		for i := range n {
			mod.RMSNorm(xn[i*checkCols:(i+1)*checkCols], x[i*checkCols:(i+1)*checkCols], normw, checkEps)
		}
	}
	y0 := make([]float32, n*rows)
	if fuse == shaders.FuseAdd {
		y0 = randVec(rng, n*rows, -1, 1)
	}
	want, bound := make([]float32, n*rows), make([]float64, n*rows)
	row := make([]float32, checkCols)
	q8 := v.Reduce == shaders.ReduceSubgroupDot // x quantized to 8 bits: quant8Err more
	for i := range n {
		xi := xn[i*checkCols : (i+1)*checkCols]
		dot := func(r int) (d, a, q float64) {
			m.Row(r, row)
			d, a = dotAbs(row, xi)
			if q8 {
				q = quant8Err(row, xi, shaders.MatvecDotBlock(typ))
			}
			return d, a, q
		}
		for r := range rows {
			at := i*rows + r
			d, a, q := dot(r)
			if fuse == shaders.FuseNormSwiGLU {
				u, ua, uq := dot(rows + r)
				g := float32(d)
				want[at] = mod.SiLU(g) * float32(u)
				bound[at] = checkTol*(1.1*a*math.Abs(u)+math.Abs(float64(mod.SiLU(g)))*ua) + 1e-6 +
					1.1*q*(math.Abs(u)+uq) + math.Abs(float64(mod.SiLU(g)))*uq
				continue
			}
			want[at] = y0[at] + float32(d)
			bound[at] = checkTol*(a+math.Abs(float64(y0[at]))) + 1e-6 + q
		}
	}
	bufs := []checkBuf{{data: devBytes}, {data: f32Bytes(x)}, {data: f32Bytes(y0), want: want, bound: bound}}
	norm := fuse == shaders.FuseNorm || fuse == shaders.FuseNormSwiGLU
	if _, pre := shaders.MatvecDotPreX(v.Name); pre {
		// x as dot_x quantizes it (its own check: dotXCase), on the host.
		var nw []float32
		if norm {
			nw = normw
		}
		bufs[1].data = u32Bytes(shaders.QuantizeDotX(x, nw, n, checkCols, shaders.MatvecDotBlock(typ)))
	} else if norm {
		bufs = append(bufs, checkBuf{data: f32Bytes(normw)})
	}
	return checkCase{op: checkOp(v), push: shaders.MatvecPush{Rows: uint32(rows), Cols: checkCols, N: uint32(n), Eps: checkEps},
		groups: shaders.MatvecGroups(uint32(rows), spec), bufs: bufs}, nil
}

// dotXCase: dot_x over 3 vectors of 768 columns (blocks of 256: 3 a
// vector; of 32: 24), the middle one's second block zeros, with the norm's
// weight where the variant takes it: q and the halves' sums exactly
// shaders.QuantizeDotX's (x is moved off the values where x*127/max|x|
// falls within 1e-2 of a half, at which a division rounded otherwise than
// IEEE's could round q the other way), the scales within 2 ulps, the sums
// of squares within 1e-6.
func dotXCase(v shaders.Variant, spec []uint32) (checkCase, error) {
	const n, cols = 3, 768
	xb := 32
	if strings.Contains(v.Name, "_b256") {
		xb = 256
	}
	norm := strings.HasSuffix(v.Name, "_norm")
	rng := rand.New(rand.NewPCG(uint64(xb), 26))
	x := randVec(rng, n*cols, -2, 2)
	clear(x[cols+xb : cols+2*xb])
	var nw []float32
	if norm {
		nw = randVec(rng, cols, 0.5, 1.5)
	}
	for b := 0; b < n*cols; b += xb { // off the ties, the block's max kept
		var amax float32
		for j := b; j < b+xb; j++ {
			amax = max(amax, float32(math.Abs(float64(dotXScaled(x, nw, j, cols)))))
		}
		for j := b; j < b+xb; j++ {
			a := dotXScaled(x, nw, j, cols)
			if f := float64(a * (127 / amax)); math.Abs(math.Abs(f-math.Trunc(f))-0.5) < 1e-2 && float32(math.Abs(float64(a))) < amax {
				x[j] *= 0.97
			}
		}
	}
	q := shaders.QuantizeDotX(x, nw, n, cols, xb)
	words := n*cols/4 + n*cols/32 // q, then the halves' sums: exact
	want, bound := make([]float32, len(q)-words), make([]float64, len(q)-words)
	for i := range want {
		want[i] = math.Float32frombits(q[words+i])
		bound[i] = 2 * math.Abs(float64(want[i])) / (1 << 23)
		if i >= n*cols/32 { // the sums of squares
			bound[i] = 1e-6 * math.Abs(float64(want[i]))
		}
		bound[i] += 1e-30
	}
	out := checkBuf{data: make([]byte, 4*len(q)), wantU32: q[:words], want: want, bound: bound, floatsAt: words}
	bufs := []checkBuf{{data: f32Bytes(x)}, out}
	if norm {
		bufs = append(bufs, checkBuf{data: f32Bytes(nw)})
	}
	return checkCase{op: checkOp(v), push: shaders.MatvecPush{Cols: cols, N: n}, groups: shaders.DotXGroups(n, cols), bufs: bufs}, nil
}

// dotXScaled is element j of x ([n][cols]) times the norm's weight nw
// where it is not nil, in float32.
func dotXScaled(x, nw []float32, j, cols int) float32 {
	if nw == nil {
		return x[j]
	}
	return x[j] * nw[j%cols]
}

// argmaxWideCase: argmax_wide over six rows of 2,500 logits (3 and 10
// workgroups a row at [256 4] and [64 4]): the argmax of a row whose
// largest value comes twice (the lower index wins), and five draws, at
// temperatures 1 and 0.5, and 2 with min-p 0.5, with top-p 0.5 and with
// top-k 5 where the fifth place falls among six equal logits (the first
// three by id kept), with u at the middle of the interval of a likely
// token that is not the row's argmax (top-k's: the last tie it keeps;
// internal/drawref: a float32 device's rounding cannot move it; with a
// filter, a u at which the draw without it takes another token: at T 2
// the tokens it drops hold most of the weight; top-p's crossing far from
// either end of its token); done left at zero.
func argmaxWideCase(v shaders.Variant, spec []uint32) (checkCase, error) {
	const n, cols = 6, 2500
	rng := rand.New(rand.NewPCG(5, 25))
	x := randVec(rng, n*cols, -4, 4)
	x[700], x[1900] = 9, 9 // row 0's largest, twice
	draws := []shaders.ArgmaxDraw{{}, {Temp: 1}, {Temp: 0.5}, shaders.ArgmaxDraw{Temp: 2}.WithMinP(0.5), shaders.ArgmaxDraw{Temp: 2}.WithTopP(0.5),
		shaders.ArgmaxDraw{Temp: 2}.WithTopK(5)}
	want := []uint32{700, 0, 0, 0, 0, 0}
	for r := 1; r < n; r++ {
		d := draws[r]
		row := x[r*cols : (r+1)*cols]
		tok := 300 * r
		if d.TopK > 0 {
			row[100], row[1100] = 9.4, 9.5
			for _, j := range []int{50, 450, 850, 1250, 1650, 2050} {
				row[j] = 8
			}
			tok = 850
		} else {
			row[tok], row[tok+1000] = 9.4, 9.5 // a likely token, and the argmax after it
		}
		w, z := drawref.WeightsTopK(row, d.Temp, int(d.TopK), d.TopP, d.MinP)
		if w[tok]/z < 0.1 {
			return checkCase{}, fmt.Errorf("%s: the check's token holds %.3g of row %d's weight", v.Name, w[tok]/z, r)
		}
		u := drawref.Middle(w, z, tok)
		draws[r].U = float32(u)
		id, margin := drawref.DrawTopK(row, d.Temp, int(d.TopK), d.TopP, d.MinP, float64(draws[r].U))
		if id != tok || margin < 0.01 {
			return checkCase{}, fmt.Errorf("%s: the check's draw of row %d is token %d at margin %.3g", v.Name, r, id, margin)
		}
		if plain, _ := drawref.Draw(row, d.Temp, float64(draws[r].U)); (d.MinP > 0 || d.TopP > 0 || d.TopK > 0) && plain == id {
			return checkCase{}, fmt.Errorf("%s: the check's filtered draw of row %d is the draw without the filter", v.Name, r)
		}
		if d.TopP > 0 && drawref.TopPMargin(row, d.TopP) < 0.01 {
			return checkCase{}, fmt.Errorf("%s: the check's top-p crossing in row %d is near an end", v.Name, r)
		}
		want[r] = uint32(id)
	}
	return checkCase{op: checkOp(v), push: shaders.ArgmaxPush{Cols: cols, N: n}, groups: shaders.ArgmaxWideGroups(n, cols, spec),
		bufs: []checkBuf{{data: f32Bytes(x)}, {data: make([]byte, 4*n), wantU32: want},
			{data: make([]byte, 4*shaders.ArgmaxWidePartWords(n, cols, spec))},
			{data: make([]byte, 4*n), wantU32: make([]uint32, n)},
			{data: shaders.ArgmaxDrawBytes(draws)}},
	}, nil
}

// routerScoreCase: y = SiLU(W x + bias) for 3 tokens and 5 rows of 300
// columns (the predictor's hidden layer; the score is the same sum without
// the SiLU).
func routerScoreCase(v shaders.Variant, spec []uint32) (checkCase, error) {
	const n, rows, cols = 3, 5, 300
	rng := rand.New(rand.NewPCG(3, 25))
	w, x, bias := randVec(rng, rows*cols, -1, 1), randVec(rng, n*cols, -1, 1), randVec(rng, 1, -1, 1)
	want, bound := make([]float32, n*rows), make([]float64, n*rows)
	for i := range n {
		for r := range rows {
			d, a := dotAbs(w[r*cols:(r+1)*cols], x[i*cols:(i+1)*cols])
			want[i*rows+r] = mod.SiLU(float32(d) + bias[0])
			bound[i*rows+r] = 1.1*checkTol*(a+math.Abs(float64(bias[0]))) + 1e-6
		}
	}
	per := spec[0] / spec[1]
	return checkCase{op: checkOp(v),
		push:   shaders.RouterPush{N: n, Rows: rows, Cols: cols, HasBias: 1, Act: shaders.RouterActSiLU},
		groups: shaders.Groups((n*rows + per - 1) / per),
		bufs: []checkBuf{{data: f32Bytes(w)}, {data: f32Bytes(bias)}, {data: f32Bytes(x)},
			{data: make([]byte, 4*n*rows), want: want, bound: bound}},
	}, nil
}

// routeDecodeCase: one token's routing step over a 300-wide row with a
// deciding score of about 1 (selected): the score r, the count 1, x copied
// to xs and left as it is, and the indirect arguments set to the block's
// groups; with a predictor, p = w2 . h + b decides.
func routeDecodeCase(v shaders.Variant, spec []uint32) (checkCase, error) {
	const nEmbd, predHidden, m = 300, 37, 3
	pred := v.Op == shaders.OpRouteDecodePred
	rng := rand.New(rand.NewPCG(4, 25))
	w, x := randVec(rng, nEmbd, -1, 1), randVec(rng, nEmbd, -1, 1)
	d, a := dotAbs(w, x)
	bias := []float32{float32(1 - d)} // r = 1: selected by the router
	groups := []uint32{7, 1, 1, 2, 3, 1, 5, 1, 1}
	push := shaders.RouteDecodePush{NEmbd: nEmbd, HasBias: 1, M: m}
	bufs := []checkBuf{{data: f32Bytes(w)}, {data: f32Bytes(bias)},
		{data: f32Bytes(x), wantU32: f32Bits(x)},
		{data: make([]byte, 4*nEmbd), wantU32: f32Bits(x)},
		{data: make([]byte, 4), want: []float32{1}, bound: []float64{checkTol*(a+math.Abs(float64(bias[0]))) + 1e-6}},
		{data: make([]byte, 4), wantU32: []uint32{1}},
		{data: u32Bytes(groups)},
		{data: make([]byte, 4*len(groups)), wantU32: groups},
	}
	if pred {
		h, w2 := randVec(rng, predHidden, 0, 1), randVec(rng, predHidden, -1, 1)
		bias[0] = float32(-1 - d) // r = -1: only the predictor selects
		bufs[1].data, bufs[4].want[0] = f32Bytes(bias), -1
		pd, pa := dotAbs(w2[1:], h[1:])
		pb := []float32{0.25}                         // a linear predictor's bias
		w2[0], h[0] = 1, float32(1-pd-float64(pb[0])) // p = 1
		push.PredHidden, push.PredBias = predHidden, 1
		bufs = append(bufs, checkBuf{data: f32Bytes(h)}, checkBuf{data: f32Bytes(w2)},
			checkBuf{data: make([]byte, 4), want: []float32{1}, bound: []float64{checkTol*(pa+math.Abs(float64(h[0]))+0.25) + 1e-6}},
			checkBuf{data: f32Bytes(pb)})
	}
	if len(bufs) != map[bool]int{false: 8, true: 12}[pred] {
		return checkCase{}, fmt.Errorf("%s: %d bindings in the check", v.Name, len(bufs))
	}
	return checkCase{op: checkOp(v), push: push, groups: [3]uint32{1, 1, 1}, bufs: bufs}, nil
}

func f32Bits(x []float32) []uint32 {
	b := make([]uint32, len(x))
	for i, v := range x {
		b[i] = math.Float32bits(v)
	}
	return b
}

// checkCoopHiloTol is the hilo tensor-core matmul's (matmul_coop.comp's
// COOP_HILO) bound relative to the sum of |terms|, beyond checkTol's f32
// sums: each operand is a high and a low half within u² of itself (u =
// 2^-10 with the driver's conversion truncating) and the product of the
// low halves is left out, so a term is off by at most about 3u² = 2.9e-6
// of itself; 4e-6 leaves room. (Where a low half is a subnormal, up to
// 2^-24 of the other operand more: under 2.4e-7 of a term of the case's x,
// at least 0.5, and weights but for a few near 0; checkTol's share, 1e-4,
// dwarfs both, and a kernel that rounds its operands is off by 2.2e-4.)
const checkCoopHiloTol = 4e-6 + checkTol

// hiloCheckInput is n values h + 0.45·2^-11 with h a random half in
// [0.5, 1) (a step of 2^-11 there): rounded to a half (to nearest or
// toward zero) each loses 0.45·2^-11, 2.2-4.4e-4 of itself; split into
// high and low halves, nothing.
func hiloCheckInput(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(1024+rng.IntN(1024))/2048 + 0.45/2048
	}
	return x
}

// checkCoopTol is the tensor-core matmul's bound relative to the sum of
// |terms|: its operands are rounded to f16 (2^-11 of each with
// round-to-nearest, 2^-10 truncated), so a product is off by up to about
// 2^-9 of itself; checkTol covers the f32 sums. A wrong tile or lane
// layout is off by whole terms.
const checkCoopTol = 2e-3 + checkTol

// matmulCase: Y = X W^T on tensor cores (OpMatmulCoop) or by the
// pipelined tile (OpMatmulPipe, at checkTol: f32 arithmetic) for two
// workgroups' rows and 3 more, and a token tile and 3 more tokens (ragged
// in both, so the edges are checked too), over checkCols columns: 32 of
// the pipelined tile's steps, so both copies of its tiles are read and
// rewritten many times.
func matmulCase(v shaders.Variant, spec []uint32) (checkCase, error) {
	wt, err := shaders.Weight(v.Type)
	if err != nil {
		return checkCase{}, err
	}
	ggmlType, err := gguf.ParseTensorType(wt.GGML)
	if err != nil {
		return checkCase{}, err
	}
	n, rows := int(spec[1])+3, 2*int(spec[2])+3
	rng := rand.New(rand.NewPCG(uint64(len(v.Name)), 43))
	// The hilo kernel's case must fail a kernel that rounds its operands
	// to halves (a compiler that folded the split away, or the f16
	// kernel): its weights are positive and its x values halves plus 0.45
	// of the half's step below them (hiloCheckInput), so that rounding
	// takes 2.2-4.4e-4 off every term, in the same direction: more than
	// checkCoopHiloTol of the sum of |terms|.
	hilo := strings.HasPrefix(v.Name, "matmul_coop_hilo_")
	wlo := float32(-1)
	if hilo {
		wlo = 0.05
	}
	ggml, err := gguf.Quantize(ggmlType, randVec(rng, rows*checkCols, wlo, 1))
	if err != nil {
		return checkCase{}, err
	}
	devBytes, err := shaders.MatvecBytes(v.Type, ggml, rows, checkCols)
	if err != nil {
		return checkCase{}, err
	}
	m, err := mod.NewMat("self-check", ggmlType, []uint64{checkCols, uint64(rows)}, ggml)
	if err != nil {
		return checkCase{}, err
	}
	x := randVec(rng, n*checkCols, -1, 1)
	tol := checkCoopTol
	if v.Op == shaders.OpMatmulPipe {
		tol = checkTol
	}
	if hilo {
		tol = checkCoopHiloTol
		x = hiloCheckInput(rng, n*checkCols)
	}
	want, bound, y0 := make([]float32, n*rows), make([]float64, n*rows), make([]float32, n*rows)
	row := make([]float32, checkCols)
	for r := range rows {
		m.Row(r, row)
		for s := range n {
			d, a := dotAbs(row, x[s*checkCols:(s+1)*checkCols])
			want[s*rows+r], bound[s*rows+r] = float32(d), tol*a+1e-6
		}
	}
	for i := range y0 {
		y0[i] = float32(math.NaN()) // an output the kernel skips shows
	}
	return checkCase{op: checkOp(v),
		push:   shaders.MatmulPush{Rows: uint32(rows), Cols: checkCols, N: uint32(n), WRows: uint32(rows), LdY: uint32(rows)},
		groups: shaders.MatmulGroupsOf(uint32(rows), uint32(n), spec),
		bufs:   []checkBuf{{data: devBytes}, {data: f32Bytes(x)}, {data: f32Bytes(y0), want: want, bound: bound}}}, nil
}

// directCase: Y = X W^T by the direct matmul's product (matmul_direct)
// for two workgroups' rows and 3 more, and a token tile and 3 more tokens,
// over checkCols columns, from planes of halves made here (as planes.comp
// makes them: hi rounded to nearest, lo the rest rounded): the product and
// its tile loads are what a device may get wrong; the planes pass is plain
// arithmetic that CI checks value for value. The hilo product's case is
// the hilo matmul's (hiloCheckInput: a kernel that drops the low halves
// fails it); the f16 one's bound is checkCoopTol.
func directCase(v shaders.Variant, spec []uint32) (checkCase, error) {
	ds := shaders.MatmulDirectSpec{BM: spec[1], BN: spec[2], WM: spec[3], WN: spec[4]}
	if err := ds.Check(); err != nil {
		return checkCase{}, err
	}
	hilo := strings.Contains(v.Name, "_hilo")
	n, rows := int(ds.BM)+3, 2*int(ds.BN)+3
	rowsP, nP, colsP := ds.Pad(uint32(rows), uint32(n), checkCols)
	rng := rand.New(rand.NewPCG(uint64(len(v.Name)), 47))
	wlo, tol := float32(-1), checkCoopTol
	if hilo {
		wlo, tol = 0.05, checkCoopHiloTol
	}
	w := randVec(rng, rows*checkCols, wlo, 1)
	x := randVec(rng, n*checkCols, -1, 1)
	if hilo {
		x = hiloCheckInput(rng, n*checkCols)
	}
	wPlanes := directPlanes(w, rows, checkCols, rowsP, colsP, hilo)
	xPlanes := directPlanes(x, n, checkCols, nP, colsP, hilo)
	push := shaders.MatmulDirectPush{Rows: uint32(rows), N: uint32(n), ColsP: colsP, LdY: uint32(rows)}
	if hilo {
		push.WLo, push.XLo = shaders.PlaneUnits(rowsP, colsP), shaders.PlaneUnits(nP, colsP)
	}
	want, bound, y0 := make([]float32, n*rows), make([]float64, n*rows), make([]float32, n*rows)
	for r := range rows {
		for s := range n {
			d, a := dotAbs(w[r*checkCols:(r+1)*checkCols], x[s*checkCols:(s+1)*checkCols])
			want[s*rows+r], bound[s*rows+r] = float32(d), tol*a+1e-6
		}
	}
	for i := range y0 {
		y0[i] = float32(math.NaN()) // an output the kernel skips shows
	}
	return checkCase{op: checkOp(v), push: push, groups: shaders.MatmulDirectGroups(uint32(rows), uint32(n), ds),
		bufs: []checkBuf{{data: wPlanes}, {data: xPlanes}, {data: f32Bytes(y0), want: want, bound: bound}}}, nil
}

// directPlanes is m (rows x cols) as planes.comp writes it: [rowsP][colsP]
// halves, hi then (lo) lo, zero padded.
func directPlanes(m []float32, rows, cols int, rowsP, colsP uint32, lo bool) []byte {
	plane := int(rowsP * colsP)
	b := make([]byte, shaders.PlanesBytes(rowsP, colsP, lo))
	for r := range rows {
		for c := range cols {
			v := m[r*cols+c]
			hi := gguf.F32ToF16(v)
			at := r*int(colsP) + c
			binary.LittleEndian.PutUint16(b[2*at:], hi)
			if lo {
				binary.LittleEndian.PutUint16(b[2*(plane+at):], gguf.F32ToF16(v-gguf.F16ToF32(hi)))
			}
		}
	}
	return b
}
