#version 450
// The gated activation of T5 v1.1's feed-forward (gated-GELU; GEGLU, SwiGLU with other f), one
// invocation per output element:
//   out[t, f] = f(x[t, f]) * x[t, F + f]                   [T, 2F] -> [T, F]
// x holds the two projections wi_0 and wi_1 side by side, one matmul's output. f is
// common/activation.glsl's (the one copy of each activation), a specialization constant, so the
// branch folds away. out must not alias x (the host checks).
#extension GL_GOOGLE_include_directive : require
#include "gated_activation.h"
#include "common/activation.glsl"
#include "common/index.glsl"

layout(constant_id = 3) const uint KIND = ACT_GELU_TANH;

layout(binding = 0) writeonly buffer Out { float out_[]; };  // [T, F]
layout(binding = 1) readonly buffer X { float x[]; };        // [T, 2F]
layout(push_constant) uniform Push { GatedActivationPush p; };

void main() {
  const uint i = flat_index();
  if (i >= p.T * p.F) return;
  const uint t = i / p.F, f = i - t * p.F;
  const uint a = 2 * t * p.F + f;  // x[t, f]; the gate x[t, F + f] is F further
  out_[i] = activate(x[a], KIND) * x[a + p.F];
}
