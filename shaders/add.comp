#version 450
// add: out[n] = a[n] + b[n], one invocation per element. Training adds gradients with it
// (model/ops/gpu/add.h); the runtime tests use it as their probe kernel (tests/add.h). out may
// alias a or b: each element is read, then written, by one invocation.
#extension GL_GOOGLE_include_directive : require
#include "add.h"
#include "common/index.glsl"

layout(binding = 0) writeonly buffer Out { float out_[]; };  // [n]
layout(binding = 1) readonly buffer A { float a[]; };        // [n]
layout(binding = 2) readonly buffer B { float b[]; };        // [n]
layout(push_constant) uniform Push { AddPush p; };

void main() {
  uint i = flat_index();
  if (i < p.n) out_[i] = a[i] + b[i];
}
