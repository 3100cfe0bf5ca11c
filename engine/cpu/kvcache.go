package cpu

import (
	"fmt"

	"github.com/modrun/modrun/gguf"
)

// The KV cache's element types (Options.KVType), as --kv-type names them.
const (
	KVF32 = "f32" // float32: the reference's arithmetic, the default
	KVF16 = "f16" // IEEE halves: half the memory, half the bytes attention reads
)

// parseKV reads Options.KVType: "" is KVF32.
func parseKV(s string) (half bool, err error) {
	switch s {
	case "", KVF32:
		return false, nil
	case KVF16:
		return true, nil
	}
	return false, fmt.Errorf("cpu: KV type %q is not f16 or f32", s)
}

// kvRows holds cache rows, keys or values, in float32 or, with half, in
// IEEE halves: rounded to the nearest half (ties to even) when written,
// widened to float32 when attention reads them, so that the scores, the
// softmax and the mix run in float32 as with a float cache. A half holds
// 11 significant bits: each element moves by at most 2^-11 of itself.
type kvRows struct {
	half bool
	f    []float32 // the rows without half
	h    []uint16  // the rows with half
}

// kvBlock is how many keys or values attention widens from halves at a
// time where no fused kernel reads them (f16Fused: the Go kernels, and a
// headDim not a multiple of 8): 32 rows of headDim 128 are 16 KiB of
// float32, which stay in L1 between the widening and the kernel.
const kvBlock = 32

// makeKVRows is n elements of zeros.
func makeKVRows(half bool, n int) kvRows {
	if half {
		return kvRows{half: true, h: make([]uint16, n)}
	}
	return kvRows{f: make([]float32, n)}
}

// reset empties the rows, keeping their memory.
func (c *kvRows) reset() { c.f, c.h = c.f[:0], c.h[:0] }

// append adds the elements of x after the rows.
func (c *kvRows) append(x []float32) {
	if !c.half {
		c.f = append(c.f, x...)
		return
	}
	c.h = append(c.h, make([]uint16, len(x))...)
	toHalves(c.h[len(c.h)-len(x):], x)
}

// put writes x's elements at element at.
func (c kvRows) put(at int, x []float32) {
	if !c.half {
		copy(c.f[at:at+len(x)], x)
		return
	}
	toHalves(c.h[at:at+len(x)], x)
}

// copyFrom copies src's elements (of the same type) over c's.
func (c kvRows) copyFrom(src kvRows) {
	copy(c.f, src.f)
	copy(c.h, src.h)
}

// floats is the rows in float32: the rows themselves, or widened into new
// memory.
func (c kvRows) floats() []float32 {
	if !c.half {
		return c.f
	}
	out := make([]float32, len(c.h))
	f16Row(out, c.h)
	return out
}

// toHalves rounds x to halves, ties to even (overflow to infinity, as
// ggml's and the GPU's conversions do): F16C's VCVTPS2PH where there is
// SIMD, gguf.F32ToF16 elsewhere.
func toHalves(dst []uint16, x []float32) {
	if useSIMD {
		toHalvesSIMD(dst, x)
		return
	}
	toHalvesGo(dst, x)
}

func toHalvesGo(dst []uint16, x []float32) {
	for i, v := range x {
		dst[i] = gguf.F32ToF16(v)
	}
}

// scores is the kernel scores over the len(out) keys whose element e·stride
// starts at off: out[e] = scale·q·k_e. Halves are widened as the F16C
// kernel loads them (f16Fused), or a block at a time into buf, kvBlock·len(q)
// floats of scratch.
func (c kvRows) scores(out, q []float32, off, stride int, scale float32, buf []float32) {
	hd := len(q)
	if !c.half {
		scores(out, q, c.f[off:], stride, hd, scale)
		return
	}
	if f16Fused(hd) {
		scoresF16Fused(out, q, c.h[off:], stride, scale)
		return
	}
	for e0 := 0; e0 < len(out); e0 += kvBlock {
		e1 := min(len(out), e0+kvBlock)
		c.widen(buf, off+e0*stride, stride, hd, e1-e0)
		scores(out[e0:e1], q, buf, hd, hd, scale)
	}
}

// mix is the kernel mix over the len(p) values whose element e·stride
// starts at off: out = Σ_e p[e]·v_e. Halves are widened as the F16C
// kernel loads them (f16Fused), or a block at a time into buf,
// kvBlock·len(out) floats, with part, len(out) floats, of scratch.
func (c kvRows) mix(out []float32, off, stride int, p, buf, part []float32) {
	hd := len(out)
	if !c.half {
		mix(out, c.f[off:], stride, p)
		return
	}
	if f16Fused(hd) {
		mixF16Fused(out, c.h[off:], stride, p)
		return
	}
	for e0 := 0; e0 < len(p); e0 += kvBlock {
		e1 := min(len(p), e0+kvBlock)
		c.widen(buf, off+e0*stride, stride, hd, e1-e0)
		if e0 == 0 {
			mix(out, buf, hd, p[e0:e1])
			continue
		}
		mix(part, buf, hd, p[e0:e1])
		addTo(out, part)
	}
}

// widen writes n rows of hd halves, the first at element off and each
// stride after the last, to buf as float32 [n][hd].
func (c kvRows) widen(buf []float32, off, stride, hd, n int) {
	for j := range n {
		f16Row(buf[j*hd:(j+1)*hd], c.h[off+j*stride:off+j*stride+hd])
	}
}

// kvElemBytes is the bytes of one cache element.
func kvElemBytes(half bool) int {
	if half {
		return 2
	}
	return 4
}
