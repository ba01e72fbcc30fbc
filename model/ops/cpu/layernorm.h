// CPU reference of shaders/layernorm.comp.
#pragma once
#include <cstddef>

#include "model/ops/types.h"


namespace model::cpu {

// out[t, :] = gamma * normalise(x[t, :]) + beta              [T, C] -> [T, C]
// Standard: (x - mean) / sqrt(var + eps), population variance; StdPlusEps: (x - mean) /
// (std + eps), unbiased std (divide by C - 1); Rms: x / sqrt(mean(x^2) + eps), no beta (beta may
// be null, and is not read). Two passes in double.
void layernorm(float* out, const float* x, const float* gamma, const float* beta, size_t T,
               size_t C, float eps, model::LayerNormKind kind);

// The backward of cpu::layernorm: dx from dout; dgamma, dbeta += their sums over the rows.
// Rms has no beta: dbeta may be null, and is not written.
//   dout [T, C], x [T, C], gamma [C] -> dx [T, C]; dgamma, dbeta [C] accumulated
void layernorm_backward(float* dx, float* dgamma, float* dbeta, const float* dout, const float* x,
                        const float* gamma, size_t T, size_t C, float eps,
                        model::LayerNormKind kind);

}  // namespace model::cpu
