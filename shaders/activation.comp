#version 450
// MLP activation, element-wise: out[n] = f(x[n]), f = gelu (tanh, GPT-2's gelu_new), exact
// erf gelu, relu or identity (common/activation.glsl). The kind is a specialization constant,
// so the branch folds away. out may alias x: each element is read, then written, by one
// invocation.
#extension GL_GOOGLE_include_directive : require
#include "activation.h"
#include "common/activation.glsl"
#include "common/index.glsl"

layout(constant_id = 3) const uint KIND = ACT_GELU_TANH;

layout(binding = 0) writeonly buffer Out { float out_[]; };  // [n]
layout(binding = 1) readonly buffer X { float x[]; };        // [n]
layout(push_constant) uniform Push { ActivationPush p; };

void main() {
  uint i = flat_index();
  if (i < p.n) out_[i] = activate(x[i], KIND);
}
