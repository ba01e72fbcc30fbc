#version 450
// layernorm.comp's op and formula for devices where storage texel buffers are the fast path
// (llvmpipe): one invocation per row, reading x, gamma and beta as rgba32f texels. llvmpipe
// runs layernorm.comp's shared-memory reductions and barriers, and its storage-buffer loads
// whose address differs per lane, slowly: GPT-2 small's prefill spent 15% of its time there.
// Here a lane's loads are all its own row's, with no barriers; rows are summed in vec4 partials.
// The host guarantees C % 4 == 0 and texel-aligned x, gamma and beta.
#extension GL_GOOGLE_include_directive : require
#include "layernorm.h"
#include "common/index.glsl"
#include "common/norm.glsl"

layout(constant_id = 3) const uint KIND = LAYERNORM_STANDARD;

layout(binding = 0) writeonly buffer Out { vec4 out_[]; };        // [T, C / 4]
layout(binding = 1, rgba32f) uniform readonly imageBuffer x;      // [T, C / 4]
layout(binding = 2, rgba32f) uniform readonly imageBuffer gamma;  // [C / 4]
layout(binding = 3, rgba32f) uniform readonly imageBuffer beta;   // [C / 4]; Rms: not read
layout(push_constant) uniform Push { LayerNormPush p; };

float total(vec4 v) { return (v.x + v.y) + (v.z + v.w); }

void main() {
  const uint row = flat_index();
  if (row >= p.T) return;
  const uint texels = p.C / 4, base = row * texels;
  const float n = float(p.C);

  vec4 s = vec4(0.0);
  for (uint i = 0; i < texels; i++) s += imageLoad(x, int(base + i));
  const float m1 = norm_provisional_mean(KIND, total(s), n);

  vec4 d = vec4(0.0), d2 = vec4(0.0);
  for (uint i = 0; i < texels; i++) {
    const vec4 v = imageLoad(x, int(base + i)) - m1;
    d += v;
    d2 += v * v;
  }
  const NormStats st = norm_row_stats(KIND, total(d), total(d2), n, p.eps);

  for (uint i = 0; i < texels; i++)
    out_[base + i] = norm_apply(KIND, imageLoad(x, int(base + i)), m1, st.shift, st.scale,
                                imageLoad(gamma, int(i)), imageLoad(beta, int(i)));
}
