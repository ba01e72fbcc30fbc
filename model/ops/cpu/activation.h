// CPU reference of shaders/activation.comp.
#pragma once
#include <cstddef>

#include "model/ops/types.h"


namespace model::cpu {

// out[n] = f(x[n]) with cpu::activate (double, std::tanh / std::erf)      [n] -> [n]
void activation(float* out, const float* x, size_t n, model::Activation kind);

// The backward of cpu::activation: dx = dout * f'(x) (ReLU's derivative at 0 is 0).
//   dout [n], x [n] -> dx [n]
void activation_backward(float* dx, const float* dout, const float* x, size_t n,
                         model::Activation kind);

}  // namespace model::cpu
