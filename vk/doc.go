// Package vk is modrun's thin Go layer over Vulkan compute: instance and
// device choice, buffers, compute kernels from SPIR-V, and recorders whose
// barriers are derived from what each command reads and writes. It knows
// nothing of models. The nouns are Kompute's: a Device makes Buffers and
// Kernels; a Recorder is a sequence recorded once and run (replayed) many
// times with Device.Run.
//
// The Vulkan loader (libvulkan.so.1) is opened with dlopen at run time, so a
// binary runs on a machine without Vulkan: NewInstance then returns an error
// wrapping ErrNoVulkan, and the caller falls back to the CPU. A build
// without cgo behaves the same. Errors name the failing Vulkan call and its
// VkResult: "vk: vkCreateDevice: VK_ERROR_INITIALIZATION_FAILED".
//
// Only core Vulkan 1.2 is required. Optional features (Features) are
// detected and enabled when present; a kernel that needs one must be chosen
// only when DeviceInfo says so. With VK_EXT_subgroup_size_control a kernel
// may require its subgroup size, all subgroups full
// (KernelSpec.RequiredSubgroupSize, DeviceInfo.CanRequireSubgroupSize).
// A DeviceInfo with features off or limits lower (vktest.Restriction) makes
// a smaller device, for tests of what runs on small GPUs.
//
// The Vulkan instance is the process's: NewInstance creates it once per
// InstanceOptions and hands out handles, because NVIDIA's driver refuses
// vkCreateInstance after about 30 create/destroy cycles in one process
// (InstancesCreated counts them). Devices open at once on the same physical
// device with the same features share one VkDevice and queue, which the
// last Close destroys.
//
// Typical use:
//
//	inst, err := vk.NewInstance(vk.InstanceOptions{})
//	devs, err := inst.Devices()
//	info, err := vk.ChooseDevice(devs, flagDevice) // -1: $MODRUN_DEVICE, else the best
//	dev, err := inst.NewDevice(info)
//	w, err := dev.NewBuffer(n, vk.DeviceLocal); err = w.Upload(bytes, 0)
//	k, err := dev.NewKernel(spirv, vk.KernelSpec{Name: "matvec_f16", Bindings: 3, PushConstantBytes: 12})
//	rec := dev.NewRecorder()
//	rec.Dispatch(k, vk.MustPackPush(push), groups,
//		vk.Bind{Buf: w, Access: vk.Read}, vk.Bind{Buf: x, Access: vk.Read}, vk.Bind{Buf: y, Access: vk.Write})
//	err = dev.Run(rec) // records, submits, waits; call again to replay
//
// # Synchronization
//
// Barriers are derived (track.go): a command that reads what an earlier one
// wrote, or writes what an earlier one read or wrote, gets a pipeline
// barrier with the right stages (compute, transfer, draw-indirect for
// DispatchIndirect arguments, conditional rendering for a
// BeginConditional predicate); others get none. One exception to the
// spec's masks: a predicate written by a copy or fill is ordered from
// ALL_COMMANDS, since NVIDIA's driver reads it stale through a TRANSFER-stage
// barrier (transferToPredicate). Each command buffer starts
// with one memory barrier against everything submitted before it (replays
// included) and ends with one to the host when it wrote host-visible memory.
// Tests run under the Khronos validation layer with synchronization
// validation, which reports any hazard the derived barriers would miss.
//
// # lavapipe (Mesa 22.3.6, LLVM 15, "llvmpipe (LLVM 15.0.6, 256 bits)"), measured here
//
//   - type cpu, Vulkan 1.3.230; a 2 GiB device-local heap (host memory).
//   - subgroup size 8 (one 256-bit SIMD register of float32), the one size
//     of its declared compute range [8, 8]; subgroupSizeControl and
//     computeFullSubgroups for compute (maxComputeWorkgroupSubgroups 32);
//     subgroup arithmetic and shuffle supported; float16, int8, 8/16-bit
//     storage supported; no VK_KHR_cooperative_matrix.
//   - maxComputeSharedMemorySize 32 KiB, 1024 invocations per workgroup,
//     65535 workgroups per dimension.
//   - maxStorageBufferRange 128 MiB: a larger tensor must be bound in pieces
//     (Limits.MaxStorageBufferRange; Dispatch refuses a bigger Bind).
//   - minStorageBufferOffsetAlignment 16, maxPushConstantsSize 128.
//   - timestamps: 1 ns per tick, 64 valid bits.
//   - cost (BenchmarkDispatch, a loaded 2-core machine): ~25 us per tiny
//     dispatch whether a barrier precedes it or not, ~40 us per submit+wait
//     of an almost empty command buffer. Barriers are cheap there; the
//     number of dispatches is what counts.
//   - workgroup barriers are expensive: a kernel whose invocations share a
//     row through shared memory ran 2-3x slower than one where each
//     invocation owns a row (see shaders.NewProfile).
//   - an invocation's loops stop, silently, after 65535 iterations in all
//     (llvmpipe's LP_MAX_TGSI_LOOP_ITERATIONS): no error, a wrong result. A
//     kernel must keep each invocation's iterations under it on a CPU device
//     (shaders.LavapipeLoopIterations, the loop cap of shaders.Profile).
package vk
