#version 450
// matmul_coop.glsl on the device's matrix units (VK_NV_cooperative_matrix, fp16 fragments).
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define MATMUL_COOP_HARDWARE 1
#include "matmul_coop.glsl"
