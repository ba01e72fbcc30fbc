#version 450
// activation_backward.comp for devices where storage texel buffers are the fast path (see
// activation_texel.comp): four elements per invocation, dout and x read as rgba32f texels, dx
// written as vec4s (dx may alias dout). The host guarantees n % 4 == 0, texel-aligned dout and
// x, and dx on 16 bytes.
//   dx[n] = dout[n] f'(x[n])
#extension GL_GOOGLE_include_directive : require
#include "activation.h"
#include "common/activation.glsl"
#include "common/index.glsl"

layout(constant_id = 3) const uint KIND = ACT_GELU_TANH;

layout(binding = 0) writeonly buffer Dx { vec4 dx[]; };          // [n / 4]
layout(binding = 1, rgba32f) uniform readonly imageBuffer dout;  // [n / 4]
layout(binding = 2, rgba32f) uniform readonly imageBuffer x;     // [n / 4], the activation's input
layout(push_constant) uniform Push { ActivationPush p; };

void main() {
  const uint i = flat_index();
  if (i >= p.n / 4) return;
  const vec4 v = imageLoad(x, int(i));
  dx[i] = imageLoad(dout, int(i)) * vec4(activation_slope(v.x, KIND), activation_slope(v.y, KIND),
                                         activation_slope(v.z, KIND), activation_slope(v.w, KIND));
}
