#version 450
// The backward of activation.comp, element-wise: dx[n] = dout[n] * f'(x[n]) (training; f' is
// common/activation.glsl's activation_slope). The kind is a specialization constant. dx may
// alias dout: each element is read, then written, by one invocation.
#extension GL_GOOGLE_include_directive : require
#include "activation.h"
#include "common/activation.glsl"
#include "common/index.glsl"

layout(constant_id = 3) const uint KIND = ACT_GELU_TANH;

layout(binding = 0) writeonly buffer Dx { float dx[]; };     // [n]
layout(binding = 1) readonly buffer Dout { float dout[]; };  // [n]
layout(binding = 2) readonly buffer X { float x[]; };        // [n], the activation's input
layout(push_constant) uniform Push { ActivationPush p; };

void main() {
  uint i = flat_index();
  if (i < p.n) dx[i] = dout[i] * activation_slope(x[i], KIND);
}
