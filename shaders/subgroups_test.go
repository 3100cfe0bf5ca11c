package shaders

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A reported subgroup size counts only where every dispatch is sure to get
// it; where it is not, the profile's matvec and the score and route kernels
// are the shared-memory ones.
func TestDispatchSubgroupSize(t *testing.T) {
	for _, c := range []struct {
		name                             string
		vendor, reported, min, max, want uint32
	}{
		{"NVIDIA, declared", VendorNVIDIA, 32, 32, 32, 32},
		{"NVIDIA, no range", VendorNVIDIA, 32, 0, 0, 32},
		{"Apple via MoltenVK", VendorApple, 32, 0, 0, 32},
		{"AMD GCN", VendorAMD, 64, 64, 64, 64},
		{"AMD RDNA", VendorAMD, 64, 32, 64, 0},
		{"AMD, no range", VendorAMD, 64, 0, 0, 0},
		{"Intel", VendorIntel, 32, 8, 32, 0},
		{"Intel, no range", VendorIntel, 32, 0, 0, 0},
		{"Mali", VendorARM, 16, 16, 16, 16},
		{"Adreno", VendorQualcomm, 64, 64, 128, 0},
		{"lavapipe", VendorMesa, 8, 8, 8, 8},
		{"range not holding the reported size", VendorNVIDIA, 32, 16, 16, 0},
		{"unknown vendor", 0x1234, 32, 0, 0, 0},
		{"no size", VendorNVIDIA, 0, 0, 0, 0},
	} {
		assert.Equal(t, c.want, DispatchSubgroupSize(c.vendor, c.reported, c.min, c.max), c.name)
	}
}

// With no sure subgroup size, no kernel whose correctness depends on it is
// chosen: matvec reduces in shared memory, and the score and route kernels
// are the tree variants, whatever the device's subgroup arithmetic.
func TestNoSureSubgroupSizeNoSubgroupKernels(t *testing.T) {
	intel := Device{SubgroupSize: DispatchSubgroupSize(VendorIntel, 32, 8, 32), SubgroupArithmetic: true,
		SharedMemory: 65536, MaxWorkGroupInvocations: 1024, MaxStorageBufferRange: 1 << 30}
	p := NewProfile(intel)
	assert.Equal(t, ReduceShared, p.MatvecReduce)
	for _, typ := range MatvecTypes {
		for _, fuse := range MatvecFusions {
			name, _ := p.Matvec(typ, fuse, 1, 2048)
			assert.Equal(t, MatvecFusedName(typ, ReduceShared, fuse), name, fmt.Sprintf("%s%s", typ, fuse))
		}
	}
	sd := ScoreDevice{SubgroupSize: intel.SubgroupSize, SubgroupArithmetic: true}
	for _, n := range []uint32{1, 512} {
		assert.Equal(t, "router_score", PlanScore(sd, n, 1, 2048, true).Variant)
	}
	assert.Equal(t, "route_decode", RouteDecodeVariant(sd, false, true))
	assert.Equal(t, "route_decode_pred", RouteDecodeVariant(sd, true, true))
}
