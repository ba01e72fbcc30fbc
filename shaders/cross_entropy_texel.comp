#version 450
// cross_entropy.comp for devices where storage texel buffers are the fast path (llvmpipe: its
// shared-memory reductions and barriers, and storage-buffer loads whose address differs per
// lane, run as loops over the lanes): one invocation per row of logits, read as rgba32f texels
// in vec4 partials, then turned into the loss's gradient in place through a vec4 view of the same
// memory. Each invocation reads a texel of its own row before it writes that texel.
//   losses[r] = logsumexp(l[r]) - l[r][t],  l[r][v] <- (exp(l[r][v] - logsumexp) - (v == t)) * scale
// A target of CROSS_ENTROPY_IGNORE (padding) gives a loss of 0 and a zero gradient row; any other
// outside [0, V) a NaN loss, the row left as it was. The host guarantees
// V % 4 == 0, the logits texel-aligned, one dispatch for all rows (no windows: the skips are 0).
#extension GL_GOOGLE_include_directive : require
#include "cross_entropy.h"
#include "common/index.glsl"

layout(binding = 0) writeonly buffer Logits { vec4 l_out[]; };     // [N, V / 4], the gradient
layout(binding = 1) readonly buffer Targets { int targets[]; };    // [N]
layout(binding = 2) writeonly buffer Losses { float losses[]; };   // [N]
layout(binding = 3, rgba32f) uniform readonly imageBuffer l;       // [N, V / 4], the logits

layout(push_constant) uniform Push { CrossEntropyPush p; };

void main() {
  const uint row = flat_index();
  if (row >= p.N) return;
  const uint texels = p.V / 4, base = row * texels;
  const int t = targets[row];
  if (t == CROSS_ENTROPY_IGNORE) {
    losses[row] = 0.0;
    for (uint i = 0; i < texels; i++) l_out[base + i] = vec4(0.0);
    return;
  }
  if (t < 0 || uint(t) >= p.V) {
    losses[row] = uintBitsToFloat(0x7fc00000u);  // NaN
    return;
  }
  vec4 m4 = vec4(uintBitsToFloat(0xff800000u));  // -inf
  for (uint i = 0; i < texels; i++) m4 = max(m4, imageLoad(l, int(base + i)));
  const float m = max(max(m4.x, m4.y), max(m4.z, m4.w));
  vec4 s4 = vec4(0.0);
  for (uint i = 0; i < texels; i++) s4 += exp(imageLoad(l, int(base + i)) - m);
  const float lse = m + log((s4.x + s4.y) + (s4.z + s4.w));
  const uint tt = uint(t) / 4;
  losses[row] = lse - imageLoad(l, int(base + tt))[uint(t) % 4];
  for (uint i = 0; i < texels; i++) {
    vec4 g = exp(imageLoad(l, int(base + i)) - lse);
    if (i == tt) g[uint(t) % 4] -= 1.0;
    l_out[base + i] = g * p.scale;
  }
}
