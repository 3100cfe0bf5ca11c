//go:build !amd64

package cpu

import (
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/mod"
)

// simdName is "" where no assembly kernels exist: the Go ones run.
const simdName = ""

// hasVNNI: no AVX-512 kernels here either.
const hasVNNI = false

func dotQ8SIMD(w, x []int8, wd, xd []float32) float32        { return dotQ8Go(w, x, wd, xd) }
func dotQ4SIMD(w []byte, x []int8, wd, xd []float32) float32 { return dotQ4Go(w, x, wd, xd) }
func dotF32SIMD(w, x []float32) float32                      { return mod.DotF32(w, x) }
func dotF16SIMD(w []uint16, x []float32) float32             { return dotF16Go(w, x) }

func dotQ8x4SIMD(w []int8, wd []float32, x []int8, xd []float32, cols int, out *[4]float32) {
	dotQ8x4Go(w, wd, x, xd, cols, out)
}

func scoresSIMD(out, q, k []float32, stride, hd int, scale float32) {
	scoresGo(out, q, k, stride, hd, scale)
}
func mixSIMD(out, v []float32, stride int, p []float32) { mixGo(out, v, stride, p) }
func f16RowSIMD(dst []float32, src []uint16)            { f16RowGo(dst, src) }

func dotQ4x4SIMD(w []byte, wd []float32, x []int8, xd []float32, cols int, out *[4]float32) {
	dotQ4x4Go(w, wd, x, xd, cols, out)
}

func quantizeRowSIMD(q []int8, d []float32, x []float32) { quantizeRowGo(q, d, x) }
func dotF32x3x4SIMD(w []float32, x []float32, n int, out *[12]float32) {
	dotF32x3x4Go(w, x, n, out)
}
func swigluSIMD(gate, up []float32)              { swigluGo(gate, up) }
func expSumSIMD(x []float32, mx float32) float32 { return expSumGo(x, mx) }

func dotQ8x4x4VNNI(w []int8, wd []float32, x []int8, xd []float32, cols int, out *[16]float32) {
	panic("cpu: no VNNI kernels on this architecture")
}

func dotQ4KSIMD(w []byte, x []int8, xd []float32, bs []int16) float32 {
	return dotKGo(gguf.TypeQ4_K, w, x, xd, bs)
}

func dotQ6KSIMD(w []byte, x []int8, xd []float32, bs []int16) float32 {
	return dotKGo(gguf.TypeQ6_K, w, x, xd, bs)
}

func dotQ5KSIMD(w []byte, x []int8, xd []float32, bs []int16) float32 {
	return dotKGo(gguf.TypeQ5_K, w, x, xd, bs)
}

func quantizeKSIMD(q []int8, d []float32, bs []int16, x []float32) { quantizeKGo(q, d, bs, x) }
