#version 450
// Residual add: out[n] = a[n] + b[n]. Element-wise, one invocation per element.
#extension GL_GOOGLE_include_directive : require
#include "add.h"
#include "common/index.glsl"

layout(local_size_x_id = 0) in;

layout(binding = 0) writeonly buffer Out { float out_[]; };  // [n]
layout(binding = 1) readonly buffer A { float a[]; };        // [n]
layout(binding = 2) readonly buffer B { float b[]; };        // [n]
layout(push_constant) uniform Push { AddPush p; };

void main() {
  uint i = flat_index();
  if (i < p.n) out_[i] = a[i] + b[i];
}
