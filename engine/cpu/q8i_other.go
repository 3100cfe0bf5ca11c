//go:build !amd64

package cpu

// dotQ8i is never called here: hasVNNI is false, so no matrix is
// interleaved.
func dotQ8i(wq []byte, wd []float32, nb int, xq []int8, xa []q8iAct, k int, out []float32, ostride int) {
	dotQ8iGo(wq, wd, nb, xq, xa, k, out, ostride)
}

// dotQ8l is never called here: hasVNNI is false.
func dotQ8l(wq []byte, wd []float32, nb int, xq []int8, xa []q8lAct, k int, out []float32, ostride int) {
	panic("cpu: no VNNI kernels on this architecture")
}
