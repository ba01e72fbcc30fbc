#version 450
// Attention for CPU devices, keys and values from the caches: see attention_texel.glsl.
#define ATTENTION_STORE 0
#define ATTENTION_PROBS 0
#extension GL_GOOGLE_include_directive : require
#include "attention_texel.glsl"
