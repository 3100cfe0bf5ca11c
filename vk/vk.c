//go:build cgo

#include "vk_c.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define H(x) ((uint64_t)(uintptr_t)(x))

// ---- Loader -----------------------------------------------------------------

static void *lib;
static PFN_vkGetInstanceProcAddr gipa;
static PFN_vkCreateInstance create_instance;
static PFN_vkEnumerateInstanceLayerProperties enum_layers;
static PFN_vkEnumerateInstanceExtensionProperties enum_instance_exts;
static PFN_vkEnumerateInstanceVersion enum_version; // NULL on a Vulkan 1.0 loader

// mr_load is called once, under the Go side's sync.Once.
const char *mr_load(void) {
	lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
	if (!lib) return "cannot open libvulkan.so.1 (install the Vulkan loader: Debian libvulkan1)";
	gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
	if (!gipa) return "libvulkan.so.1 has no vkGetInstanceProcAddr";
	create_instance = (PFN_vkCreateInstance)gipa(NULL, "vkCreateInstance");
	enum_layers = (PFN_vkEnumerateInstanceLayerProperties)gipa(NULL, "vkEnumerateInstanceLayerProperties");
	enum_instance_exts = (PFN_vkEnumerateInstanceExtensionProperties)gipa(NULL, "vkEnumerateInstanceExtensionProperties");
	enum_version = (PFN_vkEnumerateInstanceVersion)gipa(NULL, "vkEnumerateInstanceVersion");
	if (!create_instance || !enum_layers || !enum_instance_exts)
		return "libvulkan.so.1 lacks the global Vulkan functions";
	return NULL;
}

uint32_t mr_instance_version(void) {
	uint32_t v = VK_API_VERSION_1_0;
	if (enum_version) enum_version(&v);
	return v;
}

int mr_has_layer(const char *name) {
	uint32_t n = 0;
	if (enum_layers(&n, NULL) != VK_SUCCESS || n == 0) return 0;
	VkLayerProperties *p = calloc(n, sizeof *p);
	if (!p) return 0;
	int found = 0;
	if (enum_layers(&n, p) >= 0)
		for (uint32_t i = 0; i < n && !found; i++) found = strcmp(p[i].layerName, name) == 0;
	free(p);
	return found;
}

uint32_t mr_layer_spec_version(const char *name) {
	uint32_t n = 0;
	if (enum_layers(&n, NULL) != VK_SUCCESS || n == 0) return 0;
	VkLayerProperties *p = calloc(n, sizeof *p);
	if (!p) return 0;
	uint32_t v = 0;
	if (enum_layers(&n, p) >= 0)
		for (uint32_t i = 0; i < n; i++)
			if (strcmp(p[i].layerName, name) == 0) v = p[i].specVersion;
	free(p);
	return v;
}

int mr_has_instance_extension(const char *layer, const char *name) {
	uint32_t n = 0;
	if (enum_instance_exts(layer, &n, NULL) != VK_SUCCESS || n == 0) return 0;
	VkExtensionProperties *p = calloc(n, sizeof *p);
	if (!p) return 0;
	int found = 0;
	if (enum_instance_exts(layer, &n, p) >= 0)
		for (uint32_t i = 0; i < n && !found; i++) found = strcmp(p[i].extensionName, name) == 0;
	free(p);
	return found;
}

// ---- Instance ---------------------------------------------------------------

typedef struct msg {
	struct msg *next;
	char *text;
} msg;

typedef struct mr_instance {
	VkInstance h;
	VkDebugUtilsMessengerEXT messenger;
	pthread_mutex_t mu; // guards head/tail: the callback may run on any thread
	msg *head, *tail;
	PFN_vkDestroyInstance DestroyInstance;
	PFN_vkEnumeratePhysicalDevices EnumeratePhysicalDevices;
	PFN_vkGetPhysicalDeviceProperties2 GetPhysicalDeviceProperties2;
	PFN_vkGetPhysicalDeviceFeatures2 GetPhysicalDeviceFeatures2;
	PFN_vkGetPhysicalDeviceMemoryProperties GetPhysicalDeviceMemoryProperties;
	PFN_vkGetPhysicalDeviceQueueFamilyProperties GetPhysicalDeviceQueueFamilyProperties;
	PFN_vkEnumerateDeviceExtensionProperties EnumerateDeviceExtensionProperties;
	PFN_vkCreateDevice CreateDevice;
	PFN_vkGetDeviceProcAddr GetDeviceProcAddr;
	PFN_vkCreateDebugUtilsMessengerEXT CreateDebugUtilsMessengerEXT;
	PFN_vkDestroyDebugUtilsMessengerEXT DestroyDebugUtilsMessengerEXT;
} mr_instance;

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
	VkDebugUtilsMessageTypeFlagsEXT types, const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
	(void)types;
	mr_instance *in = user;
	const char *level = severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning";
	const char *text = data && data->pMessage ? data->pMessage : "(no message)";
	size_t n = strlen(level) + strlen(text) + 3;
	msg *m = malloc(sizeof *m);
	if (!m) return VK_FALSE;
	m->next = NULL;
	m->text = malloc(n);
	if (!m->text) {
		free(m);
		return VK_FALSE;
	}
	strcpy(m->text, level);
	strcat(m->text, ": ");
	strcat(m->text, text);
	pthread_mutex_lock(&in->mu);
	if (in->tail) in->tail->next = m;
	else in->head = m;
	in->tail = m;
	pthread_mutex_unlock(&in->mu);
	return VK_FALSE; // never abort the call that triggered the message
}

char *mr_pop_message(uint64_t inst) {
	mr_instance *in = (mr_instance *)(uintptr_t)inst;
	pthread_mutex_lock(&in->mu);
	msg *m = in->head;
	if (m) {
		in->head = m->next;
		if (!in->head) in->tail = NULL;
	}
	pthread_mutex_unlock(&in->mu);
	if (!m) return NULL;
	char *text = m->text;
	free(m);
	return text;
}

static void free_messages(mr_instance *in) {
	char *t;
	while ((t = mr_pop_message(H(in))) != NULL) free(t);
}

#define LOAD_I(in, name) (in)->name = (PFN_vk##name)gipa((in)->h, "vk" #name)

VkResult mr_create_instance(uint32_t api, int validation, int syncval, uint64_t *out, const char **call) {
	mr_instance *in = calloc(1, sizeof *in);
	if (!in) {
		*call = "calloc";
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	}
	pthread_mutex_init(&in->mu, NULL);
	VkApplicationInfo app = {
		.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
		.pApplicationName = "modrun",
		.pEngineName = "modrun",
		.apiVersion = api,
	};
	VkDebugUtilsMessengerCreateInfoEXT dbg = {
		.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
		.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
		.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
			VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
		.pfnUserCallback = on_message,
		.pUserData = in,
	};
	// Synchronization validation checks every hazard between commands: it
	// proves the derived barriers are enough.
	VkValidationFeatureEnableEXT enables[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
	VkValidationFeaturesEXT features = {
		.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
		.pNext = NULL,
		.enabledValidationFeatureCount = 1,
		.pEnabledValidationFeatures = enables,
	};
	const char *layers[] = {"VK_LAYER_KHRONOS_validation"};
	const char *exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME};
	VkInstanceCreateInfo ci = {
		.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
		.pApplicationInfo = &app,
	};
	if (validation) {
		// Chained here too, the messenger also sees vkCreateInstance and vkDestroyInstance.
		ci.pNext = &dbg;
		ci.enabledLayerCount = 1;
		ci.ppEnabledLayerNames = layers;
		ci.enabledExtensionCount = 1;
		ci.ppEnabledExtensionNames = exts;
		if (syncval) {
			dbg.pNext = &features;
			ci.enabledExtensionCount = 2;
		}
	}
	*call = "vkCreateInstance";
	VkResult r = create_instance(&ci, NULL, &in->h);
	if (r != VK_SUCCESS) {
		free_messages(in);
		pthread_mutex_destroy(&in->mu);
		free(in);
		return r;
	}
	LOAD_I(in, DestroyInstance);
	LOAD_I(in, EnumeratePhysicalDevices);
	LOAD_I(in, GetPhysicalDeviceProperties2);
	LOAD_I(in, GetPhysicalDeviceFeatures2);
	LOAD_I(in, GetPhysicalDeviceMemoryProperties);
	LOAD_I(in, GetPhysicalDeviceQueueFamilyProperties);
	LOAD_I(in, EnumerateDeviceExtensionProperties);
	LOAD_I(in, CreateDevice);
	LOAD_I(in, GetDeviceProcAddr);
	if (!in->DestroyInstance || !in->EnumeratePhysicalDevices || !in->GetPhysicalDeviceProperties2 ||
		!in->GetPhysicalDeviceFeatures2 || !in->GetPhysicalDeviceMemoryProperties ||
		!in->GetPhysicalDeviceQueueFamilyProperties || !in->EnumerateDeviceExtensionProperties ||
		!in->CreateDevice || !in->GetDeviceProcAddr) {
		*call = "vkGetInstanceProcAddr";
		if (in->DestroyInstance) in->DestroyInstance(in->h, NULL);
		free_messages(in);
		pthread_mutex_destroy(&in->mu);
		free(in);
		return VK_ERROR_INITIALIZATION_FAILED;
	}
	if (validation) {
		LOAD_I(in, CreateDebugUtilsMessengerEXT);
		LOAD_I(in, DestroyDebugUtilsMessengerEXT);
		dbg.pNext = NULL; // the validation features were for vkCreateInstance only
		*call = "vkCreateDebugUtilsMessengerEXT";
		r = in->CreateDebugUtilsMessengerEXT ? in->CreateDebugUtilsMessengerEXT(in->h, &dbg, NULL, &in->messenger)
		                                     : VK_ERROR_EXTENSION_NOT_PRESENT;
		if (r != VK_SUCCESS) {
			in->DestroyInstance(in->h, NULL);
			free_messages(in);
			pthread_mutex_destroy(&in->mu);
			free(in);
			return r;
		}
	}
	*out = H(in);
	return VK_SUCCESS;
}

// ---- Physical devices ---------------------------------------------------------

VkResult mr_enumerate_devices(uint64_t inst, uint32_t *count, uint64_t *out) {
	mr_instance *in = (mr_instance *)(uintptr_t)inst;
	if (!out) return in->EnumeratePhysicalDevices(in->h, count, NULL);
	VkPhysicalDevice *p = calloc(*count ? *count : 1, sizeof *p);
	if (!p) return VK_ERROR_OUT_OF_HOST_MEMORY;
	VkResult r = in->EnumeratePhysicalDevices(in->h, count, p);
	for (uint32_t i = 0; i < *count; i++) out[i] = H(p[i]);
	free(p);
	return r;
}

// coopmat_nv_usable: VK_NV_cooperative_matrix (offered) has its
// cooperativeMatrix feature and the shape matmul_coop.comp uses, 16x16x16
// f16 x f16 -> f32 at subgroup scope.
static int coopmat_nv_usable(mr_instance *in, VkPhysicalDevice pd) {
	VkPhysicalDeviceCooperativeMatrixFeaturesNV cm = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
	VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &cm};
	in->GetPhysicalDeviceFeatures2(pd, &f2);
	PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV props =
		(PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)gipa(in->h, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
	if (!cm.cooperativeMatrix || !props) return 0;
	uint32_t n = 0;
	if (props(pd, &n, NULL) != VK_SUCCESS || n == 0) return 0;
	VkCooperativeMatrixPropertiesNV *p = calloc(n, sizeof *p);
	if (!p) return 0;
	for (uint32_t i = 0; i < n; i++) p[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
	int ok = 0;
	if (props(pd, &n, p) >= 0)
		for (uint32_t i = 0; i < n && !ok; i++)
			ok = p[i].MSize == 16 && p[i].NSize == 16 && p[i].KSize == 16 && p[i].AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
				p[i].BType == VK_COMPONENT_TYPE_FLOAT16_NV && p[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
				p[i].DType == VK_COMPONENT_TYPE_FLOAT32_NV && p[i].scope == VK_SCOPE_SUBGROUP_NV;
	free(p);
	return ok;
}

// VK_KHR_cooperative_matrix came with Vulkan headers 1.3.255; Debian 12's
// are 1.3.239. Its structures and values, from the Vulkan registry, where
// the headers lack them (the VkComponentTypeKHR and VkScopeKHR values are
// NV's, which the headers have).
#ifndef VK_KHR_cooperative_matrix
#define VK_KHR_cooperative_matrix 1
#define VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME "VK_KHR_cooperative_matrix"
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR ((VkStructureType)1000506000)
#define VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR ((VkStructureType)1000506001)
typedef struct VkCooperativeMatrixPropertiesKHR {
	VkStructureType sType;
	void *pNext;
	uint32_t MSize;
	uint32_t NSize;
	uint32_t KSize;
	VkComponentTypeNV AType;
	VkComponentTypeNV BType;
	VkComponentTypeNV CType;
	VkComponentTypeNV ResultType;
	VkBool32 saturatingAccumulation;
	VkScopeNV scope;
} VkCooperativeMatrixPropertiesKHR;
typedef struct VkPhysicalDeviceCooperativeMatrixFeaturesKHR {
	VkStructureType sType;
	void *pNext;
	VkBool32 cooperativeMatrix;
	VkBool32 cooperativeMatrixRobustBufferAccess;
} VkPhysicalDeviceCooperativeMatrixFeaturesKHR;
typedef VkResult(VKAPI_PTR *PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)(
	VkPhysicalDevice, uint32_t *, VkCooperativeMatrixPropertiesKHR *);
#endif

// coopmat_khr_usable: VK_KHR_cooperative_matrix (offered) has its
// cooperativeMatrix feature and the shape matmul_coop.comp's COOPMAT_KHR
// variants use, 16x16x16 f16 x f16 -> f32 at subgroup scope (AMD's RDNA3
// and NVIDIA list it; Intel's ANV lists tiles of 8 rows only).
static int coopmat_khr_usable(mr_instance *in, VkPhysicalDevice pd) {
	VkPhysicalDeviceCooperativeMatrixFeaturesKHR cm = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
	VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &cm};
	in->GetPhysicalDeviceFeatures2(pd, &f2);
	PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR props =
		(PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)gipa(in->h, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
	if (!cm.cooperativeMatrix || !props) return 0;
	uint32_t n = 0;
	if (props(pd, &n, NULL) != VK_SUCCESS || n == 0) return 0;
	VkCooperativeMatrixPropertiesKHR *p = calloc(n, sizeof *p);
	if (!p) return 0;
	for (uint32_t i = 0; i < n; i++) p[i].sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR;
	int ok = 0;
	if (props(pd, &n, p) >= 0)
		for (uint32_t i = 0; i < n && !ok; i++)
			ok = p[i].MSize == 16 && p[i].NSize == 16 && p[i].KSize == 16 && p[i].AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
				p[i].BType == VK_COMPONENT_TYPE_FLOAT16_NV && p[i].CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
				p[i].ResultType == VK_COMPONENT_TYPE_FLOAT32_NV && p[i].scope == VK_SCOPE_SUBGROUP_NV;
	free(p);
	return ok;
}

void mr_device_info_get(uint64_t inst, uint64_t phys, mr_device_info *out) {
	mr_instance *in = (mr_instance *)(uintptr_t)inst;
	VkPhysicalDevice pd = (VkPhysicalDevice)(uintptr_t)phys;
	memset(out, 0, sizeof *out);

	VkPhysicalDeviceDriverProperties driver = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
	VkPhysicalDeviceSubgroupProperties sub = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &driver};
	VkPhysicalDeviceProperties2 props = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sub};
	in->GetPhysicalDeviceProperties2(pd, &props);
	VkPhysicalDeviceProperties *p = &props.properties;
	strncpy(out->name, p->deviceName, sizeof out->name - 1);
	strncpy(out->driver_name, driver.driverName, sizeof out->driver_name - 1);
	strncpy(out->driver_info, driver.driverInfo, sizeof out->driver_info - 1);
	out->api_version = p->apiVersion;
	out->driver_version = p->driverVersion;
	out->vendor_id = p->vendorID;
	out->device_id = p->deviceID;
	out->type = p->deviceType;
	VkPhysicalDeviceLimits *l = &p->limits;
	out->max_storage_buffer_range = l->maxStorageBufferRange;
	out->max_shared_memory = l->maxComputeSharedMemorySize;
	out->max_invocations = l->maxComputeWorkGroupInvocations;
	for (int i = 0; i < 3; i++) {
		out->max_size[i] = l->maxComputeWorkGroupSize[i];
		out->max_count[i] = l->maxComputeWorkGroupCount[i];
	}
	out->max_push_constants = l->maxPushConstantsSize;
	out->min_storage_offset_alignment = l->minStorageBufferOffsetAlignment;
	out->timestamp_period = l->timestampPeriod;
	out->timestamp_compute_and_graphics = l->timestampComputeAndGraphics;
	out->subgroup_size = sub.subgroupSize;
	out->subgroup_stages = sub.supportedStages;
	out->subgroup_ops = sub.supportedOperations;

	VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
	VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .pNext = &f12};
	VkPhysicalDeviceFeatures2 feats = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
	if (p->apiVersion >= VK_API_VERSION_1_2) {
		in->GetPhysicalDeviceFeatures2(pd, &feats);
		out->f16 = f12.shaderFloat16;
		out->i8 = f12.shaderInt8;
		out->sb16 = f11.storageBuffer16BitAccess;
		out->sb8 = f12.storageBuffer8BitAccess;
		out->vmm = f12.vulkanMemoryModel && f12.vulkanMemoryModelDeviceScope; // the device scope: the other kernels' atomics and barriers use it
	}

	VkPhysicalDeviceMemoryProperties mem;
	in->GetPhysicalDeviceMemoryProperties(pd, &mem);
	for (uint32_t i = 0; i < mem.memoryHeapCount; i++)
		if ((mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && mem.memoryHeaps[i].size > out->device_local_bytes)
			out->device_local_bytes = mem.memoryHeaps[i].size;

	uint32_t nq = 0;
	in->GetPhysicalDeviceQueueFamilyProperties(pd, &nq, NULL);
	VkQueueFamilyProperties *q = calloc(nq ? nq : 1, sizeof *q);
	out->compute_family = -1;
	if (q) {
		in->GetPhysicalDeviceQueueFamilyProperties(pd, &nq, q);
		// Prefer a compute-only family (async compute on discrete GPUs), else any with compute.
		for (int pass = 0; pass < 2 && out->compute_family < 0; pass++)
			for (uint32_t i = 0; i < nq; i++) {
				int compute = (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) != 0;
				int graphics = (q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT) != 0;
				if (compute && (pass == 1 || !graphics)) {
					out->compute_family = (int32_t)i;
					out->timestamp_valid_bits = q[i].timestampValidBits;
					break;
				}
			}
		free(q);
	}

	uint32_t ne = 0;
	int sizeControl = 0, smBuiltins = 0, amdCore = 0, amdCore2 = 0;
	if (in->EnumerateDeviceExtensionProperties(pd, NULL, &ne, NULL) == VK_SUCCESS && ne > 0) {
		VkExtensionProperties *e = calloc(ne, sizeof *e);
		if (e && in->EnumerateDeviceExtensionProperties(pd, NULL, &ne, e) >= 0)
			for (uint32_t i = 0; i < ne; i++)
				if (strcmp(e[i].extensionName, VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME) == 0) out->coopmat = 1;
				else if (strcmp(e[i].extensionName, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) == 0) out->coopmat_nv = 1;
				else if (strcmp(e[i].extensionName, VK_EXT_CONDITIONAL_RENDERING_EXTENSION_NAME) == 0) out->cond_render = 1;
				else if (strcmp(e[i].extensionName, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME) == 0) out->idot = 1;
				else if (strcmp(e[i].extensionName, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME) == 0) sizeControl = 1;
				else if (strcmp(e[i].extensionName, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME) == 0) out->exec_props = 1;
				else if (strcmp(e[i].extensionName, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME) == 0) smBuiltins = 1;
				else if (strcmp(e[i].extensionName, VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME) == 0) amdCore = 1;
				else if (strcmp(e[i].extensionName, VK_AMD_SHADER_CORE_PROPERTIES_2_EXTENSION_NAME) == 0) amdCore2 = 1;
		free(e);
	}
	if (smBuiltins) { // NVIDIA: its SMs
		VkPhysicalDeviceShaderSMBuiltinsPropertiesNV sm = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV};
		VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sm};
		in->GetPhysicalDeviceProperties2(pd, &p2);
		out->compute_units = sm.shaderSMCount;
	} else if (amdCore) { // AMD: its CUs, the active ones where the driver says
		VkPhysicalDeviceShaderCorePropertiesAMD core = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD};
		VkPhysicalDeviceShaderCoreProperties2AMD core2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_2_AMD};
		if (amdCore2) core.pNext = &core2;
		VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &core};
		in->GetPhysicalDeviceProperties2(pd, &p2);
		out->compute_units = amdCore2 && core2.activeComputeUnitCount > 0 ? core2.activeComputeUnitCount
			: core.shaderEngineCount * core.shaderArraysPerEngineCount * core.computeUnitsPerShaderArray;
	}
	if (sizeControl) { // the sizes a compute dispatch's subgroups may have
		VkPhysicalDeviceSubgroupSizeControlPropertiesEXT sc = {
			.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT};
		VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sc};
		in->GetPhysicalDeviceProperties2(pd, &p2);
		out->min_subgroup = sc.minSubgroupSize;
		out->max_subgroup = sc.maxSubgroupSize;
		out->max_workgroup_subgroups = sc.maxComputeWorkgroupSubgroups;
		out->required_subgroup_stages = sc.requiredSubgroupSizeStages;
		// Whether a pipeline may ask for a size (subgroupSizeControl) and
		// for full subgroups (computeFullSubgroups): the instance asks for
		// Vulkan 1.2, so these come from the extension's feature struct.
		VkPhysicalDeviceSubgroupSizeControlFeaturesEXT scf = {
			.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT};
		VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &scf};
		in->GetPhysicalDeviceFeatures2(pd, &f2);
		out->size_control = scf.subgroupSizeControl ? 1 : 0;
		out->full_subgroups = scf.computeFullSubgroups ? 1 : 0;
	}
	if (out->coopmat_nv) out->coopmat_nv = coopmat_nv_usable(in, pd);
	if (out->coopmat) out->coopmat_khr = coopmat_khr_usable(in, pd);
	if (out->idot) { // offered: is its feature there, and is the packed signed 4x8 dot a hardware instruction?
		VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR idf = {
			.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR};
		VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &idf};
		in->GetPhysicalDeviceFeatures2(pd, &f2);
		out->idot = idf.shaderIntegerDotProduct ? 1 : 0;
		VkPhysicalDeviceShaderIntegerDotProductPropertiesKHR idp = {
			.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES_KHR};
		VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &idp};
		in->GetPhysicalDeviceProperties2(pd, &p2);
		out->idot_accel = out->idot && idp.integerDotProduct4x8BitPackedSignedAccelerated ? 1 : 0;
	}
	if (out->exec_props) { // offered: is its feature there?
		VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR ep = {
			.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
		VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &ep};
		in->GetPhysicalDeviceFeatures2(pd, &f2);
		out->exec_props = ep.pipelineExecutableInfo ? 1 : 0;
	}
	if (out->cond_render && p->apiVersion >= VK_API_VERSION_1_2) { // offered: is its feature there?
		VkPhysicalDeviceConditionalRenderingFeaturesEXT cr = {
			.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_CONDITIONAL_RENDERING_FEATURES_EXT};
		VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &cr};
		in->GetPhysicalDeviceFeatures2(pd, &f2);
		out->cond_render = cr.conditionalRendering ? 1 : 0;
	} else {
		out->cond_render = 0;
	}
}

// ---- Device -------------------------------------------------------------------

typedef struct mr_device {
	VkDevice h;
	VkQueue queue;
	VkCommandPool pool;
	VkFence fence;
	// no_queue: the VkDevice could not make a fence (Mesa's
	// RADV_FORCE_FAMILY null device, which compiles pipelines and runs
	// nothing). It is still made, for its compiler; every submit through
	// it or its clones returns fence_err, and nothing waits on its queue
	// (RADV's null device crashes in vkDeviceWaitIdle).
	int no_queue;
	VkResult fence_err;
	// capture_stats: pipelines are made with their compiler statistics
	// kept (VK_KHR_pipeline_executable_properties enabled).
	int capture_stats;
	// Guards the queue (vkQueueSubmit, vkDeviceWaitIdle), which every
	// handle cloned from this device shares: owned by the device that made
	// the VkDevice (is_base), borrowed by its clones.
	pthread_mutex_t *qmu;
	int is_base;
	uint32_t family; // the queue's

	VkPhysicalDeviceMemoryProperties mem;
	PFN_vkDestroyDevice DestroyDevice;
	PFN_vkGetDeviceQueue GetDeviceQueue;
	PFN_vkDeviceWaitIdle DeviceWaitIdle;
	PFN_vkCreateBuffer CreateBuffer;
	PFN_vkDestroyBuffer DestroyBuffer;
	PFN_vkGetBufferMemoryRequirements GetBufferMemoryRequirements;
	PFN_vkAllocateMemory AllocateMemory;
	PFN_vkFreeMemory FreeMemory;
	PFN_vkBindBufferMemory BindBufferMemory;
	PFN_vkMapMemory MapMemory;
	PFN_vkCreateShaderModule CreateShaderModule;
	PFN_vkDestroyShaderModule DestroyShaderModule;
	PFN_vkCreateDescriptorSetLayout CreateDescriptorSetLayout;
	PFN_vkDestroyDescriptorSetLayout DestroyDescriptorSetLayout;
	PFN_vkCreatePipelineLayout CreatePipelineLayout;
	PFN_vkDestroyPipelineLayout DestroyPipelineLayout;
	PFN_vkCreateComputePipelines CreateComputePipelines;
	PFN_vkDestroyPipeline DestroyPipeline;
	PFN_vkCreateDescriptorPool CreateDescriptorPool;
	PFN_vkDestroyDescriptorPool DestroyDescriptorPool;
	PFN_vkAllocateDescriptorSets AllocateDescriptorSets;
	PFN_vkUpdateDescriptorSets UpdateDescriptorSets;
	PFN_vkCreateCommandPool CreateCommandPool;
	PFN_vkDestroyCommandPool DestroyCommandPool;
	PFN_vkAllocateCommandBuffers AllocateCommandBuffers;
	PFN_vkFreeCommandBuffers FreeCommandBuffers;
	PFN_vkBeginCommandBuffer BeginCommandBuffer;
	PFN_vkEndCommandBuffer EndCommandBuffer;
	PFN_vkCmdBindPipeline CmdBindPipeline;
	PFN_vkCmdBindDescriptorSets CmdBindDescriptorSets;
	PFN_vkCmdPushConstants CmdPushConstants;
	PFN_vkCmdDispatch CmdDispatch;
	PFN_vkCmdDispatchIndirect CmdDispatchIndirect;
	PFN_vkCmdPipelineBarrier CmdPipelineBarrier;
	PFN_vkCmdCopyBuffer CmdCopyBuffer;
	PFN_vkCmdFillBuffer CmdFillBuffer;
	PFN_vkCmdUpdateBuffer CmdUpdateBuffer;
	PFN_vkCmdWriteTimestamp CmdWriteTimestamp;
	PFN_vkCmdResetQueryPool CmdResetQueryPool;
	PFN_vkCreateQueryPool CreateQueryPool;
	PFN_vkDestroyQueryPool DestroyQueryPool;
	PFN_vkGetQueryPoolResults GetQueryPoolResults;
	PFN_vkCreateFence CreateFence;
	PFN_vkDestroyFence DestroyFence;
	PFN_vkResetFences ResetFences;
	PFN_vkWaitForFences WaitForFences;
	PFN_vkQueueSubmit QueueSubmit;
	// VK_EXT_conditional_rendering, NULL unless enabled.
	PFN_vkCmdBeginConditionalRenderingEXT CmdBeginConditionalRenderingEXT;
	PFN_vkCmdEndConditionalRenderingEXT CmdEndConditionalRenderingEXT;
	// VK_KHR_pipeline_executable_properties, NULL unless capture_stats.
	PFN_vkGetPipelineExecutablePropertiesKHR GetPipelineExecutablePropertiesKHR;
	PFN_vkGetPipelineExecutableStatisticsKHR GetPipelineExecutableStatisticsKHR;
} mr_device;

#define D(dev) ((mr_device *)(uintptr_t)(dev))
#define LOAD_D(in, d, name) \
	if (!((d)->name = (PFN_vk##name)(in)->GetDeviceProcAddr((d)->h, "vk" #name))) missing = 1

VkResult mr_create_device(uint64_t inst, uint64_t phys, uint32_t family,
	int f16, int i8, int sb16, int sb8, int cond_render, int size_control, int full_subgroups,
	int vmm, int coopmat_nv, int coopmat_khr, int exec_stats, int idot, uint64_t *out, const char **call) {
	mr_instance *in = (mr_instance *)(uintptr_t)inst;
	VkPhysicalDevice pd = (VkPhysicalDevice)(uintptr_t)phys;
	mr_device *d = calloc(1, sizeof *d);
	if (!d) {
		*call = "calloc";
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	}
	in->GetPhysicalDeviceMemoryProperties(pd, &d->mem);
	// Optional features are enabled exactly when the device has them, so a
	// kernel variant that needs one runs only where DeviceInfo says so.
	VkPhysicalDeviceVulkan12Features f12 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
		.shaderFloat16 = f16 ? VK_TRUE : VK_FALSE,
		.shaderInt8 = i8 ? VK_TRUE : VK_FALSE,
		.storageBuffer8BitAccess = sb8 ? VK_TRUE : VK_FALSE,
		.vulkanMemoryModel = vmm ? VK_TRUE : VK_FALSE,
		.vulkanMemoryModelDeviceScope = vmm ? VK_TRUE : VK_FALSE,
	};
	VkPhysicalDeviceVulkan11Features f11 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
		.pNext = &f12,
		.storageBuffer16BitAccess = sb16 ? VK_TRUE : VK_FALSE,
	};
	VkPhysicalDeviceFeatures2 feats = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
	float prio = 1.0f;
	VkDeviceQueueCreateInfo qci = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
		.queueFamilyIndex = family,
		.queueCount = 1,
		.pQueuePriorities = &prio,
	};
	VkDeviceCreateInfo ci = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
		.pNext = &feats,
		.queueCreateInfoCount = 1,
		.pQueueCreateInfos = &qci,
	};
	VkPhysicalDeviceConditionalRenderingFeaturesEXT cr = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_CONDITIONAL_RENDERING_FEATURES_EXT,
		.conditionalRendering = VK_TRUE,
	};
	VkPhysicalDeviceSubgroupSizeControlFeaturesEXT scf = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT,
		.subgroupSizeControl = size_control ? VK_TRUE : VK_FALSE,
		.computeFullSubgroups = full_subgroups ? VK_TRUE : VK_FALSE,
	};
	VkPhysicalDeviceCooperativeMatrixFeaturesNV cm = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV,
		.cooperativeMatrix = VK_TRUE,
	};
	VkPhysicalDeviceCooperativeMatrixFeaturesKHR cmk = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR,
		.cooperativeMatrix = VK_TRUE,
	};
	VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR ep = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
		.pipelineExecutableInfo = VK_TRUE,
	};
	VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR idf = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR,
		.shaderIntegerDotProduct = VK_TRUE,
	};
	const char *exts[6];
	uint32_t nexts = 0;
	if (idot) {
		idf.pNext = feats.pNext;
		feats.pNext = &idf;
		exts[nexts++] = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
	}
	if (exec_stats) {
		ep.pNext = feats.pNext;
		feats.pNext = &ep;
		exts[nexts++] = VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME;
	}
	if (coopmat_nv) {
		cm.pNext = feats.pNext;
		feats.pNext = &cm;
		exts[nexts++] = VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
	}
	if (coopmat_khr) {
		cmk.pNext = feats.pNext;
		feats.pNext = &cmk;
		exts[nexts++] = VK_KHR_COOPERATIVE_MATRIX_EXTENSION_NAME;
	}
	if (cond_render) {
		cr.pNext = feats.pNext;
		feats.pNext = &cr;
		exts[nexts++] = VK_EXT_CONDITIONAL_RENDERING_EXTENSION_NAME;
	}
	if (size_control || full_subgroups) {
		scf.pNext = feats.pNext;
		feats.pNext = &scf;
		exts[nexts++] = VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME;
	}
	ci.enabledExtensionCount = nexts;
	ci.ppEnabledExtensionNames = nexts ? exts : NULL;
	*call = "vkCreateDevice";
	VkResult r = in->CreateDevice(pd, &ci, NULL, &d->h);
	if (r != VK_SUCCESS) {
		free(d);
		return r;
	}
	int missing = 0;
	LOAD_D(in, d, DestroyDevice);
	if (missing) {
		free(d); // without vkDestroyDevice the device cannot be freed
		*call = "vkGetDeviceProcAddr";
		return VK_ERROR_INITIALIZATION_FAILED;
	}
	LOAD_D(in, d, GetDeviceQueue);
	LOAD_D(in, d, DeviceWaitIdle);
	LOAD_D(in, d, CreateBuffer);
	LOAD_D(in, d, DestroyBuffer);
	LOAD_D(in, d, GetBufferMemoryRequirements);
	LOAD_D(in, d, AllocateMemory);
	LOAD_D(in, d, FreeMemory);
	LOAD_D(in, d, BindBufferMemory);
	LOAD_D(in, d, MapMemory);
	LOAD_D(in, d, CreateShaderModule);
	LOAD_D(in, d, DestroyShaderModule);
	LOAD_D(in, d, CreateDescriptorSetLayout);
	LOAD_D(in, d, DestroyDescriptorSetLayout);
	LOAD_D(in, d, CreatePipelineLayout);
	LOAD_D(in, d, DestroyPipelineLayout);
	LOAD_D(in, d, CreateComputePipelines);
	LOAD_D(in, d, DestroyPipeline);
	LOAD_D(in, d, CreateDescriptorPool);
	LOAD_D(in, d, DestroyDescriptorPool);
	LOAD_D(in, d, AllocateDescriptorSets);
	LOAD_D(in, d, UpdateDescriptorSets);
	LOAD_D(in, d, CreateCommandPool);
	LOAD_D(in, d, DestroyCommandPool);
	LOAD_D(in, d, AllocateCommandBuffers);
	LOAD_D(in, d, FreeCommandBuffers);
	LOAD_D(in, d, BeginCommandBuffer);
	LOAD_D(in, d, EndCommandBuffer);
	LOAD_D(in, d, CmdBindPipeline);
	LOAD_D(in, d, CmdBindDescriptorSets);
	LOAD_D(in, d, CmdPushConstants);
	LOAD_D(in, d, CmdDispatch);
	LOAD_D(in, d, CmdDispatchIndirect);
	LOAD_D(in, d, CmdPipelineBarrier);
	LOAD_D(in, d, CmdCopyBuffer);
	LOAD_D(in, d, CmdFillBuffer);
	LOAD_D(in, d, CmdUpdateBuffer);
	LOAD_D(in, d, CmdWriteTimestamp);
	LOAD_D(in, d, CmdResetQueryPool);
	LOAD_D(in, d, CreateQueryPool);
	LOAD_D(in, d, DestroyQueryPool);
	LOAD_D(in, d, GetQueryPoolResults);
	LOAD_D(in, d, CreateFence);
	LOAD_D(in, d, DestroyFence);
	LOAD_D(in, d, ResetFences);
	LOAD_D(in, d, WaitForFences);
	LOAD_D(in, d, QueueSubmit);
	if (cond_render) {
		LOAD_D(in, d, CmdBeginConditionalRenderingEXT);
		LOAD_D(in, d, CmdEndConditionalRenderingEXT);
	}
	if (exec_stats) {
		LOAD_D(in, d, GetPipelineExecutablePropertiesKHR);
		LOAD_D(in, d, GetPipelineExecutableStatisticsKHR);
		d->capture_stats = 1;
	}
	if (missing) {
		*call = "vkGetDeviceProcAddr";
		r = VK_ERROR_INITIALIZATION_FAILED;
		goto fail;
	}
	d->family = family;
	d->GetDeviceQueue(d->h, family, 0, &d->queue);
	VkCommandPoolCreateInfo pci = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
		.queueFamilyIndex = family,
	};
	*call = "vkCreateCommandPool";
	if ((r = d->CreateCommandPool(d->h, &pci, NULL, &d->pool)) != VK_SUCCESS) goto fail;
	VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
	*call = "vkCreateFence";
	if ((d->fence_err = d->CreateFence(d->h, &fci, NULL, &d->fence)) != VK_SUCCESS) {
		d->fence = VK_NULL_HANDLE;
		d->no_queue = 1;
	}
	*call = "malloc";
	if (!(d->qmu = malloc(sizeof *d->qmu))) {
		r = VK_ERROR_OUT_OF_HOST_MEMORY;
		goto fail;
	}
	pthread_mutex_init(d->qmu, NULL);
	d->is_base = 1;
	*out = H(d);
	return VK_SUCCESS;
fail:
	if (d->fence && d->DestroyFence) d->DestroyFence(d->h, d->fence, NULL);
	if (d->pool && d->DestroyCommandPool) d->DestroyCommandPool(d->h, d->pool, NULL);
	d->DestroyDevice(d->h, NULL);
	free(d);
	return r;
}

VkResult mr_clone_device(uint64_t base, uint64_t *out, const char **call) {
	mr_device *b = D(base);
	mr_device *d = malloc(sizeof *d);
	if (!d) {
		*call = "malloc";
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	}
	*d = *b; // the VkDevice, its queue, function table and memory properties
	d->pool = VK_NULL_HANDLE;
	d->fence = VK_NULL_HANDLE;
	d->is_base = 0;
	VkCommandPoolCreateInfo pci = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
		.queueFamilyIndex = b->family,
	};
	*call = "vkCreateCommandPool";
	VkResult r = d->CreateCommandPool(d->h, &pci, NULL, &d->pool);
	if (r == VK_SUCCESS && !d->no_queue) {
		VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
		*call = "vkCreateFence";
		r = d->CreateFence(d->h, &fci, NULL, &d->fence);
	}
	if (r != VK_SUCCESS) {
		if (d->pool) d->DestroyCommandPool(d->h, d->pool, NULL);
		free(d);
		return r;
	}
	*out = H(d);
	return VK_SUCCESS;
}

static void wait_idle_locked(mr_device *d) {
	if (d->no_queue) return;
	pthread_mutex_lock(d->qmu);
	d->DeviceWaitIdle(d->h);
	pthread_mutex_unlock(d->qmu);
}

void mr_destroy_device(uint64_t dev) {
	mr_device *d = D(dev);
	wait_idle_locked(d);
	if (d->fence) d->DestroyFence(d->h, d->fence, NULL);
	d->DestroyCommandPool(d->h, d->pool, NULL);
	if (d->is_base) {
		d->DestroyDevice(d->h, NULL);
		pthread_mutex_destroy(d->qmu);
		free(d->qmu);
	}
	free(d);
}

VkResult mr_wait_idle(uint64_t dev) {
	mr_device *d = D(dev);
	if (d->no_queue) return VK_SUCCESS; // nothing was submitted: nothing to wait for
	pthread_mutex_lock(d->qmu);
	VkResult r = d->DeviceWaitIdle(d->h);
	pthread_mutex_unlock(d->qmu);
	return r;
}

// ---- Buffers ------------------------------------------------------------------

static int32_t memory_type(mr_device *d, uint32_t bits, uint32_t flags) {
	for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++)
		if ((bits & (1u << i)) && (d->mem.memoryTypes[i].propertyFlags & flags) == flags) return (int32_t)i;
	return -1;
}

VkResult mr_create_buffer(uint64_t dev, uint64_t size, uint32_t usage, uint32_t mem_required,
	uint32_t mem_preferred, int map, uint64_t *buf, uint64_t *mem, void **mapped, const char **call) {
	mr_device *d = D(dev);
	VkBufferCreateInfo ci = {
		.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
		.size = size,
		.usage = usage,
		.sharingMode = VK_SHARING_MODE_EXCLUSIVE,
	};
	VkBuffer b = VK_NULL_HANDLE;
	VkDeviceMemory m = VK_NULL_HANDLE;
	*call = "vkCreateBuffer";
	VkResult r = d->CreateBuffer(d->h, &ci, NULL, &b);
	if (r != VK_SUCCESS) return r;
	VkMemoryRequirements req;
	d->GetBufferMemoryRequirements(d->h, b, &req);
	int32_t type = memory_type(d, req.memoryTypeBits, mem_required | mem_preferred);
	if (type < 0) type = memory_type(d, req.memoryTypeBits, mem_required);
	if (type < 0) {
		*call = "vkAllocateMemory (no suitable memory type)";
		d->DestroyBuffer(d->h, b, NULL);
		return VK_ERROR_FEATURE_NOT_PRESENT;
	}
	VkMemoryAllocateInfo ai = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
		.allocationSize = req.size,
		.memoryTypeIndex = (uint32_t)type,
	};
	*call = "vkAllocateMemory";
	if ((r = d->AllocateMemory(d->h, &ai, NULL, &m)) != VK_SUCCESS) goto fail;
	*call = "vkBindBufferMemory";
	if ((r = d->BindBufferMemory(d->h, b, m, 0)) != VK_SUCCESS) goto fail;
	*mapped = NULL;
	if (map) {
		*call = "vkMapMemory";
		if ((r = d->MapMemory(d->h, m, 0, VK_WHOLE_SIZE, 0, mapped)) != VK_SUCCESS) goto fail;
	}
	*buf = H(b);
	*mem = H(m);
	return VK_SUCCESS;
fail:
	d->DestroyBuffer(d->h, b, NULL);
	if (m) d->FreeMemory(d->h, m, NULL);
	return r;
}

void mr_destroy_buffer(uint64_t dev, uint64_t buf, uint64_t mem) {
	mr_device *d = D(dev);
	d->DestroyBuffer(d->h, (VkBuffer)(uintptr_t)buf, NULL);
	d->FreeMemory(d->h, (VkDeviceMemory)(uintptr_t)mem, NULL); // unmaps too
}

// ---- Kernels ------------------------------------------------------------------

VkResult mr_create_kernel(uint64_t dev, const uint32_t *code, size_t code_bytes,
	uint32_t bindings, uint32_t push_bytes, const uint32_t *spec, uint32_t nspec, uint32_t subgroup_size,
	uint64_t *dsl_out, uint64_t *layout_out, uint64_t *pipeline_out, const char **call) {
	mr_device *d = D(dev);
	VkShaderModule module = VK_NULL_HANDLE;
	VkDescriptorSetLayout dsl = VK_NULL_HANDLE;
	VkPipelineLayout layout = VK_NULL_HANDLE;
	VkPipeline pipeline = VK_NULL_HANDLE;
	VkDescriptorSetLayoutBinding *b = calloc(bindings ? bindings : 1, sizeof *b);
	VkSpecializationMapEntry *entries = calloc(nspec ? nspec : 1, sizeof *entries);
	VkResult r = VK_ERROR_OUT_OF_HOST_MEMORY;
	*call = "calloc";
	if (!b || !entries) goto done;

	VkShaderModuleCreateInfo mci = {
		.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
		.codeSize = code_bytes,
		.pCode = code,
	};
	*call = "vkCreateShaderModule";
	if ((r = d->CreateShaderModule(d->h, &mci, NULL, &module)) != VK_SUCCESS) goto done;

	for (uint32_t i = 0; i < bindings; i++) {
		b[i].binding = i;
		b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
		b[i].descriptorCount = 1;
		b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
	}
	VkDescriptorSetLayoutCreateInfo lci = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
		.bindingCount = bindings,
		.pBindings = b,
	};
	*call = "vkCreateDescriptorSetLayout";
	if ((r = d->CreateDescriptorSetLayout(d->h, &lci, NULL, &dsl)) != VK_SUCCESS) goto done;

	VkPushConstantRange range = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = push_bytes};
	VkPipelineLayoutCreateInfo plci = {
		.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
		.setLayoutCount = 1,
		.pSetLayouts = &dsl,
		.pushConstantRangeCount = push_bytes ? 1 : 0,
		.pPushConstantRanges = &range,
	};
	*call = "vkCreatePipelineLayout";
	if ((r = d->CreatePipelineLayout(d->h, &plci, NULL, &layout)) != VK_SUCCESS) goto done;

	for (uint32_t i = 0; i < nspec; i++) {
		entries[i].constantID = i;
		entries[i].offset = i * 4;
		entries[i].size = 4;
	}
	VkSpecializationInfo si = {
		.mapEntryCount = nspec,
		.pMapEntries = entries,
		.dataSize = nspec * 4,
		.pData = spec,
	};
	// A kernel whose correctness depends on the subgroup size asks for it,
	// with every subgroup full (VK_EXT_subgroup_size_control): the size a
	// driver reports is not the size a pipeline gets (Intel, AMD RDNA).
	VkPipelineShaderStageRequiredSubgroupSizeCreateInfoEXT rss = {
		.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO_EXT,
		.requiredSubgroupSize = subgroup_size,
	};
	VkComputePipelineCreateInfo pci = {
		.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
		.stage = {
			.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
			.pNext = subgroup_size ? &rss : NULL,
			.flags = subgroup_size ? VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT_EXT : 0,
			.stage = VK_SHADER_STAGE_COMPUTE_BIT,
			.module = module,
			.pName = "main",
			.pSpecializationInfo = nspec ? &si : NULL,
		},
		.layout = layout,
	};
	if (d->capture_stats) pci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
	*call = "vkCreateComputePipelines";
	r = d->CreateComputePipelines(d->h, VK_NULL_HANDLE, 1, &pci, NULL, &pipeline);
done:
	if (module) d->DestroyShaderModule(d->h, module, NULL); // the pipeline keeps what it needs
	if (r != VK_SUCCESS) {
		if (layout) d->DestroyPipelineLayout(d->h, layout, NULL);
		if (dsl) d->DestroyDescriptorSetLayout(d->h, dsl, NULL);
	} else {
		*dsl_out = H(dsl);
		*layout_out = H(layout);
		*pipeline_out = H(pipeline);
	}
	free(b);
	free(entries);
	return r;
}

// mr_kernel_stats writes up to cap of the pipeline's compiler statistics,
// every executable's in turn, into out and their count into *n
// (VK_KHR_pipeline_executable_properties: a device made with exec_stats).
VkResult mr_kernel_stats(uint64_t dev, uint64_t pipeline, mr_stat *out, uint32_t cap, uint32_t *n, const char **call) {
	mr_device *d = D(dev);
	*n = 0;
	VkPipelineInfoKHR pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, .pipeline = (VkPipeline)(uintptr_t)pipeline};
	uint32_t ne = 0;
	*call = "vkGetPipelineExecutablePropertiesKHR";
	VkResult r = d->GetPipelineExecutablePropertiesKHR(d->h, &pi, &ne, NULL);
	if (r != VK_SUCCESS) return r;
	VkPipelineExecutablePropertiesKHR *props = calloc(ne ? ne : 1, sizeof *props);
	if (!props) {
		*call = "calloc";
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	}
	for (uint32_t e = 0; e < ne; e++) props[e].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR;
	if ((r = d->GetPipelineExecutablePropertiesKHR(d->h, &pi, &ne, props)) < 0) goto done;
	for (uint32_t e = 0; e < ne; e++) {
		VkPipelineExecutableInfoKHR ei = {.sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, .pipeline = pi.pipeline, .executableIndex = e};
		uint32_t ns = 0;
		*call = "vkGetPipelineExecutableStatisticsKHR";
		if ((r = d->GetPipelineExecutableStatisticsKHR(d->h, &ei, &ns, NULL)) != VK_SUCCESS) goto done;
		VkPipelineExecutableStatisticKHR *st = calloc(ns ? ns : 1, sizeof *st);
		if (!st) {
			*call = "calloc";
			r = VK_ERROR_OUT_OF_HOST_MEMORY;
			goto done;
		}
		for (uint32_t i = 0; i < ns; i++) st[i].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR;
		if ((r = d->GetPipelineExecutableStatisticsKHR(d->h, &ei, &ns, st)) < 0) {
			free(st);
			goto done;
		}
		for (uint32_t i = 0; i < ns; i++, (*n)++) {
			if (*n >= cap) continue;
			mr_stat *o = &out[*n];
			memset(o, 0, sizeof *o);
			strncpy(o->exec, props[e].name, sizeof o->exec - 1);
			strncpy(o->name, st[i].name, sizeof o->name - 1);
			strncpy(o->desc, st[i].description, sizeof o->desc - 1);
			o->format = st[i].format;
			switch (st[i].format) {
			case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: o->value = st[i].value.b32; break;
			case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: o->value = (double)st[i].value.i64; break;
			case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR: o->value = (double)st[i].value.u64; break;
			case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: o->value = st[i].value.f64; break;
			default: break;
			}
		}
		free(st);
	}
	r = VK_SUCCESS;
done:
	free(props);
	return r;
}

void mr_destroy_kernel(uint64_t dev, uint64_t dsl, uint64_t layout, uint64_t pipeline) {
	mr_device *d = D(dev);
	d->DestroyPipeline(d->h, (VkPipeline)(uintptr_t)pipeline, NULL);
	d->DestroyPipelineLayout(d->h, (VkPipelineLayout)(uintptr_t)layout, NULL);
	d->DestroyDescriptorSetLayout(d->h, (VkDescriptorSetLayout)(uintptr_t)dsl, NULL);
}

// ---- Descriptors ----------------------------------------------------------------

VkResult mr_create_descriptor_pool(uint64_t dev, uint32_t sets, uint32_t descriptors, uint64_t *pool) {
	mr_device *d = D(dev);
	VkDescriptorPoolSize size = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = descriptors};
	VkDescriptorPoolCreateInfo ci = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
		.maxSets = sets,
		.poolSizeCount = 1,
		.pPoolSizes = &size,
	};
	VkDescriptorPool p = VK_NULL_HANDLE;
	VkResult r = d->CreateDescriptorPool(d->h, &ci, NULL, &p);
	*pool = H(p);
	return r;
}

void mr_destroy_descriptor_pool(uint64_t dev, uint64_t pool) {
	D(dev)->DestroyDescriptorPool(D(dev)->h, (VkDescriptorPool)(uintptr_t)pool, NULL);
}

VkResult mr_allocate_set(uint64_t dev, uint64_t pool, uint64_t dsl, uint64_t *set) {
	mr_device *d = D(dev);
	VkDescriptorSetLayout l = (VkDescriptorSetLayout)(uintptr_t)dsl;
	VkDescriptorSetAllocateInfo ai = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
		.descriptorPool = (VkDescriptorPool)(uintptr_t)pool,
		.descriptorSetCount = 1,
		.pSetLayouts = &l,
	};
	VkDescriptorSet s = VK_NULL_HANDLE;
	VkResult r = d->AllocateDescriptorSets(d->h, &ai, &s);
	*set = H(s);
	return r;
}

void mr_write_set(uint64_t dev, uint64_t set, uint32_t n, const uint64_t *bufs,
	const uint64_t *offsets, const uint64_t *sizes) {
	mr_device *d = D(dev);
	VkDescriptorBufferInfo info[32];
	VkWriteDescriptorSet w[32];
	if (n > 32) n = 32; // the Go side refuses more
	for (uint32_t i = 0; i < n; i++) {
		info[i] = (VkDescriptorBufferInfo){(VkBuffer)(uintptr_t)bufs[i], offsets[i], sizes[i]};
		w[i] = (VkWriteDescriptorSet){
			.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
			.dstSet = (VkDescriptorSet)(uintptr_t)set,
			.dstBinding = i,
			.descriptorCount = 1,
			.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
			.pBufferInfo = &info[i],
		};
	}
	d->UpdateDescriptorSets(d->h, n, w, 0, NULL);
}

// ---- Queries --------------------------------------------------------------------

VkResult mr_create_query_pool(uint64_t dev, uint32_t count, uint64_t *pool) {
	mr_device *d = D(dev);
	VkQueryPoolCreateInfo ci = {
		.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
		.queryType = VK_QUERY_TYPE_TIMESTAMP,
		.queryCount = count,
	};
	VkQueryPool p = VK_NULL_HANDLE;
	VkResult r = d->CreateQueryPool(d->h, &ci, NULL, &p);
	*pool = H(p);
	return r;
}

void mr_destroy_query_pool(uint64_t dev, uint64_t pool) {
	D(dev)->DestroyQueryPool(D(dev)->h, (VkQueryPool)(uintptr_t)pool, NULL);
}

VkResult mr_query_results(uint64_t dev, uint64_t pool, uint32_t count, uint64_t *out) {
	mr_device *d = D(dev);
	return d->GetQueryPoolResults(d->h, (VkQueryPool)(uintptr_t)pool, 0, count, count * sizeof(uint64_t), out,
		sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
}

// ---- Command buffers --------------------------------------------------------------

#define CB(cb) ((VkCommandBuffer)(uintptr_t)(cb))

VkResult mr_begin(uint64_t dev, uint64_t *cb, int one_time, const char **call) {
	mr_device *d = D(dev);
	VkCommandBufferAllocateInfo ai = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
		.commandPool = d->pool,
		.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
		.commandBufferCount = 1,
	};
	VkCommandBuffer c = VK_NULL_HANDLE;
	*call = "vkAllocateCommandBuffers";
	VkResult r = d->AllocateCommandBuffers(d->h, &ai, &c);
	if (r != VK_SUCCESS) return r;
	VkCommandBufferBeginInfo bi = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
		.flags = one_time ? VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT : 0,
	};
	*call = "vkBeginCommandBuffer";
	if ((r = d->BeginCommandBuffer(c, &bi)) != VK_SUCCESS) {
		d->FreeCommandBuffers(d->h, d->pool, 1, &c);
		return r;
	}
	*cb = H(c);
	return VK_SUCCESS;
}

VkResult mr_end(uint64_t dev, uint64_t cb) { return D(dev)->EndCommandBuffer(CB(cb)); }

void mr_free_command_buffer(uint64_t dev, uint64_t cb) {
	VkCommandBuffer c = CB(cb);
	D(dev)->FreeCommandBuffers(D(dev)->h, D(dev)->pool, 1, &c);
}

void mr_cmd_dispatch(uint64_t dev, uint64_t cb, uint64_t pipeline, uint64_t layout, uint64_t set,
	const void *push, uint32_t push_bytes, uint32_t x, uint32_t y, uint32_t z,
	uint64_t indirect_buf, uint64_t indirect_off) {
	mr_device *d = D(dev);
	VkDescriptorSet s = (VkDescriptorSet)(uintptr_t)set;
	VkPipelineLayout l = (VkPipelineLayout)(uintptr_t)layout;
	d->CmdBindPipeline(CB(cb), VK_PIPELINE_BIND_POINT_COMPUTE, (VkPipeline)(uintptr_t)pipeline);
	if (s) d->CmdBindDescriptorSets(CB(cb), VK_PIPELINE_BIND_POINT_COMPUTE, l, 0, 1, &s, 0, NULL);
	if (push_bytes) d->CmdPushConstants(CB(cb), l, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
	if (indirect_buf) d->CmdDispatchIndirect(CB(cb), (VkBuffer)(uintptr_t)indirect_buf, indirect_off);
	else d->CmdDispatch(CB(cb), x, y, z);
}

void mr_cmd_copy(uint64_t dev, uint64_t cb, uint64_t src, uint64_t dst, uint64_t src_off, uint64_t dst_off, uint64_t n) {
	VkBufferCopy region = {src_off, dst_off, n};
	D(dev)->CmdCopyBuffer(CB(cb), (VkBuffer)(uintptr_t)src, (VkBuffer)(uintptr_t)dst, 1, &region);
}

void mr_cmd_fill(uint64_t dev, uint64_t cb, uint64_t buf, uint64_t off, uint64_t n, uint32_t value) {
	D(dev)->CmdFillBuffer(CB(cb), (VkBuffer)(uintptr_t)buf, off, n, value);
}

void mr_cmd_update(uint64_t dev, uint64_t cb, uint64_t buf, uint64_t off, uint64_t n, const void *data) {
	D(dev)->CmdUpdateBuffer(CB(cb), (VkBuffer)(uintptr_t)buf, off, n, data);
}

void mr_cmd_barrier(uint64_t dev, uint64_t cb, uint32_t src_stages, uint32_t dst_stages,
	uint32_t n, const uint64_t *bufs, const uint64_t *offsets, const uint64_t *sizes,
	const uint32_t *src_access, const uint32_t *dst_access) {
	VkBufferMemoryBarrier b[64];
	if (n > 64) n = 64; // the Go side splits longer lists
	for (uint32_t i = 0; i < n; i++)
		b[i] = (VkBufferMemoryBarrier){
			.sType = VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER,
			.srcAccessMask = src_access[i],
			.dstAccessMask = dst_access[i],
			.srcQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
			.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
			.buffer = (VkBuffer)(uintptr_t)bufs[i],
			.offset = offsets[i],
			.size = sizes[i],
		};
	D(dev)->CmdPipelineBarrier(CB(cb), src_stages, dst_stages, 0, 0, NULL, n, b, 0, NULL);
}

void mr_cmd_memory_barrier(uint64_t dev, uint64_t cb, uint32_t src_stages, uint32_t dst_stages,
	uint32_t src_access, uint32_t dst_access) {
	VkMemoryBarrier b = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
		.srcAccessMask = src_access,
		.dstAccessMask = dst_access,
	};
	D(dev)->CmdPipelineBarrier(CB(cb), src_stages, dst_stages, 0, 1, &b, 0, NULL, 0, NULL);
}

void mr_cmd_begin_conditional(uint64_t dev, uint64_t cb, uint64_t buf, uint64_t off) {
	VkConditionalRenderingBeginInfoEXT bi = {
		.sType = VK_STRUCTURE_TYPE_CONDITIONAL_RENDERING_BEGIN_INFO_EXT,
		.buffer = (VkBuffer)(uintptr_t)buf,
		.offset = off,
	};
	D(dev)->CmdBeginConditionalRenderingEXT(CB(cb), &bi);
}

void mr_cmd_end_conditional(uint64_t dev, uint64_t cb) {
	D(dev)->CmdEndConditionalRenderingEXT(CB(cb));
}

void mr_cmd_reset_queries(uint64_t dev, uint64_t cb, uint64_t pool, uint32_t count) {
	D(dev)->CmdResetQueryPool(CB(cb), (VkQueryPool)(uintptr_t)pool, 0, count);
}

void mr_cmd_timestamp(uint64_t dev, uint64_t cb, uint64_t pool, uint32_t query) {
	D(dev)->CmdWriteTimestamp(CB(cb), VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, (VkQueryPool)(uintptr_t)pool, query);
}

VkResult mr_submit_wait(uint64_t dev, uint64_t cb, uint64_t timeout_ns, const char **call) {
	mr_device *d = D(dev);
	VkCommandBuffer c = CB(cb);
	VkSubmitInfo si = {
		.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
		.commandBufferCount = 1,
		.pCommandBuffers = &c,
	};
	if (d->no_queue) {
		*call = "vkCreateFence";
		return d->fence_err;
	}
	*call = "vkResetFences";
	VkResult r = d->ResetFences(d->h, 1, &d->fence);
	if (r != VK_SUCCESS) return r;
	*call = "vkQueueSubmit";
	pthread_mutex_lock(d->qmu);
	r = d->QueueSubmit(d->queue, 1, &si, d->fence);
	pthread_mutex_unlock(d->qmu);
	if (r != VK_SUCCESS) return r;
	*call = "vkWaitForFences";
	return d->WaitForFences(d->h, 1, &d->fence, VK_TRUE, timeout_ns);
}
