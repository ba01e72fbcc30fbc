#version 450
// One optimizer step on n parameters (training), element-wise, as torch.optim writes it:
//   AdamW: p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//          p -= lr (m / bias1) / (sqrt(v / bias2) + eps)
//   SGD (a specialization constant): p *= 1 - lr wd; p -= lr g   (m and v untouched)
// g is first scaled by the global clip, from the sum of squares of every gradient that
// grad_sum_squares.comp left on the device (the step needs no read-back): by
// min(1, clip / (norm + 1e-6)), torch.nn.utils.clip_grad_norm_'s factor. A norm that is not
// finite leaves everything as it was: the host stops the run on it, with the weights intact.
#extension GL_GOOGLE_include_directive : require
#include "optimizer.h"
#include "common/index.glsl"

layout(constant_id = 3) const bool SGD = false;

layout(binding = 0) buffer P { float param[]; };          // [n]
layout(binding = 1) buffer M { float m[]; };              // [n], AdamW's first moment
layout(binding = 2) buffer V { float v[]; };              // [n], its second moment
layout(binding = 3) readonly buffer G { float grad[]; };  // [n]
layout(binding = 4) readonly buffer NormSq { float norm_sq; };  // every gradient's sum of squares
layout(push_constant) uniform Push { AdamWPush p; };

void main() {
  const uint i = flat_index();
  if (i >= p.n) return;
  const float norm = sqrt(norm_sq);
  if (isnan(norm) || isinf(norm)) return;
  const float scale = p.clip > 0.0 ? min(1.0, p.clip / (norm + 1e-6)) : 1.0;
  const float g = grad[i] * scale;
  float w = param[i] * (1.0 - p.lr * p.weight_decay);
  if (SGD) {
    param[i] = w - p.lr * g;
    return;
  }
  const float mi = p.beta1 * m[i] + (1.0 - p.beta1) * g;
  const float vi = p.beta2 * v[i] + (1.0 - p.beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  param[i] = w - p.lr * (mi / p.bias1) / (sqrt(vi / p.bias2) + p.eps);
}
