// CPU reference of shaders/layernorm.comp.
#pragma once
#include <cstddef>

#include "model/ops/types.h"


namespace model::cpu {

// out[t, :] = gamma * normalise(x[t, :]) + beta              [T, C] -> [T, C]
// Standard: (x - mean) / sqrt(var + eps), population variance; StdPlusEps: (x - mean) /
// (std + eps), unbiased std (divide by C - 1). Two passes in double.
void layernorm(float* out, const float* x, const float* gamma, const float* beta, size_t T,
               size_t C, float eps, model::LayerNormKind kind);

}  // namespace model::cpu
