#version 450
// gated_activation.comp for devices where storage texel buffers are the fast path (llvmpipe: a
// storage-buffer load whose address differs per lane is a scalar loop over the lanes, an
// imageLoad one vector gather), as activation_texel.comp is activation.comp's: four outputs per
// invocation, x read as rgba32f texels, out written as vec4s. The host guarantees F % 4 == 0, a
// texel-aligned x and out on 16 bytes, and that out does not alias x.
//   out[t, f] = f(x[t, f]) * x[t, F + f]                   [T, 2F] -> [T, F]
#extension GL_GOOGLE_include_directive : require
#include "gated_activation.h"
#include "common/activation.glsl"
#include "common/index.glsl"

layout(constant_id = 3) const uint KIND = ACT_GELU_TANH;

layout(binding = 0) writeonly buffer Out { vec4 out_[]; };    // [T, F / 4]
layout(binding = 1, rgba32f) uniform readonly imageBuffer x;  // [T, 2F / 4]
layout(push_constant) uniform Push { GatedActivationPush p; };

void main() {
  const uint i = flat_index(), texels = p.F / 4;  // output texels per row
  if (i >= p.T * texels) return;
  const uint t = i / texels, j = i - t * texels;
  const uint a = 2 * t * texels + j;  // x[t, 4j .. 4j + 3]; the gate is `texels` further
  const vec4 v = imageLoad(x, int(a)), gate = imageLoad(x, int(a + texels));
  out_[i] = vec4(activate(v.x, KIND), activate(v.y, KIND), activate(v.z, KIND),
                 activate(v.w, KIND)) * gate;
}
