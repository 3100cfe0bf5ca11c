// coopmat.glsl: the cooperative matrices matmul_coop.comp and probe_coop.comp
// take, 16x16x16 f16 x f16 -> f32 at subgroup scope, through one of two
// Vulkan extensions:
//   - VK_NV_cooperative_matrix (the default: NVIDIA's drivers), with
//     GL_NV_cooperative_matrix's types and builtins;
//   - under COOPMAT_KHR, VK_KHR_cooperative_matrix (AMD RDNA3 and later,
//     Intel, and NVIDIA too). Debian 12's glslang (11.13) has no
//     GL_KHR_cooperative_matrix, so the types and instructions are named by
//     their SPIR-V opcodes through GL_EXT_spirv_intrinsics, which it does
//     compile. One thing it cannot say: OpTypeCooperativeMatrixKHR's
//     operands are ids (a component type and four 32-bit integer
//     constants: scope, rows, columns, use), and glslang 11 writes a
//     spirv_type's constant parameters as literal words. So CM_A, CM_B and
//     CM_C below carry literals, the component type as its width in bits
//     (16: f16, 32: f32), and the compiler's output goes through
//     shaders.FixCoopKHR (gen.go and TestSpirvIsFresh call it), which
//     rewrites each such type into the ids it needs (docs/cooperative-matrix-khr.md).
//
// The operations, the same on both (NV's builtins, KHR's instructions):
//   CM_A, CM_B, CM_C          the A (16x16 f16), B (16x16 f16) and accumulator (16x16 f32) types
//   cmFillA/B/C(v)            a matrix of v in every element
//   CM_LOAD_A(m, arr, off, stride)  m = A from shared arr[off], row-major, stride elements a row
//   CM_LOAD_B(m, arr, off, stride)  m = B from arr[off], column-major (B's columns are arr's rows)
//   CM_MULADD(a, b, c)        a * b + c
//   CM_ADD(a, c)              a + c (accumulators)
//   CM_STORE(c, arr, off, stride)   c into arr[off], row-major
// arr holds float16_t for loads and float for stores (the only ones the
// KHR declarations below take).
#ifdef COOPMAT_KHR
#extension GL_EXT_spirv_intrinsics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
// SPIR-V requires the Vulkan memory model with CooperativeMatrixKHR in a
// shader (as GL_NV_cooperative_matrix declares it for NV's).
#pragma use_vulkan_memory_model
#define CM_KHR_EXT extensions = ["SPV_KHR_cooperative_matrix"], capabilities = [6022]
// OpTypeCooperativeMatrixKHR (4456): component bits, scope (3: Subgroup),
// rows, columns, use (0: MatrixAKHR, 1: MatrixBKHR, 2: MatrixAccumulatorKHR),
// as literals for FixCoopKHR.
#define CM_A spirv_type(CM_KHR_EXT, id = 4456, 16, 3, 16, 16, 0)
#define CM_B spirv_type(CM_KHR_EXT, id = 4456, 16, 3, 16, 16, 1)
#define CM_C spirv_type(CM_KHR_EXT, id = 4456, 32, 3, 16, 16, 2)
// OpCooperativeMatrixLoadKHR (4457): pointer, memory layout (0: RowMajorKHR,
// 1: ColumnMajorKHR), stride in the pointer's elements.
spirv_instruction(CM_KHR_EXT, id = 4457) CM_A cmLoadA(spirv_by_reference float16_t at, int lay, uint stride);
spirv_instruction(CM_KHR_EXT, id = 4457) CM_B cmLoadB(spirv_by_reference float16_t at, int lay, uint stride);
// OpCooperativeMatrixStoreKHR (4458): pointer, object, layout, stride.
spirv_instruction(CM_KHR_EXT, id = 4458) void cmStoreC(spirv_by_reference float at, CM_C c, int lay, uint stride);
// OpCooperativeMatrixMulAddKHR (4459).
spirv_instruction(CM_KHR_EXT, id = 4459) CM_C cmMulAdd(CM_A a, CM_B b, CM_C c);
// OpCompositeConstruct (80) with one constituent fills the matrix; OpFAdd
// (129) adds two matrices element by element.
spirv_instruction(id = 80) CM_A cmFillA(float16_t v);
spirv_instruction(id = 80) CM_B cmFillB(float16_t v);
spirv_instruction(id = 80) CM_C cmFillC(float v);
spirv_instruction(id = 129) CM_C cmAddC(CM_C a, CM_C b);
#define CM_LOAD_A(m, arr, off, stride) m = cmLoadA(arr[off], 0, stride)
#define CM_LOAD_B(m, arr, off, stride) m = cmLoadB(arr[off], 1, stride)
#define CM_MULADD(a, b, c) cmMulAdd(a, b, c)
#define CM_ADD(a, c) cmAddC(a, c)
#define CM_STORE(c, arr, off, stride) cmStoreC(arr[off], c, 0, stride)
#else
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#define CM_A fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define CM_B fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define CM_C fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define cmFillA(v) CM_A(v)
#define cmFillB(v) CM_B(v)
#define cmFillC(v) CM_C(v)
#define CM_LOAD_A(m, arr, off, stride) coopMatLoadNV(m, arr, off, stride, false)
#define CM_LOAD_B(m, arr, off, stride) coopMatLoadNV(m, arr, off, stride, true)
#define CM_MULADD(a, b, c) coopMatMulAddNV(a, b, c)
#define CM_ADD(a, c) ((a) + (c))
#define CM_STORE(c, arr, off, stride) coopMatStoreNV(c, arr, off, stride, false)
#endif
