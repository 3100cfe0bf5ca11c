//go:build !amd64

package cpu

// f16Fused: no F16C kernels here; halves are widened a block at a time.
func f16Fused(hd int) bool { return false }

var fuseF16 = false

func scoresF16Fused(out, q []float32, k []uint16, stride int, scale float32) {
	panic("cpu: no F16C kernels on this architecture")
}

func mixF16Fused(out []float32, v []uint16, stride int, p []float32) {
	panic("cpu: no F16C kernels on this architecture")
}

func toHalvesSIMD(dst []uint16, x []float32) { toHalvesGo(dst, x) }
