#version 450
// matmul_coop.glsl on the device's matrix units in 128 x 128 tiles (4 x 4 fragments per
// subgroup): for grids large enough to fill the device.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define MATMUL_COOP_HARDWARE 1
#define MATMUL_COOP_FRAGS 4
#include "matmul_coop.glsl"
