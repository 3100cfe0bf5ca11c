//go:build !amd64

package cpu

import "github.com/modrun/modrun/gguf"

func dotQ41SIMD(w []byte, x []int8, xd []float32) float32 {
	return dotLegacyGo(gguf.TypeQ4_1, w, x, xd)
}

func dotQ50SIMD(w []byte, x []int8, xd []float32) float32 {
	return dotLegacyGo(gguf.TypeQ5_0, w, x, xd)
}

func dotQ51SIMD(w []byte, x []int8, xd []float32) float32 {
	return dotLegacyGo(gguf.TypeQ5_1, w, x, xd)
}

func legacyTileVNNI(raw *byte, rb, nb, lb, qs, qh, m, bias int, q *byte, d *float32) {
	panic("cpu: no VNNI kernels on this architecture")
}
