// What the CPU references share. They compute in double and round once at the end.
#pragma once
#include <cmath>

#include "model/ops/types.h"


namespace model::cpu {

inline double activate(double x, model::Activation kind) {
  switch (kind) {
    case model::Activation::GeluTanh:
      return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    case model::Activation::GeluErf: return 0.5 * x * (1.0 + std::erf(x * 0.7071067811865476));
    case model::Activation::Relu: return x > 0 ? x : 0.0;
    case model::Activation::Tanh: return std::tanh(x);
    case model::Activation::Silu: return x / (1.0 + std::exp(-x));
    case model::Activation::None: break;
  }
  return x;
}

// f'(x) of activate (ReLU's at 0 is 0), in double.
inline double activation_slope(double x, model::Activation kind) {
  switch (kind) {
    case model::Activation::GeluTanh: {
      const double c = 0.7978845608028654, u = c * (x + 0.044715 * x * x * x), th = std::tanh(u);
      return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * c * (1.0 + 3 * 0.044715 * x * x);
    }
    case model::Activation::GeluErf:
      return 0.5 * (1.0 + std::erf(x * 0.7071067811865476)) +
             x * std::exp(-0.5 * x * x) * 0.3989422804014327;
    case model::Activation::Relu: return x > 0 ? 1.0 : 0.0;
    case model::Activation::Tanh: return 1.0 - std::tanh(x) * std::tanh(x);
    case model::Activation::Silu: {
      const double s = 1.0 / (1.0 + std::exp(-x));
      return s + x * s * (1.0 - s);
    }
    case model::Activation::None: break;
  }
  return 1.0;
}

// double(x) and float(x): the references widen every input and narrow each result once.
inline double wide(float x) {
  return static_cast<double>(x);
}
inline float narrow(double x) {
  return static_cast<float>(x);
}

// The value an fp16-stored weight has on the GPU: round to nearest even half, back to float.
float round_to_half(float x);

}  // namespace model::cpu
