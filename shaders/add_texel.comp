#version 450
// add.comp for devices where storage texel buffers are the fast path (see activation_texel.comp):
// four elements per invocation, a and b read as rgba32f texels, out written as vec4s (out may
// alias a or b). The host guarantees n % 4 == 0, texel-aligned a and b, and out on 16 bytes.
//   out[n] = a[n] + b[n]
#extension GL_GOOGLE_include_directive : require
#include "add.h"
#include "common/index.glsl"

layout(binding = 0) writeonly buffer Out { vec4 out_[]; };    // [n / 4]
layout(binding = 1, rgba32f) uniform readonly imageBuffer a;  // [n / 4]
layout(binding = 2, rgba32f) uniform readonly imageBuffer b;  // [n / 4]
layout(push_constant) uniform Push { AddPush p; };

void main() {
  const uint i = flat_index();
  if (i < p.n / 4) out_[i] = imageLoad(a, int(i)) + imageLoad(b, int(i));
}
