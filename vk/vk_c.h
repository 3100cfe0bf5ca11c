// vk_c.h: the C side of package vk. The Vulkan loader is opened with dlopen
// (VK_NO_PROTOTYPES: nothing links against libvulkan), every function is
// resolved through vkGetInstanceProcAddr / vkGetDeviceProcAddr into a table,
// and small wrappers call through the table, because cgo cannot call a C
// function pointer.
//
// Every Vulkan handle and table pointer crosses into Go as a uint64_t, so the
// Go structs hold plain integers. C never keeps a pointer into Go memory past
// the call that received it. A wrapper doing several Vulkan calls names the
// one that failed in *call and frees what it had created.
#ifndef MODRUN_VK_C_H
#define MODRUN_VK_C_H

#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan.h>
#include <stdint.h>
#include <stddef.h>

// Loader.
const char *mr_load(void); // NULL on success, else a static message
uint32_t mr_instance_version(void);
uint32_t mr_layer_spec_version(const char *name); // the layer's specVersion; 0 when absent
int mr_has_layer(const char *name);
int mr_has_instance_extension(const char *layer, const char *name); // layer may be NULL

// Instance. *out is an mr_instance* (function table + handle + messages).
// It is never destroyed: the Go side keeps it for the process's life.
VkResult mr_create_instance(uint32_t api, int validation, int syncval, uint64_t *out, const char **call);
char *mr_pop_message(uint64_t inst); // malloc'd, or NULL when none is queued

// Physical devices.
VkResult mr_enumerate_devices(uint64_t inst, uint32_t *count, uint64_t *out);

typedef struct mr_device_info {
	char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
	char driver_name[VK_MAX_DRIVER_NAME_SIZE];
	char driver_info[VK_MAX_DRIVER_INFO_SIZE];
	uint32_t api_version, driver_version, vendor_id, device_id, type;
	uint64_t device_local_bytes; // the largest device-local heap
	uint64_t max_storage_buffer_range;
	uint32_t max_shared_memory, max_invocations, max_size[3], max_count[3];
	uint32_t max_push_constants;
	uint64_t min_storage_offset_alignment;
	float timestamp_period;
	uint32_t timestamp_compute_and_graphics, timestamp_valid_bits;
	uint32_t subgroup_size, subgroup_stages, subgroup_ops;
	uint32_t min_subgroup, max_subgroup; // VK_EXT_subgroup_size_control's compute range; 0 when not offered
	uint32_t max_workgroup_subgroups, required_subgroup_stages; // its properties; 0 when not offered
	uint32_t size_control, full_subgroups; // its features subgroupSizeControl, computeFullSubgroups
	uint32_t f16, i8, sb16, sb8, coopmat;
	uint32_t vmm; // vulkanMemoryModel with vulkanMemoryModelDeviceScope
	uint32_t coopmat_nv; // VK_NV_cooperative_matrix, its cooperativeMatrix feature and f16 x f16 -> f32 16x16x16 at subgroup scope
	uint32_t coopmat_khr; // VK_KHR_cooperative_matrix, the same feature and shape
	uint32_t cond_render; // VK_EXT_conditional_rendering with its conditionalRendering feature
	uint32_t exec_props; // VK_KHR_pipeline_executable_properties with its pipelineExecutableInfo feature
	uint32_t idot; // VK_KHR_shader_integer_dot_product with its shaderIntegerDotProduct feature
	uint32_t idot_accel; // its integerDotProduct4x8BitPackedSignedAccelerated property
	// compute_units: the device's SMs (VK_NV_shader_sm_builtins' shaderSMCount)
	// or CUs (VK_AMD_shader_core_properties2's activeComputeUnitCount, else
	// VK_AMD_shader_core_properties' engines x arrays x CUs an array); 0 when
	// the device does not say.
	uint32_t compute_units;
	int32_t compute_family; // -1: none
} mr_device_info;
void mr_device_info_get(uint64_t inst, uint64_t phys, mr_device_info *out);

// Device: *out is an mr_device* (function table, device, queue, memory
// properties, command pool, fence).
VkResult mr_create_device(uint64_t inst, uint64_t phys, uint32_t family,
	int f16, int i8, int sb16, int sb8, int cond_render, int size_control, int full_subgroups,
	int vmm, int coopmat_nv, int coopmat_khr, int exec_stats, int idot, uint64_t *out, const char **call);
// mr_clone_device makes another handle on base's VkDevice and queue, with
// a command pool and fence of its own; submits through any handle are
// serialized on the queue. mr_destroy_device waits idle and frees a handle;
// base's own destroys the VkDevice, so it goes last.
VkResult mr_clone_device(uint64_t base, uint64_t *out, const char **call);
void mr_destroy_device(uint64_t dev); // waits idle first
VkResult mr_wait_idle(uint64_t dev);

// Buffers and memory. mem_required/mem_preferred are VkMemoryPropertyFlags.
VkResult mr_create_buffer(uint64_t dev, uint64_t size, uint32_t usage, uint32_t mem_required,
	uint32_t mem_preferred, int map, uint64_t *buf, uint64_t *mem, void **mapped, const char **call);
void mr_destroy_buffer(uint64_t dev, uint64_t buf, uint64_t mem);

// Kernels: a shader module, a descriptor set layout of `bindings` storage
// buffers, a pipeline layout with push constants, a compute pipeline;
// subgroup_size != 0 requires that subgroup size with full subgroups (a
// device made with size_control and full_subgroups).
VkResult mr_create_kernel(uint64_t dev, const uint32_t *code, size_t code_bytes,
	uint32_t bindings, uint32_t push_bytes, const uint32_t *spec, uint32_t nspec, uint32_t subgroup_size,
	uint64_t *dsl, uint64_t *layout, uint64_t *pipeline, const char **call);
void mr_destroy_kernel(uint64_t dev, uint64_t dsl, uint64_t layout, uint64_t pipeline);
// A compiler statistic of a kernel (VkPipelineExecutableStatisticKHR of
// executable exec), its value as a double whatever its format (a
// VkPipelineExecutableStatisticFormatKHR).
typedef struct mr_stat {
	char exec[VK_MAX_DESCRIPTION_SIZE], name[VK_MAX_DESCRIPTION_SIZE], desc[VK_MAX_DESCRIPTION_SIZE];
	uint32_t format;
	double value;
} mr_stat;
VkResult mr_kernel_stats(uint64_t dev, uint64_t pipeline, mr_stat *out, uint32_t cap, uint32_t *n, const char **call);

// Descriptor pools and sets.
VkResult mr_create_descriptor_pool(uint64_t dev, uint32_t sets, uint32_t descriptors, uint64_t *pool);
void mr_destroy_descriptor_pool(uint64_t dev, uint64_t pool);
VkResult mr_allocate_set(uint64_t dev, uint64_t pool, uint64_t dsl, uint64_t *set);
void mr_write_set(uint64_t dev, uint64_t set, uint32_t n, const uint64_t *bufs,
	const uint64_t *offsets, const uint64_t *sizes);

// Query pools (timestamps).
VkResult mr_create_query_pool(uint64_t dev, uint32_t count, uint64_t *pool);
void mr_destroy_query_pool(uint64_t dev, uint64_t pool);
VkResult mr_query_results(uint64_t dev, uint64_t pool, uint32_t count, uint64_t *out);

// Command buffers, allocated from the device's pool.
VkResult mr_begin(uint64_t dev, uint64_t *cb, int one_time, const char **call);
VkResult mr_end(uint64_t dev, uint64_t cb);
void mr_free_command_buffer(uint64_t dev, uint64_t cb);
void mr_cmd_dispatch(uint64_t dev, uint64_t cb, uint64_t pipeline, uint64_t layout, uint64_t set,
	const void *push, uint32_t push_bytes, uint32_t x, uint32_t y, uint32_t z,
	uint64_t indirect_buf, uint64_t indirect_off); // indirect when indirect_buf != 0
void mr_cmd_copy(uint64_t dev, uint64_t cb, uint64_t src, uint64_t dst, uint64_t src_off, uint64_t dst_off, uint64_t n);
void mr_cmd_fill(uint64_t dev, uint64_t cb, uint64_t buf, uint64_t off, uint64_t n, uint32_t value);
// vkCmdUpdateBuffer: n (a multiple of 4, at most 65536) bytes of data,
// which the command buffer keeps a copy of.
void mr_cmd_update(uint64_t dev, uint64_t cb, uint64_t buf, uint64_t off, uint64_t n, const void *data);
void mr_cmd_barrier(uint64_t dev, uint64_t cb, uint32_t src_stages, uint32_t dst_stages,
	uint32_t n, const uint64_t *bufs, const uint64_t *offsets, const uint64_t *sizes,
	const uint32_t *src_access, const uint32_t *dst_access);
void mr_cmd_memory_barrier(uint64_t dev, uint64_t cb, uint32_t src_stages, uint32_t dst_stages,
	uint32_t src_access, uint32_t dst_access);
// Conditional rendering (VK_EXT_conditional_rendering; only on a device
// made with cond_render): the dispatches between begin and end are
// discarded when the uint32 at buf[off] is 0.
void mr_cmd_begin_conditional(uint64_t dev, uint64_t cb, uint64_t buf, uint64_t off);
void mr_cmd_end_conditional(uint64_t dev, uint64_t cb);
void mr_cmd_reset_queries(uint64_t dev, uint64_t cb, uint64_t pool, uint32_t count);
void mr_cmd_timestamp(uint64_t dev, uint64_t cb, uint64_t pool, uint32_t query);

// Submit one command buffer and wait for it (the device's fence).
VkResult mr_submit_wait(uint64_t dev, uint64_t cb, uint64_t timeout_ns, const char **call);

#endif
