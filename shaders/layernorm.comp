#version 450
// LayerNorm over the last dimension: one workgroup per row, looping over C, so any C works.
//   Standard:   out = gamma (x - mean) / sqrt(var + eps) + beta   (population variance)
//   StdPlusEps: out = gamma (x - mean) / (std + eps) + beta       (unbiased std, / (C - 1))
//   Rms:        out = gamma x / sqrt(mean(x^2) + eps)             (beta not read)
// The corrected two-pass statistics and the formulas are common/norm.glsl's: pass 1 gives a
// provisional mean m1; pass 2 sums d = x - m1 and d^2, each a tree over the workgroup.
#extension GL_GOOGLE_include_directive : require
#include "layernorm.h"
#include "common/index.glsl"
#include "common/norm.glsl"

layout(constant_id = 3) const uint KIND = LAYERNORM_STANDARD;

layout(binding = 0) writeonly buffer Out { float out_[]; };  // [T, C]
layout(binding = 1) readonly buffer X { float x[]; };        // [T, C]
layout(binding = 2) readonly buffer Gamma { float gamma[]; };  // [C]
layout(binding = 3) readonly buffer Beta { float beta[]; };    // [C]; Rms: not read
layout(push_constant) uniform Push { LayerNormPush p; };

const uint WG = gl_WorkGroupSize.x;
// One reduction carries both sums of pass 2 (d and d^2) at once.
#define REDUCE_T vec2
shared REDUCE_T red[LAYERNORM_MAX_WORKGROUP];  // WG used; Metal needs a fixed size
#include "common/reduce.glsl"

void main() {
  uint row = flat_group();
  if (row >= p.T) return;  // the whole workgroup leaves together: barriers stay uniform
  uint tid = gl_LocalInvocationID.x, base = row * p.C;
  float n = float(p.C);

  float s = 0.0;
  for (uint i = tid; i < p.C; i += WG) s += x[base + i];
  float m1 = norm_provisional_mean(KIND, workgroup_sum(vec2(s, 0.0)).x, n);

  vec2 acc = vec2(0.0);
  for (uint i = tid; i < p.C; i += WG) {
    float d = x[base + i] - m1;
    acc += vec2(d, d * d);
  }
  acc = workgroup_sum(acc);
  const NormStats st = norm_row_stats(KIND, acc.x, acc.y, n, p.eps);

  for (uint i = tid; i < p.C; i += WG)
    out_[base + i] = norm_apply(KIND, x[base + i], m1, st.shift, st.scale, gamma[i], beta[i]);
}
