#version 450
// matmul_coop.glsl in 128 x 128 tiles, its fragment operations emulated (matmul_coop_emulated.comp).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#define MATMUL_COOP_HARDWARE 0
#define MATMUL_COOP_FRAGS 4
#include "matmul_coop.glsl"
