package shaders

// Profiles the tests build through NewProfile.

// lavapipeProfile is lavapipe's profile as NewProfile makes it (lavapipe
// 22-23 on a 256-bit SIMD CPU), for tests that run without asking the device.
var lavapipeProfile = NewProfile(Device{CPU: true, SubgroupSize: 8, SubgroupArithmetic: true,
	SharedMemory: 32768, MaxWorkGroupInvocations: 1024, MaxStorageBufferRange: 128 << 20})

// gpuProfileOn is the profile a GPU of d's subgroup size would get, with
// subgroup arithmetic or without it (the shared-memory reduction, many
// invocations per row), for d: what tests use to run the GPU variants on
// lavapipe (subgroup size 8). It keeps d's loop cap, since the device
// still has it.
func gpuProfileOn(d Device, subgroupArithmetic bool) Profile {
	g := d
	g.CPU, g.SubgroupArithmetic = false, subgroupArithmetic
	p := NewProfile(g)
	if d.CPU {
		p.LoopCap = LavapipeLoopIterations
	}
	return p
}
