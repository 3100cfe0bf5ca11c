//go:build !amd64

package cpu

import "github.com/modrun/modrun/gguf"

func dotQ2KSIMD(w []byte, x []int8, xd []float32, bs []int16) float32 {
	return dotKGo(gguf.TypeQ2_K, w, x, xd, bs)
}

func dotQ3KSIMD(w []byte, x []int8, xd []float32, bs []int16) float32 {
	return dotKGo(gguf.TypeQ3_K, w, x, xd, bs)
}
