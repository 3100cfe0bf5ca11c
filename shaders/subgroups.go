package shaders

// The subgroup kernels (matvec's ReduceSubgroup, router_score_sg,
// route_decode_sg) give a row, or a dot product, whole subgroups: they are
// correct only when every subgroup of a dispatch has the size the profile
// planned for. The size a driver reports is not a promise of that: Intel's
// compiler picks SIMD8, 16 or 32 per shader while reporting 32, and AMD's
// RDNA runs wave32 or wave64 while reporting 64. So the profile is given
// the size a dispatch is sure to get (DispatchSubgroupSize), and 0 where no
// size is sure, which selects the shared-memory kernels: safe, not fast.

// PCI vendor IDs of the GPUs the table below knows.
const (
	VendorAMD      = 0x1002
	VendorApple    = 0x106b
	VendorARM      = 0x13b5
	VendorIntel    = 0x8086
	VendorMesa     = 0x10005 // Mesa's software devices (lavapipe): Khronos-assigned
	VendorNVIDIA   = 0x10de
	VendorQualcomm = 0x5143
)

// DispatchSubgroupSize is the subgroup size every compute dispatch on a
// device gets, from the size it reports and the range of compute subgroup
// sizes it declares (VK_EXT_subgroup_size_control's minSubgroupSize and
// maxSubgroupSize, 0 when the device declares none), or 0 when no size is
// sure. The vendor table, from the vendors' public documentation:
//   - a declared range of one size is that size: NVIDIA (32), AMD GCN (64),
//     Arm Mali Valhall (16), lavapipe (its SIMD width, 8 on AVX2) declare so;
//   - NVIDIA and Apple (through MoltenVK) run 32-wide warps and SIMD-groups
//     on every GPU, so a reported 32 is sure even without a range;
//   - a range of several sizes is not sure: Intel (8 to 32, chosen per
//     shader by the compiler), AMD RDNA (32 and 64), Qualcomm Adreno (64 and
//     128);
//   - anything else (no range, another vendor) is not sure either.
//
// Requesting a size with requiredSubgroupSize (which would make the Intel
// and RDNA sizes sure) is not done yet: those GPUs run the shared-memory
// kernels.
func DispatchSubgroupSize(vendor, reported, min, max uint32) uint32 {
	switch {
	case reported == 0:
		return 0
	case min != 0 || max != 0:
		if min == max && min == reported {
			return reported
		}
		return 0
	case (vendor == VendorNVIDIA || vendor == VendorApple) && reported == 32:
		return 32
	}
	return 0
}
