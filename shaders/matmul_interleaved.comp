#version 450
// The interleaved matmul, each invocation loading x itself: see matmul_interleaved.glsl.
#extension GL_GOOGLE_include_directive : require
#define MATMUL_SHUFFLE 0
#include "matmul_interleaved.glsl"
