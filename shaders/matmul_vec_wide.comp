#version 450
// The wide matrix-vector kernel, its partial sums reduced with subgroupAdd: see
// matmul_vec_wide.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define SUBGROUP_REDUCE 1
#include "matmul_vec_wide.glsl"
