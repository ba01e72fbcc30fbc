#version 450
// The wide matrix-vector kernel for devices without subgroup arithmetic in compute shaders: its
// partial sums reduced with a shared-memory tree. See matmul_vec_wide.glsl.
#extension GL_GOOGLE_include_directive : require
#define SUBGROUP_REDUCE 0
#include "matmul_vec_wide.glsl"
