package cpu

import "math"

// expf is e^x in float32, for attention's softmax and SwiGLU's SiLU, at a
// third of math.Exp's cost (which works in float64): x = n·ln2 + r with
// |r| <= ln2/2, e^r by its Taylor polynomial to r^6 (truncation below
// 1.3e-7 relative), and 2^n added to the exponent bits. Within 3e-7 of
// math.Exp relative (TestExpf); 0 below -87 (e^-87 is 1.6e-38, the edge of
// float32's normal range: nothing a softmax's sum can hold beside its
// largest term, e^0), +Inf above 88.7, NaN for NaN.
func expf(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693145751953125 // ln 2 to 16 bits: n·ln2hi is exact
		ln2lo = 1.428606765330187e-06
	)
	switch {
	case x != x:
		return x
	case x < -87:
		return 0
	case x > 88.7:
		return float32(math.Inf(1))
	}
	t := x * log2e
	n := float32(int32(t + 0.5))
	if t+0.5 < 0 && n != t+0.5 { // int32 truncates toward 0: floor for negatives
		n--
	}
	r := (x - n*ln2hi) - n*ln2lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720))))))
	return math.Float32frombits(math.Float32bits(p) + uint32(int32(n))<<23)
}

// silu is mod.SiLU with expf: x·sigmoid(x).
func silu(x float32) float32 { return x / (1 + expf(-x)) }

// swiglu sets gate[i] = silu(gate[i])·up[i] (SwiGLU), 8 at a time on AVX2.
func swiglu(gate, up []float32) {
	if useSIMD {
		swigluSIMD(gate, up)
		return
	}
	swigluGo(gate, up)
}

func swigluGo(gate, up []float32) {
	for i, g := range gate {
		gate[i] = silu(g) * up[i]
	}
}

// softmax is mod.Softmax with expf, in place; a NaN anywhere makes every
// value NaN, as mod's does (Go's max keeps a NaN).
func softmax(x []float32) {
	mx := x[0]
	for _, v := range x[1:] {
		mx = max(mx, v)
	}
	var sum float32
	if useSIMD && mx-mx == 0 { // finite: every x - mx is at most 0
		sum = expSumSIMD(x, mx)
	} else {
		sum = expSumGo(x, mx)
	}
	inv := 1 / sum
	for i := range x {
		x[i] *= inv
	}
}

// expSumGo sets x[i] = expf(x[i] - mx) and returns their sum.
func expSumGo(x []float32, mx float32) float32 {
	var sum float32
	for i, v := range x {
		x[i] = expf(v - mx)
		sum += x[i]
	}
	return sum
}
