#version 450
// attention_texel.comp that also writes the softmax weights (the attention tap): see
// attention_texel.glsl.
#define ATTENTION_STORE 0
#define ATTENTION_PROBS 1
#extension GL_GOOGLE_include_directive : require
#include "attention_texel.glsl"
