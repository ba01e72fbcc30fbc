// The MLP activations, shared by activation.comp and the matmul epilogue. `kind` is one of the
// ACT_* constants of common/types.h: a specialization constant in activation.comp and the
// storage-buffer matmuls, so the branch folds away; matmul_interleaved reads it from its push
// flags instead (one pipeline for every activation, MATMUL_ACT_IN_FLAGS).
#include "common/types.h"

float gelu_tanh(float x) {
  // GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). tanh through exp of a
  // non-positive argument, so large |x| cannot overflow to inf/inf.
  float u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  float e = exp(-2.0 * abs(u));
  float t = sign(u) * (1.0 - e) / (1.0 + e);
  return 0.5 * x * (1.0 + t);
}

// GLSL has no erf. A Taylor series below |x| = 0.5 keeps the relative error small near zero;
// above it, Numerical Recipes' erfc approximation (fractional error < 1.2e-7).
float erf_approx(float x) {
  float a = abs(x);
  float r;
  if (a < 0.5) {
    float x2 = a * a;
    // Taylor series of erf to x^11: relative error < 1e-8 for |x| < 0.5.
    r = a * (1.1283791670955126 + x2 * (-0.37612638903183754 + x2 * (0.11283791670955126 +
        x2 * (-0.026866170645131252 + x2 * (0.005223977625442188 + x2 * -0.0008548327023450852)))));
  } else {
    // erfc(a) = t exp(-a^2 - 1.26551223 + t P(t)), t = 1 / (1 + a/2) (Numerical Recipes erfcc,
    // fractional error < 1.2e-7 everywhere).
    float t = 1.0 / (1.0 + 0.5 * a);
    float p = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
              t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
              t * (-0.82215223 + t * 0.17087277))))))));
    r = 1.0 - t * exp(-a * a + p);
  }
  return sign(x) * r;
}

float gelu_erf(float x) { return 0.5 * x * (1.0 + erf_approx(x * 0.7071067811865476)); }

// tanh through exp of a non-positive argument, as in gelu_tanh: no inf/inf for large |x|.
float tanh_stable(float x) {
  float e = exp(-2.0 * abs(x));
  return sign(x) * (1.0 - e) / (1.0 + e);
}

// x sigmoid(x), the sigmoid through exp of a non-positive argument (no overflow for large |x|).
float sigmoid_stable(float x) {
  float e = exp(-abs(x));
  return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

float activate(float x, uint kind) {
  if (kind == ACT_GELU_TANH) return gelu_tanh(x);
  if (kind == ACT_TANH) return tanh_stable(x);
  if (kind == ACT_GELU_ERF) return gelu_erf(x);
  if (kind == ACT_RELU) return max(x, 0.0);
  if (kind == ACT_SILU) return x * sigmoid_stable(x);
  return x;
}

// f'(x) of activate(x, kind), for activation_backward.comp. ReLU's derivative at 0 is 0.
float activation_slope(float x, uint kind) {
  if (kind == ACT_GELU_TANH) {
    // 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 0.044715 x^2), t = tanh(u) as gelu_tanh takes it,
    // and 1 - t^2 = 4e / (1 + e)^2 (no cancellation as |t| -> 1).
    const float c = 0.7978845608028654;
    float u = c * (x + 0.044715 * x * x * x);
    float e = exp(-2.0 * abs(u));
    float t = sign(u) * (1.0 - e) / (1.0 + e);
    float sech2 = 4.0 * e / ((1.0 + e) * (1.0 + e));
    return 0.5 * (1.0 + t) + 0.5 * x * sech2 * c * (1.0 + 0.134145 * x * x);
  }
  if (kind == ACT_GELU_ERF)
    return 0.5 * (1.0 + erf_approx(x * 0.7071067811865476)) +
           x * exp(-0.5 * x * x) * 0.3989422804014327;
  if (kind == ACT_RELU) return x > 0.0 ? 1.0 : 0.0;
  if (kind == ACT_TANH) {  // 1 - tanh^2 = 4e / (1 + e)^2, e = exp(-2|x|)
    float e = exp(-2.0 * abs(x));
    return 4.0 * e / ((1.0 + e) * (1.0 + e));
  }
  if (kind == ACT_SILU) {  // s + x s (1 - s)
    float s = sigmoid_stable(x);
    return s + x * s * (1.0 - s);
  }
  return 1.0;
}
