package shaders

import "slices"

// The subgroup kernels (matvec's ReduceSubgroup, router_score_sg,
// route_decode_sg: every variant whose SPIR-V uses subgroup operations,
// Needs.Subgroups) give a row, or a dot product, whole subgroups: they are
// correct only when every subgroup of a dispatch has the size the profile
// planned for. The size a driver reports is not a promise of that: Intel's
// compiler picks SIMD8, 16 or 32 per shader while reporting 32, and AMD's
// RDNA runs wave32 or wave64 while reporting 64. So a profile counts on a
// size only where it is sure (SubgroupSizeFor):
//   - the device can require it (VK_EXT_subgroup_size_control, core in
//     Vulkan 1.3, with computeFullSubgroups): every subgroup kernel's
//     pipeline then requires the size, full (Profile.RequiredSubgroupSize);
//   - or the device has one compute size (DispatchSubgroupSize);
//
// and otherwise on none (0), which selects the shared-memory kernels: safe,
// not fast.

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

// VendorSubgroups is one row of the vendor table: the subgroup sizes a
// vendor's GPUs run compute shaders with, from the vendors' public
// documentation. Not measured here on any of them but NVIDIA (an H100):
// the table decides what is sure, never what is fast.
type VendorSubgroups struct {
	Vendor uint32
	Name   string
	// Fixed is the one size every compute dispatch of every GPU of the
	// vendor gets, so that a report of it is sure even without a declared
	// range; 0 when the size varies by GPU or by shader.
	Fixed uint32
	Sizes string // the sizes, in words, for `modrun devices` and docs
}

// Vendors is the vendor table.
//   - NVIDIA: warps of 32 threads on every architecture (CUDA C++
//     Programming Guide, "SIMT Architecture").
//   - AMD: GCN and CDNA run wavefronts of 64; RDNA runs wave32 and wave64,
//     the compiler choosing per shader (RDNA ISA guides; RADV and AMDVLK
//     declare a compute range of 32 to 64).
//   - Intel: SIMD8, SIMD16 or SIMD32, chosen per shader by the compiler
//     (Intel's GPU optimization guides); drivers report 32 and declare a
//     range of 8 to 32.
//   - Apple (MoltenVK over Metal): SIMD-groups of 32 on every Apple GPU
//     (Metal Feature Set Tables, threadExecutionWidth).
//   - Arm Mali: warps of 16 on Valhall and later (Arm Mali GPU
//     documentation); Bifrost has 4 or 8. Not fixed across the vendor: a
//     Mali counts as sure through its declared range only.
//   - Qualcomm Adreno: waves of 64 or 128 (Adreno OpenCL programming guide).
//   - Mesa lavapipe (a CPU): its SIMD width, 8 floats on AVX2, one size.
//
// Unknown vendors get nothing from the table: a size counts only when the
// device declares it as its one size, or can require it.
var Vendors = []VendorSubgroups{
	{VendorNVIDIA, "NVIDIA", 32, "32"},
	{VendorAMD, "AMD", 0, "64 (GCN, CDNA), 32 or 64 (RDNA)"},
	{VendorIntel, "Intel", 0, "8, 16 or 32, per shader"},
	{VendorApple, "Apple (MoltenVK)", 32, "32"},
	{VendorARM, "Arm Mali", 0, "16 (Valhall and later), 4 or 8 (Bifrost)"},
	{VendorQualcomm, "Qualcomm Adreno", 0, "64 or 128"},
	{VendorMesa, "Mesa (lavapipe)", 0, "the CPU's SIMD width (8 on AVX2)"},
}

// Vendor is vendor's row of the table, and whether there is one.
func Vendor(vendor uint32) (VendorSubgroups, bool) {
	i := slices.IndexFunc(Vendors, func(v VendorSubgroups) bool { return v.Vendor == vendor })
	if i < 0 {
		return VendorSubgroups{Name: "unknown vendor", Sizes: "unknown"}, false
	}
	return Vendors[i], true
}

// DispatchSubgroupSize is the subgroup size every compute dispatch on a
// device gets without asking for one, from the size it reports and the
// range of compute subgroup sizes it declares (VK_EXT_subgroup_size_control's
// minSubgroupSize and maxSubgroupSize, 0 when the device declares none), or
// 0 when no size is sure:
//   - a declared range of one size, the size reported, is that size
//     (NVIDIA, AMD GCN, Mali Valhall and lavapipe declare so);
//   - a vendor with a Fixed size (NVIDIA, Apple) is sure of it without a
//     range;
//   - a range of several sizes (Intel, RDNA, Adreno), or no range from
//     another vendor, is not sure.
func DispatchSubgroupSize(vendor, reported, min, max uint32) uint32 {
	v, _ := Vendor(vendor)
	switch {
	case reported == 0:
		return 0
	case min != 0 || max != 0:
		if min == max && min == reported {
			return reported
		}
		return 0
	case v.Fixed != 0 && reported == v.Fixed:
		return reported
	}
	return 0
}

// SubgroupFacts are what a device says of its compute subgroups.
type SubgroupFacts struct {
	Vendor   uint32
	Reported uint32 // VkPhysicalDeviceSubgroupProperties.subgroupSize
	Min, Max uint32 // the declared compute range; 0 when none
	// Control: a compute pipeline may require a size in [Min, Max], with
	// full subgroups (subgroupSizeControl, computeFullSubgroups, compute
	// among requiredSubgroupSizeStages).
	Control bool
}

// SubgroupSizeFor is the subgroup size a device's subgroup kernels may
// count on, and whether their pipelines must require it (0, false: none;
// the profile then picks the shared-memory kernels). With size control the
// size is the reported one where it is in the declared range (the driver's
// own default for the device), else the largest the range holds; required
// even where the range is one size, since requiring costs nothing.
func SubgroupSizeFor(f SubgroupFacts) (size uint32, require bool) {
	pow2 := func(s uint32) bool { return s != 0 && s&(s-1) == 0 }
	if f.Control && f.Min != 0 && f.Min <= f.Max {
		for _, s := range []uint32{f.Reported, f.Max, f.Min} {
			if pow2(s) && s >= f.Min && s <= f.Max {
				return s, true
			}
		}
	}
	return DispatchSubgroupSize(f.Vendor, f.Reported, f.Min, f.Max), false
}

// subgroupsUsable is the one rule for a subgroup kernel on a device with
// subgroups of size: the device has subgroup arithmetic, and size is a
// power of two from 4 up to largest, the caller's bound (the biggest
// subgroup its workgroups hold a whole number of: 128 for matvec, whose
// workgroup is sized from the subgroup; 64 for the routing kernels, whose
// smallest workgroup is 64).
func subgroupsUsable(arithmetic bool, size, largest uint32) bool {
	return arithmetic && size >= 4 && size <= largest && size&(size-1) == 0
}
