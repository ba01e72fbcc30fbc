#version 450
// Attention for any device, through storage buffers: see attention.glsl.
#define ATTENTION_PROBS 0
#extension GL_GOOGLE_include_directive : require
#include "attention.glsl"
