#version 450
// matmul_coop.glsl with its fragment operations emulated in shared memory and scalar arithmetic,
// for devices without matrix units (the tests run the tiling on lavapipe this way).
#extension GL_GOOGLE_include_directive : require
#define MATMUL_COOP_HARDWARE 0
#include "matmul_coop.glsl"
