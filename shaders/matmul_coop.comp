#version 450
// matmul_coop.glsl on the device's matrix units (VK_NV_cooperative_matrix, fp16 fragments), in
// 64 x 64 tiles: for grids that 128 x 128 tiles would leave short of the device's compute units.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define MATMUL_COOP_HARDWARE 1
#define MATMUL_COOP_FRAGS 2
#include "matmul_coop.glsl"
