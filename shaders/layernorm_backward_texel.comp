#version 450
// layernorm_backward.comp for devices where storage texel buffers are the fast path (llvmpipe),
// the same two passes and formulas, reading dout, x, gamma and the row statistics as rgba32f
// texels:
//   PARAMS = false: one invocation per row (layernorm_texel.comp's layout: no shared memory, no
//     barriers), the row summed in vec4 partials; dx and the row's m1, shift, a written.
//   PARAMS = true: one invocation per texel of 4 channels, over the rows in order:
//       dgamma[c] += sum_t dout[t, c] dev[t, c] a[t],  dbeta[c] += sum_t dout[t, c]
//     (Rms has no beta: dbeta is not written, and its binding holds something else.)
//     No float atomics: the same bits every run.
// llvmpipe ran layernorm_backward.comp's per-channel pass, whose loads differ per lane, as a
// scalar loop over lanes: 14% of a training step at 16 x 256 tokens. The host guarantees
// C % 4 == 0 and texel-aligned dout, x, gamma and stats.
#extension GL_GOOGLE_include_directive : require
#include "layernorm.h"
#include "common/index.glsl"
#include "common/norm.glsl"

layout(constant_id = 3) const uint KIND = LAYERNORM_STANDARD;
layout(constant_id = 4) const bool PARAMS = false;

layout(binding = 0) writeonly buffer Dx { vec4 dx[]; };             // [T, C / 4], pass 1
layout(binding = 1) buffer Dgamma { vec4 dgamma[]; };                // [C / 4], accumulated by pass 2
layout(binding = 2) buffer Dbeta { vec4 dbeta[]; };                  // [C / 4], accumulated by pass 2
layout(binding = 3) writeonly buffer Stats { vec4 stats[]; };       // [T]: m1, shift, a (pass 1)
layout(binding = 4, rgba32f) uniform readonly imageBuffer dout;      // [T, C / 4]
layout(binding = 5, rgba32f) uniform readonly imageBuffer x;         // [T, C / 4]
layout(binding = 6, rgba32f) uniform readonly imageBuffer gamma;     // [C / 4]
layout(binding = 7, rgba32f) uniform readonly imageBuffer stats_in;  // the same stats (pass 2)
layout(push_constant) uniform Push { LayerNormPush p; };

float total(vec4 v) { return (v.x + v.y) + (v.z + v.w); }

void params() {
  const uint c4 = flat_index(), texels = p.C / 4;
  if (c4 >= texels) return;
  vec4 dg = vec4(0.0), db = vec4(0.0);
  for (uint t = 0; t < p.T; t++) {
    const vec4 s = imageLoad(stats_in, int(t));
    const vec4 g = imageLoad(dout, int(t * texels + c4));
    dg += g * norm_hat(imageLoad(x, int(t * texels + c4)), s.x, s.y, s.z);
    db += g;
  }
  dgamma[c4] += dg;
  if (KIND != LAYERNORM_RMS) dbeta[c4] += db;
}

void main() {
  if (PARAMS) {
    params();
    return;
  }
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
  const float da = norm_scale_grad(KIND, st, n);

  // sum(g) and sum(g * dev)
  vec4 gs = vec4(0.0), gd = vec4(0.0);
  for (uint i = 0; i < texels; i++) {
    const vec4 g = imageLoad(dout, int(base + i)) * imageLoad(gamma, int(i));
    gs += g;
    gd += g * norm_dev(imageLoad(x, int(base + i)), m1, st.shift);
  }
  const float g_mean = norm_g_mean(KIND, total(gs), n), g_dev = total(gd);
  for (uint i = 0; i < texels; i++) {
    const vec4 dev = norm_dev(imageLoad(x, int(base + i)), m1, st.shift);
    const vec4 g = imageLoad(dout, int(base + i)) * imageLoad(gamma, int(i));
    dx[base + i] = norm_dx(g, g_mean, g_dev, st.scale, da, dev);
  }
  stats[row] = vec4(m1, st.shift, st.scale, 0.0);
}
