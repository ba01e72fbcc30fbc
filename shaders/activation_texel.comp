#version 450
// activation.comp for devices where storage texel buffers are the fast path (llvmpipe: a
// storage-buffer load whose address differs per lane is a scalar loop over the lanes, an
// imageLoad one vector gather): four elements per invocation, x read as rgba32f texels, out
// written as vec4s. out may alias x, as in activation.comp: each texel is read, then written, by
// one invocation. The host guarantees n % 4 == 0, a texel-aligned x and out on 16 bytes.
//   out[n] = f(x[n])
#extension GL_GOOGLE_include_directive : require
#include "activation.h"
#include "common/activation.glsl"
#include "common/index.glsl"

layout(constant_id = 3) const uint KIND = ACT_GELU_TANH;

layout(binding = 0) writeonly buffer Out { vec4 out_[]; };  // [n / 4]
layout(binding = 1, rgba32f) uniform readonly imageBuffer x;  // [n / 4]
layout(push_constant) uniform Push { ActivationPush p; };

void main() {
  const uint i = flat_index();
  if (i >= p.n / 4) return;
  const vec4 v = imageLoad(x, int(i));
  out_[i] = vec4(activate(v.x, KIND), activate(v.y, KIND), activate(v.z, KIND), activate(v.w, KIND));
}
