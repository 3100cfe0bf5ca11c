package shaders

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestMatvecBatch: a batched step's matvec (Profile.MatvecBatch) on each
// kind of profile, from the rules its comment gives.
func TestMatvecBatch(t *testing.T) {
	nvidia := NewProfile(Device{Vendor: VendorNVIDIA, SubgroupSize: 32, SubgroupArithmetic: true, MaxWorkGroupInvocations: 1024})
	amd := NewProfile(Device{Vendor: VendorAMD, SubgroupSize: 64, SubgroupArithmetic: true, MaxWorkGroupInvocations: 1024, RequireSubgroupSize: true})
	lavapipeGPU := GPUProfile(lavapipeProfile.Device)
	cases := []struct {
		prof             Profile
		typ, fuse        string
		n, nb, cols      uint32
		name             string
		spec             []uint32
		decodeAtN, spec1 bool // the result is Matvec's own for n vectors; NB set to min(n, nb)
	}{
		// NVIDIA: matvec_words walking 4 rows, 4 units in flight (the H200's measured configuration).
		{prof: nvidia, typ: MatvecQ8_0, fuse: FuseNorm, n: 8, nb: 16, cols: 4096, name: "matvec_q8_0_sgwords_norm", spec: []uint32{128, 32, 8, 4, 4}},
		{prof: nvidia, typ: MatvecQ8_0, fuse: FuseNormSwiGLU, n: 16, nb: 16, cols: 4096, name: "matvec_q8_0_sgwords_norm_swiglu", spec: []uint32{128, 32, 16, 2, 4}},
		{prof: nvidia, typ: MatvecF16, fuse: FuseAdd, n: 3, nb: 16, cols: 4096, name: "matvec_f16_sgwords_add", spec: []uint32{128, 32, 3, 4, 4}},
		{prof: nvidia, typ: MatvecQ4_K, fuse: FuseNone, n: 16, nb: 16, cols: 4096, name: "matvec_q4_k_sgwords", spec: []uint32{128, 32, 16, 4, 4}},
		{prof: nvidia, typ: MatvecQ8_0, fuse: FuseNone, n: 20, nb: 8, cols: 4096, name: "matvec_q8_0_sgwords", spec: []uint32{128, 32, 8, 4, 4}},
		// Elsewhere fewer units in flight as the vectors grow; Q4_K walks 2 rows at 16.
		{prof: amd, typ: MatvecQ8_0, fuse: FuseNorm, n: 2, nb: 16, cols: 4096, name: "matvec_q8_0_sgwords_norm", spec: []uint32{256, 64, 2, 4, 4}},
		{prof: amd, typ: MatvecQ8_0, fuse: FuseNorm, n: 8, nb: 16, cols: 4096, name: "matvec_q8_0_sgwords_norm", spec: []uint32{256, 64, 8, 4, 2}},
		{prof: amd, typ: MatvecF16, fuse: FuseNormSwiGLU, n: 16, nb: 16, cols: 4096, name: "matvec_f16_sgwords_norm_swiglu", spec: []uint32{256, 64, 16, 2, 1}},
		{prof: amd, typ: MatvecQ4_K, fuse: FuseNorm, n: 16, nb: 16, cols: 4096, name: "matvec_q4_k_sgwords_norm", spec: []uint32{256, 64, 16, 2, 1}},
		{prof: amd, typ: MatvecQ4_K, fuse: FuseNormSwiGLU, n: 16, nb: 16, cols: 4096, name: "matvec_q4_k_sgwords_norm_swiglu", spec: []uint32{256, 64, 16, 1, 1}},
		{prof: amd, typ: MatvecQ4_K, fuse: FuseNormSwiGLU, n: 8, nb: 16, cols: 4096, name: "matvec_q4_k_sgwords_norm_swiglu", spec: []uint32{256, 64, 8, 2, 2}},
		// One vector, the types matvec_words was not measured on, and rows
		// it cannot read: Matvec's own kernel, NB set.
		{prof: nvidia, typ: MatvecQ8_0, fuse: FuseNorm, n: 1, nb: 16, cols: 4096, decodeAtN: true},
		{prof: nvidia, typ: MatvecQ4_1, fuse: FuseNorm, n: 8, nb: 16, cols: 4096, decodeAtN: true, spec1: true},
		{prof: nvidia, typ: MatvecQ6_K, fuse: FuseNone, n: 8, nb: 16, cols: 4096, decodeAtN: true, spec1: true},
		{prof: nvidia, typ: MatvecQ8_0, fuse: FuseNone, n: 8, nb: 16, cols: 4112, decodeAtN: true, spec1: true},
		// lavapipe's own profile: its kernels, NB set.
		{prof: lavapipeProfile, typ: MatvecQ8_0, fuse: FuseNone, n: 8, nb: 8, cols: 288, decodeAtN: true, spec1: true},
		// lavapipe's GPU profile (subgroups of 8, its loop cap kept): matvec_words.
		{prof: lavapipeGPU, typ: MatvecQ8_0, fuse: FuseNormSwiGLU, n: 8, nb: 8, cols: 288, name: "matvec_q8_0_sgwords_norm_swiglu", spec: []uint32{32, 8, 8, 2, 2}},
		// past the loop cap: Matvec's own, a vector a pass
		{prof: lavapipeGPU, typ: MatvecQ8_0, fuse: FuseNormSwiGLU, n: 64, nb: 8, cols: 16384, decodeAtN: true},
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("%d/%s%s/n%d/nb%d/cols%d", i, c.typ, c.fuse, c.n, c.nb, c.cols), func(t *testing.T) {
			name, spec := c.prof.MatvecBatch(c.typ, c.fuse, c.n, c.nb, c.cols)
			if c.decodeAtN {
				ownName, own := c.prof.Matvec(c.typ, c.fuse, c.n, c.cols)
				want := append([]uint32(nil), own...)
				if c.spec1 {
					want[2] = min(c.n, c.nb)
				}
				assert.Equal(t, ownName, name)
				assert.Equal(t, want, spec)
				return
			}
			assert.Equal(t, c.name, name)
			assert.Equal(t, c.spec, spec)
		})
	}
}
