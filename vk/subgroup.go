package vk

import "fmt"

// CanRequireSubgroupSize says whether a compute pipeline on the device may
// require subgroups of exactly size invocations, all full
// (KernelSpec.RequiredSubgroupSize): the device enables subgroupSizeControl
// and computeFullSubgroups, lists the compute stage among
// requiredSubgroupSizeStages, and size is a power of two in
// [MinSubgroupSize, MaxSubgroupSize]. The error says which is missing.
func (d DeviceInfo) CanRequireSubgroupSize(size uint32) error {
	f, l := d.Features, d.Limits
	switch {
	case !f.SubgroupSizeControl:
		return fmt.Errorf("subgroup size %d: the device has no subgroupSizeControl (VK_EXT_subgroup_size_control)", size)
	case !f.ComputeFullSubgroups:
		return fmt.Errorf("subgroup size %d: the device has no computeFullSubgroups", size)
	case !l.RequiredSubgroupSizeCompute:
		return fmt.Errorf("subgroup size %d: compute is not among the device's requiredSubgroupSizeStages", size)
	case size == 0 || size&(size-1) != 0 || size < l.MinSubgroupSize || size > l.MaxSubgroupSize:
		return fmt.Errorf("subgroup size %d: not a power of two in the device's compute range [%d, %d]",
			size, l.MinSubgroupSize, l.MaxSubgroupSize)
	}
	return nil
}
