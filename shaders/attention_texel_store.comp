#version 450
// Attention for CPU devices with kv_store fused in: see attention_texel.glsl.
#define ATTENTION_STORE 1
#define ATTENTION_PROBS 0
#extension GL_GOOGLE_include_directive : require
#include "attention_texel.glsl"
