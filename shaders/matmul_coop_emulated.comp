#version 450
// matmul_coop.glsl in 64 x 64 tiles with its fragment operations emulated in scalar arithmetic,
// for devices without matrix units (the tests run the tiling on lavapipe this way).
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#define MATMUL_COOP_HARDWARE 0
#define MATMUL_COOP_FRAGS 2
#include "matmul_coop.glsl"
