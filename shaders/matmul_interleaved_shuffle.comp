#version 450
// The interleaved matmul, x's loads shared through the subgroup: see matmul_interleaved.glsl.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define MATMUL_SHUFFLE 1
#include "matmul_interleaved.glsl"
