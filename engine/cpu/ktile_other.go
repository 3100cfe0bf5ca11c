//go:build !amd64

package cpu

func kTileVNNI(w *byte, x *int8, xstride int, tab *uint32, nk int, out *float32, ostride, groups, narrow int) {
	panic("cpu: no VNNI kernels on this architecture")
}

func laneQ4KVNNI(dst *byte, qs *byte) {
	panic("cpu: no VNNI kernels on this architecture")
}

func lane2VNNI(dst *byte, qs *byte, hmask *byte) {
	panic("cpu: no VNNI kernels on this architecture")
}

func kPrefetch(p *byte, n int) {}
