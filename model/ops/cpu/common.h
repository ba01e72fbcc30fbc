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
    case model::Activation::None: break;
  }
  return x;
}

// The value an fp16-stored weight has on the GPU: round to nearest even half, back to float.
float round_to_half(float x);

}  // namespace model::cpu
