// CPU reference of shaders/activation.comp.
#pragma once
#include <cstddef>

#include "model/gpu/common.h"  // gpu::Activation

namespace cpu {

// out[n] = f(x[n]) with cpu::activate (double, std::tanh / std::erf)      [n] -> [n]
void activation(float* out, const float* x, size_t n, gpu::Activation kind);

}  // namespace cpu
