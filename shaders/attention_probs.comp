#version 450
// attention.comp that also writes the softmax weights (the attention tap): see attention.glsl.
#define ATTENTION_PROBS 1
#extension GL_GOOGLE_include_directive : require
#include "attention.glsl"
