// LayerNorm's arithmetic, written once for every shader that normalises rows x [T, C] (C = K
// for a matmul's fused LayerNorm), with gamma, beta [C]: layernorm.comp and layernorm_texel.comp,
// their backward passes, and the fused norm_linear of matmul_interleaved.glsl and
// matmul_vec_wide.glsl. One copy, so a fix or a change of formula reaches them all, and the
// backward's statistics stay the forward's (it recomputes them from x).
//   Standard (LAYERNORM_STANDARD):        y = gamma (x - mean) / sqrt(var + eps) + beta,
//                                          var the population variance (divide by C)
//   StdPlusEps (LAYERNORM_STD_PLUS_EPS):  y = gamma (x - mean) / (std + eps) + beta,
//                                          std the unbiased estimate (divide by C - 1)
//   Rms (LAYERNORM_RMS, T5's T5LayerNorm): y = gamma x / sqrt(mean(x^2) + eps), no beta
// Residual-stream rows have means in the thousands and a small spread, where E[x^2] - E[x]^2
// cancels catastrophically. So the statistics come from the corrected two-pass algorithm
// (Bjorck; Chan, Golub and LeVeque): pass 1 sums x, giving a provisional mean m1 = sum / C;
// pass 2 sums d = x - m1 and d^2. Near the mean x - m1 is exact (Sterbenz), sum(d) / C
// corrects m1's own rounding error, and sum(d^2) - sum(d)^2 / C is the sum of squared
// deviations without cancellation.
// The sums stay with the callers: each reduces in its own layout and order (a workgroup tree,
// vec4 partials added as (x + y) + (z + w) or as ((x + y) + z) + w, subgroup sums), and each
// shader's bits depend on its order, so these functions start from the finished sums. An
// order of operations changed here changes every one of those shaders' bits.
// Rms takes the same path with the provisional mean m1 = 0 (norm_provisional_mean) and shift 0,
// so that pass 2's sums are sum(x) and sum(x^2) and "dev" is x itself; beta is not read (its
// binding holds something else, and norm_apply adds nothing).
// `kind` is a LAYERNORM_* constant, from a specialization constant at every call, so its
// branches fold away. Nothing here uses shared memory.
#include "layernorm.h"

// Pass 1's provisional mean m1 from the row's sum of its n values: sum / n, or 0 for Rms.
float norm_provisional_mean(uint kind, float sum, float n) {
  return kind == LAYERNORM_RMS ? 0.0 : sum / n;
}

// A row's statistics after pass 2 (scalars, one set per row of [T, C]).
struct NormStats {
  float shift;  // mean - m1, the correction of the provisional mean (Rms: 0)
  float m2;     // sum of (x - mean)^2 over the row (Rms: sum of x^2)
  float scale;  // 1 / sqrt(var + eps) (Standard), 1 / (std + eps) (StdPlusEps) or
                // 1 / sqrt(mean(x^2) + eps) (Rms)
};

// The unbiased standard deviation of a row of n values whose squared deviations sum to m2.
float norm_std(float m2, float n) { return sqrt(m2 / (n - 1.0)); }

// From pass 2's sums over the row's n values: sd = sum(x - m1), sd2 = sum((x - m1)^2) (for Rms,
// m1 = 0: sum(x) and sum(x^2)).
NormStats norm_row_stats(uint kind, float sd, float sd2, float n, float eps) {
  NormStats s;
  if (kind == LAYERNORM_RMS) {
    s.shift = 0.0;
    s.m2 = sd2;
    s.scale = inversesqrt(sd2 / n + eps);
    return s;
  }
  s.shift = sd / n;
  s.m2 = max(sd2 - sd * s.shift, 0.0);
  s.scale = kind == LAYERNORM_STANDARD ? inversesqrt(s.m2 / n + eps)
                                       : 1.0 / (norm_std(s.m2, n) + eps);
  return s;
}

// One value's deviation from the row's mean, (x - m1) - shift: x - m1 first, exact near the
// mean. For one element (float) or four along C (vec4, the texel shaders).
float norm_dev(float x, float m1, float shift) { return (x - m1) - shift; }
vec4 norm_dev(vec4 x, float m1, float shift) { return (x - m1) - shift; }

// The normalised value x_hat = dev * scale, before gamma and beta.
float norm_hat(float x, float m1, float shift, float scale) {
  return norm_dev(x, m1, shift) * scale;
}
vec4 norm_hat(vec4 x, float m1, float shift, float scale) {
  return norm_dev(x, m1, shift) * scale;
}

// The LayerNorm's output for x: x_hat * gamma + beta (g and b: gamma and beta at x's channel);
// x_hat * gamma for Rms, whose b is whatever its caller bound there.
float norm_apply(uint kind, float x, float m1, float shift, float scale, float g, float b) {
  if (kind == LAYERNORM_RMS) return norm_hat(x, m1, shift, scale) * g;
  return norm_hat(x, m1, shift, scale) * g + b;
}
vec4 norm_apply(uint kind, vec4 x, float m1, float shift, float scale, vec4 g, vec4 b) {
  if (kind == LAYERNORM_RMS) return norm_hat(x, m1, shift, scale) * g;
  return norm_hat(x, m1, shift, scale) * g + b;
}

// Backward: d scale / d x_j divided by dev_j, for a row of n values with statistics st:
// -a^3 / n (Standard, Rms) or -a^2 / ((n - 1) std) (StdPlusEps; 0 where std = 0), a = st.scale.
float norm_scale_grad(uint kind, NormStats st, float n) {
  const float a = st.scale;
  if (kind != LAYERNORM_STD_PLUS_EPS) return -a * a * a / n;
  const float sd = norm_std(st.m2, n);
  return sd > 0.0 ? -a * a / ((n - 1.0) * sd) : 0.0;
}

// Backward: the mean of g = dout * gamma over the row's n values, from its sum: what dx
// subtracts from g for the mean's share; 0 for Rms, which subtracts no mean.
float norm_g_mean(uint kind, float sum_g, float n) {
  return kind == LAYERNORM_RMS ? 0.0 : sum_g / n;
}

// Backward: dx for one value, g = dout * gamma at its channel, with the row's mean of g, its
// sum of g * dev, and dev the value's norm_dev:
//   dx = a (g - mean(g)) + sum(g * dev) * da * dev,  a = scale, da = norm_scale_grad
// (Rms: mean(g) is 0, norm_g_mean, and dev is x).
float norm_dx(float g, float g_mean, float g_dev, float scale, float da, float dev) {
  return scale * (g - g_mean) + g_dev * da * dev;
}
vec4 norm_dx(vec4 g, float g_mean, float g_dev, float scale, float da, vec4 dev) {
  return scale * (g - g_mean) + g_dev * da * dev;
}
