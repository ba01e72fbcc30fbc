#version 450
// fill: out[n] = value, one invocation per element. Training zeroes its gradients with it at the
// start of each step (they accumulate over the step's uses of each weight).
#extension GL_GOOGLE_include_directive : require
#include "fill.h"
#include "common/index.glsl"

layout(binding = 0) writeonly buffer Out { float out_[]; };  // [n]
layout(push_constant) uniform Push { FillPush p; };

void main() {
  uint i = flat_index();
  if (i < p.n) out_[i] = p.value;
}
