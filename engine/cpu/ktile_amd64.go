package cpu

//go:noescape
func kTileVNNI(w *byte, x *int8, xstride int, tab *uint32, nk int, out *float32, ostride, groups, narrow int)

//go:noescape
func laneQ4KVNNI(dst *byte, qs *byte)

//go:noescape
func lane2VNNI(dst *byte, qs *byte, hmask *byte)

// kPrefetch hints n bytes from p into the caches (PREFETCHT0 a line).
//
//go:noescape
func kPrefetch(p *byte, n int)
