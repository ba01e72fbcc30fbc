#version 450
// The backward of layernorm.comp (training), in two passes (a specialization constant):
//   PARAMS = false: one workgroup per row, with layernorm.comp's two-pass statistics (the same
//     m1, shift and scale a, from common/norm.glsl): g = dout * gamma, then
//       dx = a (g - mean(g)) + sum(g * dev) * da * dev,  dev = (x - m1) - shift,
//     da = d a / d x_j / dev_j: -a^3 / C (Standard, Rms) or -a^2 / ((C - 1) std) (StdPlusEps);
//     Rms: m1 = shift = 0, so dev = x, and mean(g) is 0 (no mean subtracted);
//     the row's m1, shift and a go to stats for the second pass.
//   PARAMS = true: one invocation per channel, over the rows in order:
//       dgamma[c] += sum_t dout[t, c] dev[t, c] a[t],  dbeta[c] += sum_t dout[t, c]
//     (Rms has no beta: dbeta is not written, and its binding holds something else.)
//     No float atomics: the same bits every run.
#extension GL_GOOGLE_include_directive : require
#include "layernorm.h"
#include "common/index.glsl"
#include "common/norm.glsl"

layout(constant_id = 3) const uint KIND = LAYERNORM_STANDARD;
layout(constant_id = 4) const bool PARAMS = false;

layout(binding = 0) buffer Dx { float dx[]; };                // [T, C], written by pass 1
layout(binding = 1) buffer Dgamma { float dgamma[]; };        // [C], accumulated by pass 2
layout(binding = 2) buffer Dbeta { float dbeta[]; };          // [C], accumulated by pass 2
layout(binding = 3) buffer Stats { vec4 stats[]; };           // [T]: m1, shift, a (pass 1 -> 2)
layout(binding = 4) readonly buffer Dout { float dout[]; };   // [T, C]
layout(binding = 5) readonly buffer X { float x[]; };         // [T, C], the forward's input
layout(binding = 6) readonly buffer Gamma { float gamma[]; }; // [C]
layout(push_constant) uniform Push { LayerNormPush p; };

const uint WG = gl_WorkGroupSize.x;
#define REDUCE_T vec2
shared REDUCE_T red[LAYERNORM_MAX_WORKGROUP];  // WG used
#include "common/reduce.glsl"

void params() {
  const uint c = flat_index();
  if (c >= p.C) return;
  float dg = 0.0, db = 0.0;
  for (uint t = 0; t < p.T; t++) {
    const vec4 s = stats[t];
    const float g = dout[t * p.C + c];
    dg += g * norm_hat(x[t * p.C + c], s.x, s.y, s.z);
    db += g;
  }
  dgamma[c] += dg;
  if (KIND != LAYERNORM_RMS) dbeta[c] += db;
}

void main() {
  if (PARAMS) {
    params();
    return;
  }
  const uint row = flat_group();
  if (row >= p.T) return;  // the whole workgroup leaves together: barriers stay uniform
  const uint tid = gl_LocalInvocationID.x, base = row * p.C;
  const float n = float(p.C);

  float s = 0.0;
  for (uint i = tid; i < p.C; i += WG) s += x[base + i];
  const float m1 = norm_provisional_mean(KIND, workgroup_sum(vec2(s, 0.0)).x, n);
  vec2 acc = vec2(0.0);
  for (uint i = tid; i < p.C; i += WG) {
    const float d = x[base + i] - m1;
    acc += vec2(d, d * d);
  }
  acc = workgroup_sum(acc);
  const NormStats st = norm_row_stats(KIND, acc.x, acc.y, n, p.eps);
  const float da = norm_scale_grad(KIND, st, n);

  // sum(g) and sum(g * dev)
  vec2 gs = vec2(0.0);
  for (uint i = tid; i < p.C; i += WG) {
    const float g = dout[base + i] * gamma[i];
    gs += vec2(g, g * norm_dev(x[base + i], m1, st.shift));
  }
  gs = workgroup_sum(gs);
  const float g_mean = norm_g_mean(KIND, gs.x, n);
  for (uint i = tid; i < p.C; i += WG) {
    const float dev = norm_dev(x[base + i], m1, st.shift);
    dx[base + i] = norm_dx(dout[base + i] * gamma[i], g_mean, gs.y, st.scale, da, dev);
  }
  if (tid == 0) stats[row] = vec4(m1, st.shift, st.scale, 0.0);
}
