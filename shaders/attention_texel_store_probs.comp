#version 450
// attention_texel_store.comp that also writes the softmax weights (the attention tap): see
// attention_texel.glsl.
#define ATTENTION_STORE 1
#define ATTENTION_PROBS 1
#extension GL_GOOGLE_include_directive : require
#include "attention_texel.glsl"
